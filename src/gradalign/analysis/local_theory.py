"""Small exact models for the theory of SGR (Yang et al. 2024, §3 and Appendices A-C), all in float64.

One section per element of notebook sgr/01 (the checks are in `gradalign.experiments.sgr.theory`; Eq. 35 and
Table 8 are in `gradalign.analysis.sgr_gradient_cost`):

- Eq. 7, Lemma C.2: the geometry of a fixed ETF head; one CE gradient step on a feature through it.
- Eq. 5-6: a chain of tanh MLP blocks with linear local heads trained by Algorithm 1 (`module_step`), and
  independent torch.func computations (no `autograd.grad`, no `create_graph`) of what it stores and differentiates.
- Proposition 3.4: local heads that are copies of the rest of the network, so that every SGR term is zero.
- Proposition 3.5: the two-layer linear model with fixed ETF heads, one step of each layer.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad
from torch.nn import functional as F

from gradalign.methods.sgr import module_step, reconciliation_loss
from gradalign.models.etf import etf_matrix

F64 = torch.float64


def _params(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in module.named_parameters()}


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# --- Eq. 7 and Lemma C.2 -------------------------------------------------------------------------------


def etf_geometry(M: torch.Tensor) -> dict:
    """Eq. 7's properties of the columns m_k of a d×K head: unit norm, cosine −1/(K−1), Σ_k m_k = 0, rank K−1."""
    K = M.shape[1]
    gram = M.T @ M
    return {
        "norm_error": float((gram.diagonal() - 1).abs().max()),
        "cosine_error": float((gram[~torch.eye(K, dtype=torch.bool)] + 1 / (K - 1)).abs().max()),
        "sum_norm": float(M.sum(1).norm()),
        "rank": int(torch.linalg.matrix_rank(M)),
    }


def ce_feature_gradient(M: torch.Tensor, x: torch.Tensor, y: int) -> torch.Tensor:
    """δx = ∂CE(xᵀM, y)/∂x = M(p − e_y) = −(1 − p_y) m_y + Σ_{k≠y} p_k m_k (Lemma C.2, Eq. 26)."""
    p = torch.softmax(x @ M, -1)
    return M @ (p - F.one_hot(torch.tensor(y), M.shape[1]).to(M.dtype))


def lemma_c2_step(M: torch.Tensor, x: torch.Tensor, y: int, eta: float) -> dict:
    """x̂ = x − η δx (Lemma C.2): δx against autograd, the logit change against Eq. 23-24 (exact for an ETF:
    +K/(K−1)(1 − p_y)η on the label, −K/(K−1) p_k η on the others), and CE before and after."""
    xg = x.clone().requires_grad_(True)
    before = F.cross_entropy((xg @ M)[None], torch.tensor([y]))
    (auto,) = torch.autograd.grad(before, xg)
    delta, p, K = ce_feature_gradient(M, x, y), torch.softmax(x @ M, -1), M.shape[1]
    x_hat = x - eta * delta
    change = (x_hat - x) @ M
    predicted = -K / (K - 1) * eta * p
    predicted[y] = K / (K - 1) * eta * (1 - p[y])
    others = torch.cat([change[:y], change[y + 1 :]])
    return {
        "gradient_error": float((auto - delta).abs().max()),
        "logit_error": float((change - predicted).abs().max()) / eta,
        "loss_before": float(before.detach()),
        "loss_after": float(F.cross_entropy((x_hat @ M)[None], torch.tensor([y]))),
        "label_logit_gain": float(change[y]),
        "other_logits_fall": bool((others < 0).all()),
    }


# --- Eq. 5-6: Algorithm 1 on a chain of local modules ----------------------------------------------------


