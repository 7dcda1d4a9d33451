"""Local-BP training of a network split into K modules (Yang et al. 2024, §3, §4.1, §4.3, Algorithm 1).

The network is f = h_K ∘ f_K ∘ … ∘ f_1: feature modules f_k (parameters θ_k) and its own classifier h_K.
Local learning gives every module k < K a local head h_k and trains θ_k (with the head) on its local loss
L_k = CE(h_k(x_k), y), x_k = f_k(x_{k−1}), with x_{k−1} detached: no gradient crosses a module boundary
(§3.1, Eq. 1–2). The last module's local loss is the network's own loss. One optimizer per module and its
head (Algorithm 1). Each step function here has the signature

    step(modules, heads, optimizers, x, y, settings) -> diagnostics (detached scalar tensors)

and `LOCAL_METHODS` maps each method to its step (a dict, no branching on names). The update orders:

| method      | what module k trains on           | when it steps        | input of module k + 1          |
|-------------|-----------------------------------|----------------------|--------------------------------|
| `global_bp` | L_K through every module (K = 1)  | once, after backward | —                              |
| `layerwise` | L_k (Belilovsky head)             | at once              | x_k before the step, detached  |
| `reforward` | L_k                               | at once              | x_k recomputed after the step  |
| `sgr`       | L_k + λ·L_k^SGR (Eq. 5–6)         | at once              | x_k before the step, detached  |
| `greedy`    | L_k through a GAP + linear head   | at once              | x_k before the step, detached  |
| `dgl`       | L_k through DGL's 2-conv head     | at once              | x_k before the step, detached  |
| `infopro`   | w_ce·CE + w_rec·BCE (`infopro`)   | all, after the pass  | x_k, detached                  |

`layerwise` is the non-greedy order of DGL and of SGR's Algorithm 1 (book/appendix/protocols.md, "Update order").
`greedy` is built as InfoPro's "Greedy SL" (every module at once with a GAP + linear head, '0c1f'), not
Belilovsky et al.'s sequential greedy training (which trains module 1 to the end before module 2 starts):
SGR's Greedy numbers sit close to InfoPro's Greedy SL (book/appendix/protocols.md). InfoPro steps every module once
after the whole forward pass; since every module's gradient depends only on the values before any step (inputs
are detached), this gives the same update as the layer-wise order, only scheduled differently.

Diagnostics, every method: the final loss and batch accuracy; each module's local CE `local_loss_k`
(k = 1 … K); and the SGR term `sgr_k` (k = 2 … K) of Eq. 6, L^SGR(∂L_k/∂x_{k−1}, ∂L_{k−1}/∂x_{k−1}), where
both gradients are those of the module's training objective. Methods that do not train on it read both
gradients off the backward pass they run anyway (`x_{k−1}.grad` and the retained `x_{k−1}` gradient of the
previous module): no `create_graph`, no extra backward (Figure 2 compares the term across methods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn import functional as F

from gradalign.config import Settings, require
from gradalign.methods.infopro import RESNET32_WEIGHTS, infopro_weights
from gradalign.methods.sgr import REDUCTIONS, SGR_LAMBDA, module_step, reconciliation_loss

METHOD_HEADS = {
    "global_bp": None,  # no local heads: the network's own classifier only
    "layerwise": "belilovsky",  # SGR's CIFAR head (App. E, following Belilovsky et al. 2019, k = 2)
    "reforward": "belilovsky",
    "sgr": "belilovsky",
    "greedy": "gap_linear",  # InfoPro's Greedy SL ('0c1f')
    "dgl": "dgl",  # DGL's "cnn" auxiliary head
    "infopro": "infopro",  # InfoPro's '1c2f' head (+ its decoder, methods.infopro)
}
"""Each method's local head; greedy, dgl and infopro are defined by theirs, the others default to SGR's."""

HEAD_DEFINES_METHOD = ("greedy", "dgl", "infopro")


@dataclass(frozen=True)
class LocalSettings(Settings):
    """A local-learning method on K modules. `head` None: the method's own (`METHOD_HEADS`)."""

    method: str = "sgr"
    modules: int = 16  # K; global BP is one module
    head: str | None = None
    lam: float = SGR_LAMBDA  # λ of Eq. 5
    reduction: str = "mean"  # Algorithm 1's nn.MSELoss(); "sum": summed over features (λ shrinks by 1/D)
    infopro_weights: tuple[float, ...] | None = None  # (rec_first, ce_first, rec_last, ce_last); None: InfoPro's

    @property
    def head_kind(self) -> str | None:
        return self.head if self.head is not None else METHOD_HEADS.get(self.method)

    @property
    def infopro_schedule(self) -> tuple[float, float, float, float]:
        return tuple(self.infopro_weights) if self.infopro_weights is not None else RESNET32_WEIGHTS[self.modules]

    def validate(self) -> None:
        from gradalign.models.local_heads import HEADS

        require(self, "method", self.method in LOCAL_METHODS, f"must be one of {', '.join(LOCAL_METHODS)}")
        if self.method == "global_bp":
            require(self, "modules", self.modules == 1, "must be 1 for global_bp (one backward through everything)")
            require(self, "head", self.head is None, "must be null for global_bp (it has no local heads)")
        else:
            require(self, "modules", self.modules >= 2, f"must be >= 2 for a local method ({self.method})")
            require(self, "head", self.head_kind in HEADS, f"must be one of {sorted(HEADS)} or null")
        if self.method in HEAD_DEFINES_METHOD:
            own = METHOD_HEADS[self.method]
            require(self, "head", self.head_kind == own, f"must be {own!r} (or null) for {self.method}")
        require(self, "lam", self.lam >= 0, "must be >= 0")
        require(self, "reduction", self.reduction in REDUCTIONS, f"must be one of {', '.join(REDUCTIONS)}")
        if self.infopro_weights is not None:
            ok = len(self.infopro_weights) == 4 and all(w >= 0 for w in self.infopro_weights)
            require(self, "infopro_weights", ok, "must be 4 numbers >= 0 (rec_first, ce_first, rec_last, ce_last)")
        elif self.method == "infopro":
            known = sorted(RESNET32_WEIGHTS)
            require(self, "modules", self.modules in known, f"must be one of {known} unless infopro_weights is given")


