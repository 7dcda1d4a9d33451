"""The SGR gradient of one ReLU block and its cost (Yang et al. 2024, Appendix D, Eq. 35 and Table 8), float64.

For the block y = ReLU(Wx), W ∈ R^{m×n}, with local loss L(y) and L^SGR = ½‖∂L/∂x − g‖² (g, the previous
module's gradient, a constant), ∂L/∂x = Wᵀ[∂L/∂y ⊙ σ′(Wx)], and since σ″ = 0 (Eq. 35)

    ∂L^SGR/∂W = A Bᵀ,  A = ∂L/∂y ⊙ σ′(Wx) (m products),  B = WᵀA − g ((2m − 1)n + n),  A·B (mn): 3mn + m in all.

Eq. 35 holds ∂L/∂y constant in W; autograd with `create_graph=True` (what `module_step` does) also
differentiates through it. The two agree when L is linear in y; under CE on a head after y they differ.
"""

from __future__ import annotations

import torch
from torch.func import grad
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from gradalign.methods.sgr import module_step

F64 = torch.float64


def eq35_gradient(W: torch.Tensor, x: torch.Tensor, dl_dy: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Eq. 35: A Bᵀ with A = ∂L/∂y ⊙ σ′(Wx) and B = WᵀA − g."""
    a = dl_dy * (W @ x > 0).to(W.dtype)
    return torch.outer(a, W.T @ a - g)


def relu_block_sgr_gradient(W, x, loss_of_y, g, constant_dl_dy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(∂L^SGR/∂W by autograd with create_graph, ∂L/∂y): through ∂L/∂y, or with ∂L/∂y detached."""
    w, xr = W.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = torch.relu(w @ xr)
    (dl_dy,) = torch.autograd.grad(loss_of_y(y), y, create_graph=True)
    used = dl_dy.detach() if constant_dl_dy else dl_dy
    (dl_dx,) = torch.autograd.grad(y, xr, grad_outputs=used, create_graph=True)
    return torch.autograd.grad(0.5 * (dl_dx - g).square().sum(), w)[0], dl_dy.detach()


def _unit_rows(t: torch.Tensor) -> torch.Tensor:
    return t / torch.sqrt((t * t).sum(1, keepdim=True))


def library_sgr_gradients(W, x, H, label, g) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The SGR part of ∇W of `module_step`'s objective (λ = 1, "mean": Algorithm 1's normalised MSE) for the
    block with local loss CE(Hy) and δ_pre = g, and two torch.func references: through ∂L/∂y (full) and with
    ∂L/∂y held constant (Eq. 35's way). Each is the objective's gradient less that of CE alone."""
    w = W.clone().requires_grad_(True)
    loss = lambda out: F.cross_entropy(out @ H.T, label)
    objective, _ = module_step(lambda z: torch.relu(z @ w.T), loss, x[None], g[None], 1.0, "mean")
    ce = lambda w_, z: loss(torch.relu(z @ w_.T))
    dl_dy = grad(loss)(torch.relu(x[None] @ W.T))

    def sgr(w_, constant: bool):
        now = (dl_dy * (x[None] @ w_.T > 0)) @ w_ if constant else grad(ce, argnums=1)(w_, x[None])
        return (_unit_rows(now) - _unit_rows(g[None])).square().mean()

    ce_part = grad(ce)(W, x[None])
    return torch.autograd.grad(objective, w)[0] - ce_part, grad(sgr)(W, False), grad(sgr)(W, True)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def eq35_against_autograd(m: int, n: int, classes: int, draws: int, gen: torch.Generator) -> dict:
    """Over random blocks: the largest relative gap of Eq. 35 to autograd for a loss linear in y, and to autograd
    with ∂L/∂y detached under CE on a head; the gaps to full autograd under CE; the library's SGR gradient
    against the full and the constant-∂L/∂y references (largest gap to full, smallest to constant)."""
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)
    out = {"linear_loss_error": 0.0, "held_error": 0.0, "library_full_error": 0.0, "library_vs_held": float("inf")}
    differences = []
    for _ in range(draws):
        W, x, g, c, H = r(m, n) / n**0.5, r(n), r(n), r(m), r(classes, m) / m**0.5  # O(1) logits (our choice)
        label = torch.randint(classes, (1,), generator=gen)
        full, dl_dy = relu_block_sgr_gradient(W, x, lambda y: c @ y, g, False)
        out["linear_loss_error"] = max(out["linear_loss_error"], _rel(eq35_gradient(W, x, dl_dy, g), full))
        ce = lambda y: F.cross_entropy((H @ y)[None], label)
        (full, dl_dy), (held, _) = (relu_block_sgr_gradient(W, x, ce, g, constant) for constant in (False, True))
        eq35 = eq35_gradient(W, x, dl_dy, g)
        out["held_error"] = max(out["held_error"], _rel(eq35, held))
        differences.append(_rel(eq35, full))
        ours, ref_full, ref_held = library_sgr_gradients(W, x, H, label, g)
        out["library_full_error"] = max(out["library_full_error"], _rel(ours, ref_full))
        out["library_vs_held"] = min(out["library_vs_held"], _rel(ours, ref_held))
    return {**out, "ce_relative_difference": sorted(differences)}


class ArithmeticCount(TorchDispatchMode):
    """Counts arithmetic as Table 8 does: an elementwise multiply or add on N entries costs N; a product of
    (m×k)(k×n) matrices costs mkn multiplications and mn(k − 1) additions. Views and comparisons cost nothing."""

    ELEMENTWISE = (torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor, torch.ops.aten.add.Tensor)

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.ELEMENTWISE:
            self.count += out.numel()
        elif func is torch.ops.aten.mm.default:
            (m, k), n = args[0].shape, args[1].shape[1]
            self.count += m * k * n + m * n * (k - 1)
        return out


def count_table8(m: int, n: int, seed: int) -> dict:
    """Eq. 35 in Table 8's three terms, written with 2-D products so that both counters see them: our count of
    each term, torch's FlopCounterMode total (2mnk per (m×k)(k×n) product, elementwise ops not counted), and the
    largest gap of A·B to `eq35_gradient`."""
    from torch.utils.flop_counter import FlopCounterMode

    gen = torch.Generator().manual_seed(seed)
    W, x = torch.randn(m, n, generator=gen, dtype=F64), torch.randn(n, generator=gen, dtype=F64)
    dl_dy, g = torch.randn(m, generator=gen, dtype=F64), torch.randn(n, generator=gen, dtype=F64)
    mask = (W @ x > 0).to(F64)  # σ′(Wx) comes with the forward pass: not part of Table 8
    counts = {}
    with FlopCounterMode(display=False) as flops:
        with ArithmeticCount() as c:
            a = dl_dy * mask
        counts["A"] = c.count
        with ArithmeticCount() as c:
            b = (W.T @ a[:, None])[:, 0] - g
        counts["B"] = c.count
        with ArithmeticCount() as c:
            ab = a[:, None] @ b[None, :]
        counts["AB"] = c.count
    gap = float((ab - eq35_gradient(W, x, dl_dy, g)).abs().max())
    return {"m": m, "n": n, **counts, "flop_counter": int(flops.get_total_flops()), "gap_to_eq35": gap}


def fit_cost(rows: list[dict], key: str) -> tuple[float, float]:
    """Least-squares (a, b) of count ≈ a·mn + b·m over the sizes."""
    design = torch.tensor([[r["m"] * r["n"], r["m"]] for r in rows], dtype=F64)
    totals = torch.tensor([[float(r[key])] for r in rows], dtype=F64)
    a, b = torch.linalg.lstsq(design, totals).solution[:, 0].tolist()
    return a, b
