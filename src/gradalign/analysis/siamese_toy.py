"""The toy Siamese networks of Figures 2-3 (Halvagal et al. 2022; protocol in book/appendix/protocols.md).

One layer z = act(W x), act = identity (Figure 2) or ReLU (Figure 3), x ~ N(0, I_N), views
x + σε, x + σε′. Each step draws `samples` fresh inputs and takes a gradient step on the batch mean
of one of the four losses (an estimate of the expected gradient), with W_P = f_α(W Wᵀ) in closed
form and no gradient through it. Tracked: the eigenvalues of W Wᵀ, and optionally z = W x for a
fixed set of inputs (the trajectories of the update plots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.analysis.eigen_dynamics import isotropic_views
from gradalign.methods.directpred import closed_form_predictor
from gradalign.methods.isoloss import LOSSES
from gradalign.progress import progress

ACTIVATIONS = {"linear": lambda a: a, "relu": torch.relu}


@dataclass
class ToyRun:
    eigenvalues: torch.Tensor  # (steps + 1, M), ascending; NaN after divergence
    trajectories: torch.Tensor | None  # (steps + 1, n_tracked, M) of act(W x) for the tracked inputs
    W0: torch.Tensor
    W: torch.Tensor
    diverged_at: int | None  # first step whose largest eigenvalue exceeded the cap (or was not finite)


def initial_weights(M: int, N: int, scale: float, generator: torch.Generator, dtype=torch.float64):
    """W₀ = scale · randn(M, N) (the authors' toy code uses scale 1/4)."""
    return scale * torch.randn(M, N, generator=generator, dtype=dtype)


def simulate(
    W0: torch.Tensor,
    loss: str,
    steps: int,
    lr: float,
    sigma: float = 0.1,
    samples: int = 50_000,
    alpha: float = 1.0,
    activation: str = "linear",
    generator: torch.Generator | None = None,
    tracked: torch.Tensor | None = None,
    cap: float = 1e6,
    exact_moments: bool = False,
    desc: str = "",
    sample_dtype=torch.float32,
) -> ToyRun:
    """Train W by `steps` sampled expected-gradient steps of `loss` (one of noSG, ws, L, iso).

    W, W_P and the eigenvalues are float64; the samples and the batch gradient use `sample_dtype`
    (float32 by default: 5x cheaper to draw, and its rounding is far below the sampling noise).
    """
    act = ACTIVATIONS[activation]
    loss_fn = LOSSES[loss]
    M, N = W0.shape
    W = W0.clone()
    eig = torch.full((steps + 1, M), float("nan"), dtype=W.dtype)
    eig[0] = torch.linalg.eigvalsh(W @ W.T)
    traj = None
    if tracked is not None:
        traj = torch.full((steps + 1, tracked.shape[0], M), float("nan"), dtype=W.dtype)
        traj[0] = act(tracked @ W.T)
    diverged_at = None
    for t in progress(range(1, steps + 1), desc=desc or f"{activation} {loss}", total=steps):
        x1, x2 = isotropic_views(samples, N, sigma, generator, exact_moments, sample_dtype)
        Ws = W.to(sample_dtype).requires_grad_(True)
        z1, z2 = act((Ws @ x1.T).T), act((Ws @ x2.T).T)  # W xᵀ: the fast layout for a skinny matmul
        W_P = closed_form_predictor(W, alpha).to(sample_dtype)
        grad = torch.autograd.grad(loss_fn(z1, z2, W_P), Ws)[0]
        W = W - lr * grad.to(W.dtype)
        lam = torch.linalg.eigvalsh(W @ W.T) if torch.isfinite(W).all() else None
        if lam is None or lam.max() > cap:
            diverged_at = t
            break
        eig[t] = lam
        if traj is not None:
            traj[t] = act(tracked @ W.T)
    return ToyRun(eig, traj, W0, W, diverged_at)


def highest_norm_inputs(pool: int, keep: int, N: int, generator: torch.Generator, dtype=torch.float64):
    """The `keep` inputs of largest norm among `pool` fixed Gaussian samples (the update plots)."""
    x = torch.randn(pool, N, generator=generator, dtype=dtype)
    return x[x.norm(dim=1).argsort(descending=True)[:keep]]
