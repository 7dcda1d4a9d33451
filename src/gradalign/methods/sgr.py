"""Successive gradient reconciliation (Yang et al. 2024, §3.2, Eq. 5-6, Algorithm 1 of Appendix F).

Module k is trained on its own local loss L_k plus λ·L_k^SGR (Eq. 5), where (Eq. 6)

    L_k^SGR = ‖ δx_{k-1}^{(L_k)} − δx_{k-1}^{(L_{k-1})} ‖²,

δx_{k-1}^{(L_k)} = ∂L_k/∂x_{k-1} is the gradient of this module's local loss at its input (taken with
`create_graph=True`, so that L^SGR has a gradient in θ_k) and δx_{k-1}^{(L_{k-1})} = ∂L_{k-1}/∂x_{k-1} is
the gradient the previous module's local loss had at its output, stored when module k−1 was trained.
Algorithm 1 flattens both per sample, divides each by its l2 norm and compares them with
`nn.MSELoss()` (the mean over batch × features); the printed pseudocode stores δ only at the first
module, the text of §3.2 at every module, which is what `module_step` does (book/appendix/protocols.md).

The reduction sets the scale of λ: with `"mean"` (Algorithm 1) the term is at most 4/D per sample for
D features; `"sum"` sums over features (mean over the batch), which is D times larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

REDUCTIONS = ("mean", "sum")
SGR_LAMBDA = 1.0  # λ of Eq. 5 (App. E: 1 on CIFAR, with Algorithm 1's mean reduction); every config's default
TINY = 1e-12  # our choice: guards the division for a gradient that is exactly zero (Algorithm 1 has none)


def normalized(delta: torch.Tensor) -> torch.Tensor:
    """Flatten per sample and divide each row by its l2 norm (Algorithm 1)."""
    rows = delta.flatten(1)
    return rows / rows.norm(dim=1, keepdim=True).clamp_min(TINY)


def reconciliation_loss(delta_now: torch.Tensor, delta_pre: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """L^SGR of Eq. 6 between the normalised input gradient of this module's loss and the stored output
    gradient of the previous module's loss. `"mean"`: `nn.MSELoss()` as in Algorithm 1 (mean over batch and
    features); `"sum"`: summed over features, mean over the batch."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of: {', '.join(REDUCTIONS)}")
    if delta_now.shape != delta_pre.shape:
        raise ValueError(f"gradient shapes differ: {tuple(delta_now.shape)} vs {tuple(delta_pre.shape)}")
    sq = (normalized(delta_now) - normalized(delta_pre)).square()
    return sq.mean() if reduction == "mean" else sq.sum(1).mean()


@dataclass
class ModuleStep:
    """What training one module on one batch produced (Algorithm 1's inner loop body)."""

    output: torch.Tensor  # x_k, detached: the next module's input
    delta_out: torch.Tensor  # ∂L_k/∂x_k, detached: the next module's δ_pre
    loss_local: torch.Tensor  # L_k (detached)
    loss_sgr: torch.Tensor | None  # L_k^SGR (detached), None for the first module or λ = 0 without δ_pre


def module_step(
    module: Callable[[torch.Tensor], torch.Tensor],
    local_loss: Callable[[torch.Tensor], torch.Tensor],
    x_in: torch.Tensor,
    delta_pre: torch.Tensor | None,
    lam: float,
    reduction: str = "mean",
) -> tuple[torch.Tensor, ModuleStep]:
    """The objective of module k (Eq. 5) on input x_{k-1} (detached here): returns (L_k + λ·L_k^SGR, step).

    The caller differentiates the returned objective in θ_k (and in the head's parameters) and steps its
    optimizer. With `delta_pre=None` (the first module) or λ = 0 the objective is L_k alone.
    """
    x = x_in.detach().requires_grad_(True)
    out = module(x)
    loss = local_loss(out)
    use_sgr = delta_pre is not None and lam != 0
    if use_sgr:
        delta_now, delta_out = torch.autograd.grad(loss, (x, out), retain_graph=True, create_graph=True)
        sgr = reconciliation_loss(delta_now, delta_pre, reduction)
        objective = loss + lam * sgr
    else:
        (delta_out,) = torch.autograd.grad(loss, out, retain_graph=True)
        sgr = None
        objective = loss
    step = ModuleStep(
        output=out.detach(),
        delta_out=delta_out.detach(),
        loss_local=loss.detach(),
        loss_sgr=None if sgr is None else sgr.detach(),
    )
    return objective, step
