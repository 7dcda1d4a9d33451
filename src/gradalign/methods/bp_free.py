"""BP-free training rules of SGR's baselines: FA, DFA, DRTP and PEPITA (Yang et al. 2024, Table 1 and Table 4).

On the BP-free PlainNet (`gradalign.models.bp_free_net`): a_l = W_l h_{l−1}, h_l = σ(a_l) for l = 1 … L, logits
o = W_{L+1} h_L. With the mean cross-entropy over a batch of N, ∂L/∂o = e/N, e = softmax(o) − onehot(y) (one row
per sample). A layer with pre-activation signal δ_l (N × n_l) gets the weight gradient δ_lᵀ h_{l−1} (bias: Σ_n δ_l),
computed by `layer_grads` as a vector-Jacobian product inside that one layer (input detached): no rule here runs
autograd through more than one layer. The rules differ only in δ_l of the hidden layers:

| rule                                 | δ_l of a hidden layer l                            | output layer          |
|--------------------------------------|----------------------------------------------------|-----------------------|
| global BP                            | (δ_{l+1} W_{l+1}) ⊙ σ′(a_l)                         | e/N                   |
| FA (Lillicrap et al. 2016)           | (δ_{l+1} B_{l+1}) ⊙ σ′(a_l), B_{l+1} of W's shape   | e/N                   |
| DFA (Nøkland 2016)                   | (e B_l / N) ⊙ σ′(a_l), B_l ∈ R^{K×n_l}              | e/N                   |
| DRTP (Frenkel et al. 2021)           | (onehot(y) B_l / N) ⊙ σ′(a_l)                       | e/N                   |
| PEPITA (Dellaferrera & Kreiman 2022) | (h_l − h′_l)/N, with input h′_{l−1} (see below)     | e′/N, with input h′_L |

Yang et al. (2024) compare these in Table 1 (attributes, `ATTRIBUTES`) and quote FA, DRTP and PEPITA's CIFAR
accuracies in Table 4 from Dellaferrera & Kreiman (2022) (PlainNet 3072 → 1024 → 10, batch 64, lr 0.01, SGD
momentum 0.9, no bias, no BN, inputs in [0, 1]).

Feedback matrices (`make_feedback`, buffers of a `Feedback`, never trained) are drawn U(±sqrt(6/fan_in)) with
torch's fan_in of the stored shape (size(1)): n_{l−1} for FA's B_l (W_l's fan-in), n_l for DFA / DRTP's
K × n_l matrices (DRTP's code: `kaiming_uniform_` on [classes, n_l]). PEPITA's F (d_in × K) is U(±0.05·sqrt(6/d_in)).
The /N of DRTP's projected target is our choice (its code adds no batch factor; it only rescales the step).

PEPITA: forward 1 gives e; the input is modulated, x′ = x + e Fᵀ; forward 2 on x′ gives h′_l and e′ =
softmax(o′) − onehot(y). Its code applies W_l ← W_l + η ΔW_l/N with ΔW_1 = −(h_1 − h′_1)ᵀ x′, ΔW_l =
−(h_l − h′_l)ᵀ h′_{l−1}, ΔW_{L+1} = −e′ᵀ h′_L. Sign convention here: .grad holds −ΔW/N, i.e. (h_l − h′_l)ᵀ h′_{l−1}/N
and e′ᵀ h′_L/N, so SGD's W ← W − η·grad is PEPITA's step (torch's momentum, buf ← μ·buf + grad, W ← W − η·buf,
equals its code's v ← μv + ηΔW/N, W ← W + v at a constant η). PEPITA has no biases; with `bias` they get
Σ_n δ_l (our choice).

Conv blocks (`models.bp_free_net.ConvBPFreeNet`, our conv reading): a_l = conv_l(h_{l−1}) is a linear map of
h_{l−1}, so the same table holds with "δ W" read as that map's vector-Jacobian product (`transpose`: the transposed
convolution, `torch.nn.grad.conv2d_input`) at the forward weight W_{l+1} (global BP) or at FA's fixed B_{l+1} of W's
shape (C_out × C_in × 3 × 3; no weight transport); DFA / DRTP project onto the flattened a_l (B_l ∈ R^{K×n_l},
n_l = C_l·H_l·W_l) and reshape; PEPITA's x′ = x + e Fᵀ is reshaped to the image (F ∈ R^{d_in×K}, d_in = C·H·W) and
δ_l = (h_l − h′_l)/N is taken at the block's output map. A conv weight's fan-in is C_in·3·3 (torch's).
PEPITA's own code for its conv networks (`GiorgiaD/PEPITA`, commit 3fe03d8, `models.compute_delta_w_conv` and
`main_pytorch.py`) sums (h − h′) ⊗ input patch over the output positions, then divides by their number and by the
batch twice, applies it with the sign opposite to its fully connected layers' update, and trains the output layer of a
one-conv net on the first pass's e. Ours (our choice): every layer by the one rule above, the conv as the linear map it
is, the sign of the fully connected update (the paper's ΔW_l = (h_l − h′_l) ⊗ h′_{l−1}, applied as W − ηΔW/N), one /N,
e′ at the output layer; the learning rate, tuned on validation, absorbs the scale.

We compute every rule explicitly, with no tensor hooks: a hooked tensor that does not require grad falls back
silently to BP, and torch.autograd.grad does not call hooks on an input tensor (book/appendix/protocols.md).

Table 1's attributes are declared in `ATTRIBUTES`; `measured_attributes` derives two of them from a rule's code.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from gradalign.models.bp_free_net import BPFreeNet, Trace

Rule = Callable[[BPFreeNet, "Feedback", Trace, torch.Tensor], dict]


class Feedback(nn.Module):
    """A method's fixed random matrices, as buffers (saved and moved with it, never parameters). `B{l}` belongs to
    layer l (FA: W_l's stand-in; DFA / DRTP: the projection onto layer l); PEPITA's `F` belongs to the input."""

    def __init__(self, method: str, matrices: dict[str, torch.Tensor]):
        super().__init__()
        self.method = method
        for name, matrix in matrices.items():
            self.register_buffer(name, matrix)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.get_buffer(name)


def _kaiming(shape: tuple[int, ...]) -> tuple[tuple[int, ...], float]:
    fan_in = math.prod(shape[1:])  # torch's fan_in: size(1), times the kernel's size for a conv weight
    return shape, (6.0 / fan_in) ** 0.5  # U(±sqrt(6/fan_in))


FEEDBACK_SHAPES: dict[str, Callable[[BPFreeNet], dict]] = {
    "global_bp": lambda net: {},
    # B_k of W_k's shape, k = 2 … L + 1 (no B_1: nothing goes below layer 1)
    "fa": lambda net: {f"B{k}": _kaiming(tuple(net.layers[k - 1].weight.shape)) for k in range(2, len(net.layers) + 1)},
    # B_k ∈ R^{K × n_k}, k = 1 … L
    "dfa": lambda net: {f"B{k}": _kaiming((net.classes, n)) for k, n in enumerate(net.hidden, 1)},
    "drtp": lambda net: {f"B{k}": _kaiming((net.classes, n)) for k, n in enumerate(net.hidden, 1)},
    "pepita": lambda net: {"F": ((net.in_features, net.classes), 0.05 * (6.0 / net.in_features) ** 0.5)},
}
"""Each method's feedback matrices: name -> (shape, bound of the uniform draw)."""


def make_feedback(method: str, net: BPFreeNet, classes: int, generator: torch.Generator | None = None) -> Feedback:
    """The method's fixed feedback for `net` (dtype and device of its weights), drawn from `generator`."""
    if method not in FEEDBACK_SHAPES:
        raise ValueError(f"unknown BP-free method {method!r}; one of {', '.join(FEEDBACK_SHAPES)}")
    if classes != net.classes:
        raise ValueError(f"classes ({classes}) differs from the network's output size ({net.classes})")
    like, matrices = net.out.weight, {}
    for name, (shape, bound) in FEEDBACK_SHAPES[method](net).items():
        draw = torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1  # float64: the same draw any dtype
        matrices[name] = (draw * bound).to(dtype=like.dtype, device=like.device)
    return Feedback(method, matrices)


# --- the rules: (net, feedback, trace, y) -> {parameter name: gradient} ---------------------------------------


def output_error(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """e = softmax(o) − onehot(y), one row per sample (N·∂L/∂o for the mean cross-entropy)."""
    return torch.softmax(logits, 1) - F.one_hot(y, logits.shape[1]).to(logits.dtype)


def layer_grads(layer: nn.Module, h_in: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """∂⟨δ, layer(h_in)⟩/∂θ for the layer's parameters (δᵀh_in and Σ_n δ for a Linear): autograd in this layer only."""
    with torch.enable_grad():
        return torch.autograd.grad(layer(h_in.detach()), tuple(layer.parameters()), grad_outputs=delta)


def _gradients(net: BPFreeNet, inputs: list[torch.Tensor], deltas: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each layer's parameter gradients from its input h_{l−1} and its signal δ_l (l = 1 … L + 1)."""
    names = [f"blocks.{i}" for i in range(len(net.blocks))] + ["out"]
    grads = {}
    for prefix, layer, h_in, delta in zip(names, net.layers, inputs, deltas, strict=True):
        for (name, _), grad in zip(layer.named_parameters(), layer_grads(layer, h_in, delta)):
            grads[f"{prefix}.{name}"] = grad
    return grads


def _expect(feedback: Feedback, method: str) -> None:
    if feedback.method != method:
        raise ValueError(f"this feedback was made for {feedback.method!r}, not {method!r}")


def transpose(layer: nn.Module, weight: torch.Tensor, delta: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """δ M: the vector-Jacobian product of the layer's linear map, with `weight` (W or FA's B, W's shape) in place
    of its own, with respect to its input; shaped like `like` (the pre-activation a below it). A Linear: δ @ M; a
    Conv2d: the transposed convolution at M (`torch.nn.grad.conv2d_input`)."""
    if isinstance(layer, nn.Conv2d):
        shape = (like.shape[0], weight.shape[1] * layer.groups, *like.shape[2:])
        out = torch.nn.grad.conv2d_input(
            shape, weight, delta, layer.stride, layer.padding, layer.dilation, layer.groups
        )
        return out.view_as(like)
    return (delta @ weight).view_as(like)


def _chain(net: BPFreeNet, trace: Trace, y: torch.Tensor, backward: Callable[[int], torch.Tensor]) -> dict:
    """δ_{L+1} = e/N, δ_l = (δ_{l+1} M_{l+1}) ⊙ σ′(a_l), M = backward(l + 1): W for BP, B for FA (`transpose`)."""
    deltas = [output_error(trace.logits, y) / len(y)]
    for k in range(len(net.blocks), 0, -1):
        a = trace.pre[k - 1]
        deltas.insert(0, transpose(net.layers[k], backward(k + 1), deltas[0], a) * net.sigma_prime(a))
    return _gradients(net, trace.inputs, deltas)


def _direct(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor, signal: torch.Tensor) -> dict:
    """δ_l = (signal B_l) ⊙ σ′(a_l) for every hidden layer at once (one hop); the output layer on e/N."""
    deltas = [(signal @ feedback[f"B{k}"]).view_as(a) * net.sigma_prime(a) for k, a in enumerate(trace.pre, 1)]
    return _gradients(net, trace.inputs, [*deltas, output_error(trace.logits, y) / len(y)])


def global_bp_rule(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> dict:
    """Backprop, written as a rule: the error goes down through the forward weights W_{l+1} (weight transport)."""
    return _chain(net, trace, y, lambda k: net.layers[k - 1].weight.detach())


def fa_rule(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> dict:
    """Feedback alignment: backprop with the fixed B_{l+1} in place of W_{l+1} (Lillicrap et al. 2016)."""
    _expect(feedback, "fa")
    return _chain(net, trace, y, lambda k: feedback[f"B{k}"])


def dfa_rule(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> dict:
    """Direct feedback alignment: the output error e/N projected onto each layer by B_l (Nøkland 2016)."""
    _expect(feedback, "dfa")
    return _direct(net, feedback, trace, y, output_error(trace.logits, y) / len(y))


def drtp_rule(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> dict:
    """Direct random target projection: the target onehot(y)/N projected by B_l, no error (Frenkel et al. 2021)."""
    _expect(feedback, "drtp")
    onehot = F.one_hot(y, net.classes).to(trace.logits.dtype)
    return _direct(net, feedback, trace, y, onehot / len(y))


def pepita_rule(net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> dict:
    """PEPITA: a second forward pass on x′ = x + e Fᵀ; .grad = (h_l − h′_l)ᵀ h′_{l−1}/N and e′ᵀ h′_L/N (module
    docstring for the sign). Dellaferrera & Kreiman (2022)."""
    _expect(feedback, "pepita")
    x = trace.inputs[0]
    modulated = net.forward_trace(x + (output_error(trace.logits, y) @ feedback["F"].T).view_as(x))
    n = len(y)
    # at each block's output, shaped as its pre-activation (a conv net's last h is kept flattened in the trace)
    deltas = [((h - h_mod) / n).view_as(a) for h, h_mod, a in zip(trace.inputs[1:], modulated.inputs[1:], trace.pre)]
    return _gradients(net, modulated.inputs, [*deltas, output_error(modulated.logits, y) / n])


RULES: dict[str, Rule] = {
    "global_bp": global_bp_rule,
    "fa": fa_rule,
    "dfa": dfa_rule,
    "drtp": drtp_rule,
    "pepita": pepita_rule,
}


# --- the steps ---------------------------------------------------------------------------------------------


def apply_rule(rule: Rule, net: BPFreeNet, feedback: Feedback, optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One forward trace, the rule's gradients written to .grad, one optimizer step; the pre-step loss and accuracy."""
    trace = net.forward_trace(x)
    grads = rule(net, feedback, trace, y)
    optimizer.zero_grad(set_to_none=True)
    for name, param in net.named_parameters():
        param.grad = grads[name]
    optimizer.step()
    return {"loss": F.cross_entropy(trace.logits, y).detach(), "acc": (trace.logits.argmax(1) == y).float().mean()}


def fa_step(net: BPFreeNet, feedback: Feedback, optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    return apply_rule(fa_rule, net, feedback, optimizer, x, y)


def dfa_step(net: BPFreeNet, feedback: Feedback, optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    return apply_rule(dfa_rule, net, feedback, optimizer, x, y)


def drtp_step(net: BPFreeNet, feedback: Feedback, optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    return apply_rule(drtp_rule, net, feedback, optimizer, x, y)


def pepita_step(net: BPFreeNet, feedback: Feedback, optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    return apply_rule(pepita_rule, net, feedback, optimizer, x, y)


BP_FREE_METHODS: dict[str, Callable] = {"fa": fa_step, "dfa": dfa_step, "drtp": drtp_step, "pepita": pepita_step}


# --- Table 1: declared attributes, and two of them measured on the rules -------------------------------------

VALUES = ("yes", "no", "partially")


@dataclass(frozen=True)
class Attributes:
    """One row of Table 1 (Yang et al. 2024), with the reason read off the rule."""

    weight_transport_free: str
    update_unlocking: str
    bp_free: str
    why: str = ""

    def __post_init__(self):
        for name in ("weight_transport_free", "update_unlocking", "bp_free"):
            if getattr(self, name) not in VALUES:
                raise ValueError(f"{name} must be one of {', '.join(VALUES)}, got {getattr(self, name)!r}")


ATTRIBUTES: dict[str, Attributes] = {
    "global_bp": Attributes("no", "no", "no", "δ_l = (δ_{l+1} W_{l+1}) ⊙ σ′(a_l): W carried back, layer after layer"),
    "fa": Attributes("yes", "no", "no", "B_{l+1} replaces W_{l+1}, but δ_l still waits for δ_{l+1}: BP's chain"),
    "dfa": Attributes("yes", "partially", "yes", "δ_l = (e B_l) ⊙ σ′(a_l): one hop, but e needs the full forward"),
    "pepita": Attributes("yes", "partially", "yes", "no backward; the update waits for a second forward pass"),
    "drtp": Attributes("yes", "yes", "yes", "δ_l = (onehot(y) B_l) ⊙ σ′(a_l): the label is known before the forward"),
    "sgr_bp_free": Attributes(
        "yes", "yes", "yes", "each layer trains on its own fixed ETF head: no cross-layer signal"
    ),
}
"""Table 1, in the paper's row order; `sgr_bp_free` is the paper's "Ours" (Table 4's BP-free SGR)."""

TITLES = {"global_bp": "Global BP", "fa": "FA", "dfa": "DFA", "pepita": "PEPITA", "drtp": "DRTP", "sgr_bp_free": "Ours"}
MEASURED = ("weight_transport_free", "bp_free")


def attributes_table() -> list[dict[str, str]]:
    """Table 1's rows for rendering."""
    return [
        {
            "method": TITLES[name],
            "weight transport free": a.weight_transport_free,
            "update unlocking": a.update_unlocking,
            "BP-free": a.bp_free,
            "why": a.why,
        }
        for name, a in ATTRIBUTES.items()
    ]


def _redraw_(tensor: torch.Tensor, generator: torch.Generator | None) -> None:
    with torch.no_grad():
        tensor.copy_(torch.randn(tensor.shape, generator=generator, dtype=torch.float64))


def _hidden_updates(rule: Rule, net: BPFreeNet, feedback: Feedback, trace: Trace, y: torch.Tensor) -> list:
    grads = rule(net, feedback, trace, y)
    return [grads[f"blocks.{i}.weight"] for i in range(len(net.blocks))]


def _baseline(rule, net, feedback, x, y) -> tuple[Trace, list]:
    trace = net.forward_trace(x)
    base = _hidden_updates(rule, net, feedback, trace, y)
    if any(not g.abs().max() > 0 for g in base):
        raise ValueError("a hidden layer's update is zero on this batch: measure on a net with active units")
    return trace, base


def _changed(new: torch.Tensor, old: torch.Tensor) -> bool:
    return not torch.allclose(new, old, rtol=1e-6, atol=1e-12)


def reads_higher_weights(rule: Rule, net: BPFreeNet, feedback: Feedback, x, y, generator=None) -> bool:
    """Whether some hidden layer k's update changes when the forward weights of layers k + 1 … L + 1 are redrawn
    after the forward pass (the trace kept): then the rule carries those weights backward (weight transport)."""
    trace, base = _baseline(rule, net, feedback, x, y)
    for k in range(1, len(net.blocks) + 1):
        other = copy.deepcopy(net)
        for layer in other.layers[k:]:
            _redraw_(layer.weight, generator)
        if _changed(_hidden_updates(rule, other, feedback, trace, y)[k - 1], base[k - 1]):
            return True
    return False


def chains_errors(rule: Rule, net: BPFreeNet, feedback: Feedback, x, y, generator=None) -> bool:
    """Whether some hidden layer k's update changes when everything of the layers m = k + 1 … L between it and the
    output is redrawn (W_m, b_m, the feedback B_m they own, their forward values a_m, h_m; the logits kept): then
    the learning signal reaches k through more than one layer (not BP-free). Needs L ≥ 2 hidden blocks."""
    if len(net.blocks) < 2:
        raise ValueError(f"chains_errors needs at least 2 hidden blocks, got {len(net.blocks)}")
    trace, base = _baseline(rule, net, feedback, x, y)
    owned = dict(feedback.named_buffers())
    for k in range(1, len(net.blocks)):
        other, other_fb = copy.deepcopy(net), copy.deepcopy(feedback)
        inputs, pre = list(trace.inputs), list(trace.pre)
        for m in range(k + 1, len(net.blocks) + 1):
            for param in other.blocks[m - 1].parameters():
                _redraw_(param, generator)
            if f"B{m}" in owned:
                _redraw_(other_fb[f"B{m}"], generator)
            pre[m - 1], inputs[m] = pre[m - 1].clone(), inputs[m].clone()
            _redraw_(pre[m - 1], generator)
            _redraw_(inputs[m], generator)
        redrawn = Trace(inputs, pre, trace.logits)
        if _changed(_hidden_updates(rule, other, other_fb, redrawn, y)[k - 1], base[k - 1]):
            return True
    return False


def measured_attributes(rule: Rule, net: BPFreeNet, feedback: Feedback, x, y, generator=None) -> dict[str, str]:
    """Table 1's "weight transport free" and "BP-free", derived from what the rule reads."""
    return {
        "weight_transport_free": "no" if reads_higher_weights(rule, net, feedback, x, y, generator) else "yes",
        "bp_free": "no" if chains_errors(rule, net, feedback, x, y, generator) else "yes",
    }


def attribute_mismatches(declared: Attributes, measured: dict[str, str]) -> list[str]:
    """The measured attributes whose declared value differs."""
    return [name for name in MEASURED if getattr(declared, name) != measured[name]]