# --- the parts every local step shares ---------------------------------------------------------------------


class Diagnostics(dict):
    """The step's detached scalars: local losses, SGR terms, the final loss and accuracy."""

    def module(self, k: int, loss: torch.Tensor, sgr: torch.Tensor | None) -> None:
        self[f"local_loss_{k + 1}"] = loss.detach()
        if sgr is not None:
            self[f"sgr_{k + 1}"] = sgr.detach()

    def final(self, logits: torch.Tensor, loss: torch.Tensor, y: torch.Tensor) -> Diagnostics:
        self["loss"] = loss.detach()
        self["acc"] = (logits.detach().argmax(1) == y).float().mean()
        return self


def measured_sgr(delta_now: torch.Tensor | None, delta_pre: torch.Tensor | None, reduction: str):
    """Eq. 6 on gradients already computed (no graph), or None where there is no pair (module 1)."""
    if delta_now is None or delta_pre is None:
        return None
    with torch.no_grad():
        return reconciliation_loss(delta_now, delta_pre, reduction)


@dataclass
class LocalPass:
    """One module's forward and backward on its detached input (gradients land in .grad)."""

    output: torch.Tensor  # x_k, detached (pre-step)
    logits: torch.Tensor
    loss: torch.Tensor  # the local CE
    delta_in: torch.Tensor | None  # ∂(objective)/∂x_{k−1}
    delta_out: torch.Tensor  # ∂(objective)/∂x_k


def local_pass(module, objective: Callable, x_in: torch.Tensor, want_input_grad: bool) -> LocalPass:
    """Run module on x_in (detached), `objective(out) -> (objective, logits, ce)`, backward once."""
    x = x_in.detach().requires_grad_(want_input_grad)
    out = module(x)
    out.retain_grad()
    value, logits, ce = objective(out)
    value.backward()
    return LocalPass(out.detach(), logits, ce.detach(), x.grad if want_input_grad else None, out.grad)


def cross_entropy_objective(head, y: torch.Tensor) -> Callable:
    def objective(out):
        logits = head(out)
        loss = F.cross_entropy(logits, y)
        return loss, logits, loss

    return objective


# --- the methods -------------------------------------------------------------------------------------------


def global_bp_step(modules, heads, optimizers, x, y, settings: LocalSettings) -> dict:
    """Global BP: one backward of the network's loss through every module (the reference)."""
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    h = x
    for module in modules:
        h = module(h)
    logits = heads[-1](h)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    for opt in optimizers:
        opt.step()
    out = Diagnostics()
    out.module(len(modules) - 1, loss, None)
    return out.final(logits, loss, y)