def local_chain(widths: tuple[int, ...], classes: int, seed: int) -> tuple[list[nn.Module], list[nn.Module]]:
    """Blocks Linear + tanh (widths[0] → … → widths[-1]) and one Linear local head per block, float64. Tanh
    (our choice): smooth, so the SGR term has a non-trivial second derivative."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = [nn.Sequential(nn.Linear(a, b), nn.Tanh()).to(F64) for a, b in zip(widths, widths[1:])]
        heads = [nn.Linear(b, classes).to(F64) for b in widths[1:]]
    return blocks, heads


def _ce(head: nn.Module, y: torch.Tensor, weight: float | torch.Tensor = 1.0):
    """The local loss mean_i w_i CE_i through `head` (w: one number, or one weight per sample)."""
    return lambda out: (weight * F.cross_entropy(head(out), y, reduction="none")).mean()


def algorithm1_pass(blocks, heads, optimizers, x0, y, lam: float, reduction: str) -> list:
    """One iteration of Algorithm 1 with δ stored at every module (book/appendix/protocols.md): module k steps at
    once on L_k + λ L_k^SGR (Eq. 5) and passes on its output computed before the step, detached."""
    x, delta, steps = x0, None, []
    for block, head, optimizer in zip(blocks, heads, optimizers):
        objective, step = module_step(block, _ce(head, y), x, delta, lam, reduction)
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        x, delta = step.output, step.delta_out
        steps.append(step)
    return steps


def sgr_terms(blocks, heads, x0, y, reduction: str) -> list[float]:
    """L_k^SGR of every module k ≥ 2 at the current parameters, all on one forward pass (a measurement only)."""
    terms, x, delta = [], x0, None
    for block, head in zip(blocks, heads):
        x_in = x.detach().requires_grad_(True)
        out = block(x_in)
        now, delta_out = torch.autograd.grad(F.cross_entropy(head(out), y), (x_in, out))
        if delta is not None:
            terms.append(float(reconciliation_loss(now, delta, reduction)))
        x, delta = out, delta_out
    return terms


def _unit_rows(t: torch.Tensor) -> torch.Tensor:
    rows = t.reshape(t.shape[0], -1)
    return rows / torch.sqrt((rows * rows).sum(1, keepdim=True))


def audit_first_pass(blocks, heads, x0, y, lam: float) -> dict:
    """Algorithm 1's first pass (reduction "mean"), each module against torch.func: the stored δ = ∂L_k/∂x_k,
    L_k^SGR, and ∇ of Eq. 5 in (θ_k, head); gradient isolation: the objective of module k reaches no earlier
    parameter, and the output it passes on is detached. `sgr_gradient_norm`: ‖λ ∇L_k^SGR‖ in (θ_k, head), k ≥ 2."""
    x, delta = x0, None
    out = {"delta_error": 0.0, "sgr_error": 0.0, "gradient_error": 0.0, "sgr_gradient_norm": [], "leaks": 0}
    for k, (block, head) in enumerate(zip(blocks, heads)):
        objective, step = module_step(block, _ce(head, y), x, delta, lam, "mean")
        earlier = [p for m in blocks[:k] + heads[:k] for p in m.parameters()]
        reached = torch.autograd.grad(objective, earlier, retain_graph=True, allow_unused=True) if earlier else []
        out["leaks"] += sum(g is not None for g in reached) + int(step.output.requires_grad)
        auto = torch.autograd.grad(objective, [*block.parameters(), *head.parameters()])
        bp, hp, x_in, delta_pre = _params(block), _params(head), x.detach(), delta

        def local(b, h, z):
            return F.cross_entropy(functional_call(head, h, (functional_call(block, b, (z,)),)), y)

        ref_delta = grad(lambda o: F.cross_entropy(functional_call(head, hp, (o,)), y))(step.output)
        out["delta_error"] = max(out["delta_error"], float((step.delta_out - ref_delta).abs().max()))
        if delta_pre is not None:

            def objective_ref(b, h):
                sgr = (_unit_rows(grad(local, argnums=2)(b, h, x_in)) - _unit_rows(delta_pre)).square().mean()
                return local(b, h, x_in) + lam * sgr, sgr

            (gb, gh), sgr = grad(objective_ref, argnums=(0, 1), has_aux=True)(bp, hp)
            ref = _flat([*gb.values(), *gh.values()])
            out["gradient_error"] = max(out["gradient_error"], _rel(_flat(auto), ref))
            out["sgr_error"] = max(out["sgr_error"], abs(float(step.loss_sgr) - float(sgr)))
            lb, lh = grad(local, argnums=(0, 1))(bp, hp, x_in)
            out["sgr_gradient_norm"].append(float((_flat(auto) - _flat([*lb.values(), *lh.values()])).norm()))
        x, delta = step.output, step.delta_out
    return out


# --- Proposition 3.4: heads that copy the rest of the network --------------------------------------------


def rest_of_network_heads(blocks, last_head, sigma: float, seed: int) -> list[nn.Module]:
    """Local head of module k < L: a copy of blocks k+1..L and the last head (so ∂L_k/∂x_k is the global
    gradient and every SGR term is zero), its parameters moved by σ times a fixed random direction scaled to
    each tensor's RMS (the same direction for every σ). The last module keeps `last_head`."""
    gen = torch.Generator().manual_seed(seed)
    heads = []
    for k in range(1, len(blocks)):
        head = copy.deepcopy(nn.Sequential(*blocks[k:], last_head))
        with torch.no_grad():
            for p in head.parameters():
                p.add_(sigma * p.square().mean().sqrt() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        heads.append(head)
    return heads + [last_head]


def local_and_global_gradients(blocks, heads, weights, x0, y) -> dict:
    """For k < L: the local ∇θ_k L_k (input detached, L_k = mean_i w_{k,i} CE_i) and the global-BP ∇θ_k L_L;
    the SGR terms of k = 2..L in Eq. 6's form (squared distance summed over the batch) and Algorithm 1's
    (normalised, "mean")."""
    params = [list(b.parameters()) for b in blocks]
    x = x0
    for block in blocks:
        x = block(x)
    every = torch.autograd.grad(F.cross_entropy(heads[-1](x), y), [p for ps in params[:-1] for p in ps])
    flat_global = list(_flat(every).split([sum(p.numel() for p in ps) for ps in params[:-1]]))
    flat_local, eq6, normalised, x, delta = [], 0.0, 0.0, x0, None
    for k, (block, head) in enumerate(zip(blocks, heads)):
        x_in = x.detach().requires_grad_(True)
        out = block(x_in)
        now, delta_out, *g = torch.autograd.grad(_ce(head, y, weights[k])(out), [x_in, out, *params[k]])
        if delta is not None:
            eq6 += float((now - delta).square().sum())
            normalised += float(reconciliation_loss(now, delta, "mean"))
        if k < len(blocks) - 1:
            flat_local.append(_flat(g))
        x, delta = out, delta_out
    return {"local": flat_local, "global": flat_global, "sgr_eq6": eq6, "sgr_normalised": normalised}


# --- Proposition 3.5: two linear layers with fixed ETF heads ---------------------------------------------


@dataclass
class TwoLayerDraw:
    x0: torch.Tensor
    y: int
    theta1: torch.Tensor
    theta2: torch.Tensor
    M1: torch.Tensor
    M2: torch.Tensor


def two_layer_draw(dims: tuple[int, int, int], classes: int, sigma: float, gen: torch.Generator) -> TwoLayerDraw:
    """x1 = θ1 x0, x2 = θ2 x1, ETF heads M1, M2. θ2 = θ2⁰ + σ N/√d1 where M2ᵀθ2⁰ = M1ᵀ (solvable: the rows of
    both sides sum to zero over the classes), so at σ = 0 the logits of both layers agree and L2^SGR = 0: σ sets
    the size of the SGR term. θ1 = s N/√d0 with s log-uniform in [0.3, 3] (our choice: p_y spans (0, 1));
    x0 ~ N(0, I) (our choice)."""
    d0, d1, d2 = dims
    M1, M2 = etf_matrix(d1, classes, gen, F64), etf_matrix(d2, classes, gen, F64)
    scale = math.exp(math.log(0.3) + math.log(10) * float(torch.rand(1, generator=gen, dtype=F64)))
    pinv = torch.linalg.pinv(M2.T)
    free = (torch.eye(d2, dtype=F64) - pinv @ M2.T) @ torch.randn(d2, d1, generator=gen, dtype=F64) / math.sqrt(d1)
    theta2 = pinv @ M1.T + free + sigma * torch.randn(d2, d1, generator=gen, dtype=F64) / math.sqrt(d1)
    theta1 = scale * torch.randn(d1, d0, generator=gen, dtype=F64) / math.sqrt(d0)
    y = int(torch.randint(classes, (1,), generator=gen))
    return TwoLayerDraw(torch.randn(d0, generator=gen, dtype=F64), y, theta1, theta2, M1, M2)


PROP35_VARIANTS = ("autograd", "constant_delta", "as_printed", "algorithm1")
"""How layer 2's SGR gradient is taken (λ = 1): full autograd of L2^SGR = ½‖δx1 − ∂L2/∂x1‖² (the proof's
L^SGR, a descent step); the same with δx2 held constant (the proof's algebra: −δx2 rᵀ, r = δx1 − θ2ᵀδx2);
Eq. 30 as printed (+δx2 rᵀ in the gradient: the step of an ascent on L2^SGR); Algorithm 1's normalised MSE
through `module_step`."""


def _ce1(logits: torch.Tensor, y: int) -> torch.Tensor:
    return F.cross_entropy(logits[None], torch.tensor([y]))


def prop35_step(d: TwoLayerDraw, eta: float) -> dict:
    """One step of each layer with learning rate η, with and without layer 2's SGR term; L2′ = CE after both steps
    (Proposition 3.5). Layer 2's gradients are taken at the input x1 computed before layer 1's step (Eq. 28-30,
    and Algorithm 1, which passes on the output computed before the step). Everything the proposition assumes is
    measured before the step: the label logits of both layers, δx2ᵀx2 ≤ δx1ᵀx1 (the condition the proof derives
    from the assumption), and ‖r‖/‖δx1‖ (how small L2^SGR is).

    `first_order`: per variant, dL̂2′/dλ at λ = 0 by autograd through the step (θ̂2′ = θ2′ − ηλG) against the
    closed form −η δx2′ᵀ G x1′ (`prop35_first_order`), and the issue's form of it (‖δx2‖² for δx2′ᵀδx2)."""
    t1 = d.theta1.clone().requires_grad_(True)
    x1 = t1 @ d.x0
    g1, dx1 = torch.autograd.grad(_ce1(x1 @ d.M1, d.y), (t1, x1))
    x1, theta1_new = x1.detach(), d.theta1 - eta * g1
    t2, xi = d.theta2.clone().requires_grad_(True), x1.clone().requires_grad_(True)
    x2 = t2 @ xi
    g2, now, dx2 = torch.autograd.grad(_ce1(x2 @ d.M2, d.y), (t2, xi, x2), create_graph=True)
    r = dx1 - now
    dx2c, rc, x2 = dx2.detach(), r.detach(), x2.detach()
    extra = {
        "autograd": torch.autograd.grad(0.5 * r.square().sum(), t2, retain_graph=True)[0],
        "constant_delta": -torch.outer(dx2c, rc),
        "as_printed": torch.outer(dx2c, rc),
    }
    objective, _ = module_step(lambda z: z @ t2.T, lambda o: _ce1(o[0] @ d.M2, d.y), x1[None], dx1[None], 1.0, "mean")
    extra["algorithm1"] = torch.autograd.grad(objective, t2)[0] - g2
    held = d.theta2.clone().requires_grad_(True)
    held_grad = torch.autograd.grad(0.5 * (dx1 - held.T @ dx2c).square().sum(), held)[0]
    x1_new, g2 = theta1_new @ d.x0, g2.detach()
    x0_sq = d.x0.square().sum()
    eq29 = x2 - eta * x0_sq * (d.theta2 @ dx1) - eta * x1.square().sum() * dx2c + eta**2 * x0_sq * dx2c * (x1 @ dx1)
    without = (d.theta2 - eta * g2) @ x1_new
    first_order = {}
    closed = prop35_first_order(d, x1, x2, dx1, dx2c, without, x1_new, eta)
    for v in ("autograd", "constant_delta", "as_printed"):
        lam = torch.zeros((), dtype=F64, requires_grad=True)
        loss = _ce1((d.theta2 - eta * (g2 + lam * extra[v].detach())) @ x1_new @ d.M2, d.y)
        (auto,) = torch.autograd.grad(loss, lam)
        scale = eta * float(extra[v].norm() * x1_new.norm())  # |dL̂2′/dλ| ≤ ‖δx2′‖ times this, ‖δx2′‖ ≤ 2
        first_order[v] = {
            "autograd": float(auto),
            "closed_form": closed[v],
            "error": abs(float(auto) - closed[v]) / max(scale, 1e-300),
        }
    first_order["issue_form"] = closed["issue_form"]
    return {
        "loss_before": float(_ce1(x2 @ d.M2, d.y)),
        "loss_without": float(_ce1(without @ d.M2, d.y)),
        "loss_with": {
            v: float(_ce1((d.theta2 - eta * (g2 + e.detach())) @ x1_new @ d.M2, d.y)) for v, e in extra.items()
        },
        "assumption": float(x2 @ d.M2[:, d.y]) > float(x1 @ d.M1[:, d.y]),
        "delta_condition": float(dx2c @ x2) <= float(dx1 @ x1),
        "relative_sgr": float(rc.norm() / dx1.norm()),
        "eq29_error": float((without - eq29).abs().max()),
        "eq30_error": float((held_grad - extra["constant_delta"]).abs().max()),
        "first_order": first_order,
    }


def prop35_first_order(d: TwoLayerDraw, x1, x2, dx1, dx2, x2_new, x1_new, eta: float) -> dict:
    """dL̂2′/dλ at λ = 0 in closed form, exact in η, for each reading of layer 2's SGR step θ̂2′ = θ2′ − ηλG
    (Eq. 28 and 30; L2^SGR = ½‖r‖², r = δx1 − θ2ᵀδx2). With δx2′ = ∂L2/∂x2 at the plain step's output x2′ (Eq. 29)
    and ∂L2′/∂θ2′ = δx2′x1′ᵀ, the derivative is −η δx2′ᵀ G x1′, and x1′ = x1 − η‖x0‖²δx1 (Eq. 27) gives
    rᵀx1′ = (δx1ᵀx1 − δx2ᵀx2) − η‖x0‖² rᵀδx1 (θ2x1 = x2):

    - δx2 held constant, G = −δx2rᵀ (the proof's algebra, a descent step): η (δx2′ᵀδx2)(rᵀx1′);
    - Eq. 30 as printed, G = +δx2rᵀ: −η (δx2′ᵀδx2)(rᵀx1′);
    - full autograd, G = −δx2rᵀ − H2θ2r x1ᵀ with H2 = ∂δx2/∂x2 = M2(diag p − ppᵀ)M2ᵀ (δx2 moves with θ2):
      η [(δx2′ᵀδx2)(rᵀx1′) + (x1ᵀx1′)(δx2′ᵀH2θ2r)].

    `issue_form`: the first, with ‖δx2‖² for δx2′ᵀδx2 (δx2′ = δx2 + O(η)): correct to O(η²λ), the order of the
    η‖x0‖² term it keeps. Computed from the scalars alone, apart from the autograd of `prop35_step`."""
    r = dx1 - d.theta2.T @ dx2
    p2 = torch.softmax(x2 @ d.M2, -1)
    dx2_new = d.M2 @ (torch.softmax(x2_new @ d.M2, -1) - F.one_hot(torch.tensor(d.y), d.M2.shape[1]).to(F64))
    h2 = d.M2 @ (torch.diag(p2) - torch.outer(p2, p2)) @ d.M2.T
    r_x1_new = float(dx1 @ x1 - dx2 @ x2 - eta * d.x0.square().sum() * (r @ dx1))
    aligned = float(dx2_new @ dx2)
    descent = eta * aligned * r_x1_new
    return {
        "constant_delta": descent,
        "as_printed": -descent,
        "autograd": descent + eta * float(x1 @ x1_new) * float(dx2_new @ h2 @ d.theta2 @ r),
        "issue_form": eta * float(dx2 @ dx2) * r_x1_new,
        "dx2_new": dx2_new,
    }