def _stepwise(modules, heads, optimizers, x, y, settings: LocalSettings, reforward: bool) -> dict:
    """Non-greedy layer-wise training: module k steps at once on L_k and passes on x_k (or x_k re-forwarded)."""
    out, h, delta_pre, last = Diagnostics(), x, None, len(modules) - 1
    for k, (module, head, opt) in enumerate(zip(modules, heads, optimizers)):
        opt.zero_grad(set_to_none=True)
        step = local_pass(module, cross_entropy_objective(head, y), h, want_input_grad=k > 0)
        opt.step()
        out.module(k, step.loss, measured_sgr(step.delta_in, delta_pre, settings.reduction))
        if reforward and k < last:
            with torch.no_grad():  # the updated module's output is the next input (BN statistics update too)
                h = module(h)
        else:
            h = step.output
        delta_pre = step.delta_out
    return out.final(step.logits, step.loss, y)


def layerwise_step(modules, heads, optimizers, x, y, settings: LocalSettings) -> dict:
    return _stepwise(modules, heads, optimizers, x, y, settings, reforward=False)


def reforward_step(modules, heads, optimizers, x, y, settings: LocalSettings) -> dict:
    return _stepwise(modules, heads, optimizers, x, y, settings, reforward=True)


def sgr_step(modules, heads, optimizers, x, y, settings: LocalSettings) -> dict:
    """Layer-wise order with module k ≥ 2 trained on L_k + λ·L_k^SGR (Eq. 5) through `methods.sgr.module_step`,
    which stores δ = ∂L_k/∂x_k at every module for the next one."""
    out, h, delta_pre = Diagnostics(), x, None
    for k, (module, head, opt) in enumerate(zip(modules, heads, optimizers)):
        seen = {}

        def local_loss(features, head=head, seen=seen):
            seen["logits"] = head(features)
            return F.cross_entropy(seen["logits"], y)

        opt.zero_grad(set_to_none=True)
        objective, step = module_step(module, local_loss, h, delta_pre, settings.lam, settings.reduction)
        objective.backward()
        opt.step()
        out.module(k, step.loss_local, step.loss_sgr)
        delta_pre, h = step.delta_out, step.output
    return out.final(seen["logits"], step.loss_local, y)


def infopro_step(modules, heads, optimizers, x, y, settings: LocalSettings) -> dict:
    """InfoPro (softmax variant): every local module on w_ce·CE + w_rec·BCE (`methods.infopro`), the last on the
    network's loss; all gradients from one pass, then every module steps (InfoPro's order)."""
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    out, h, delta_pre, last = Diagnostics(), x, None, len(modules) - 1
    for k, (module, head) in enumerate(zip(modules, heads)):
        if k < last:
            w_rec, w_ce = infopro_weights(k, len(modules), settings.infopro_schedule)

            def objective(features, head=head, w_rec=w_rec, w_ce=w_ce, k=k):
                value, ce, rec = head.local_loss(features, x, y, w_rec, w_ce)
                out[f"reconstruction_{k + 1}"] = rec.detach()
                return value, None, ce

        else:
            objective = cross_entropy_objective(head, y)
        step = local_pass(module, objective, h, want_input_grad=k > 0)
        out.module(k, step.loss, measured_sgr(step.delta_in, delta_pre, settings.reduction))
        delta_pre, h = step.delta_out, step.output
    for opt in optimizers:
        opt.step()
    return out.final(step.logits, step.loss, y)


LOCAL_METHODS: dict[str, Callable] = {
    "global_bp": global_bp_step,
    "layerwise": layerwise_step,
    "reforward": reforward_step,
    "sgr": sgr_step,
    "greedy": layerwise_step,  # the layer-wise order with InfoPro's Greedy SL head (GAP + linear)
    "dgl": layerwise_step,  # the layer-wise order with DGL's head
    "infopro": infopro_step,
}
"""Each method's step function; greedy and dgl differ from layer-wise by their head only (`METHOD_HEADS`)."""

TITLES = {
    "global_bp": "Global BP",
    "layerwise": "Layer-wise",
    "reforward": "Reforward",
    "sgr": "SGR",
    "greedy": "Greedy",
    "dgl": "DGL",
    "infopro": "InfoPro",
}
