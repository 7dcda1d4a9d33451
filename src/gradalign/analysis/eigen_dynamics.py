"""Eigenmode dynamics of a linear Siamese network with a DirectPred predictor (§2, Eq. 5-8).

Setting: z = W x with x ~ N(0, I_N), two views x + σε and x + σε′ (ε, ε′ ~ N(0, I_N) independent),
W_P = f_α(W Wᵀ) = U D^α Uᵀ. With κ = 1 + σ², E[x₁x₁ᵀ] = κ I and E[x₂x₁ᵀ] = I, so the expected
gradient of each loss is P(W_P) W for a polynomial P, and in the eigenbasis every mode m evolves
on its own: ż_m = η r(λ_m) ẑ_m. The paper states r for σ → 0; here σ is kept:

    L       r = λ^α (1 − κ λ^α)            (Eq. 5:  λ^α (1 − λ^α))
    L_noSG  r = −(κ (λ^{2α} + 1) − 2λ^α)   (Eq. 6:  −(1 − λ^α)²)
    L_ws    r = λ^α − κ                    (Eq. 7:  λ^α − 1)
    L_iso   r = 1 − κ λ^α                  (Eq. 8:  1 − λ^α)

A gradient step W ← (I + η R) W keeps the eigenvectors of W Wᵀ, so λ ← λ (1 + η r(λ))² exactly.
"""

from __future__ import annotations

import torch

LOSS_NAMES = ("noSG", "ws", "L", "iso")


def _check_loss(loss: str) -> None:
    if loss not in LOSS_NAMES:
        from gradalign.errors import ConfigError

        raise ConfigError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSS_NAMES)}")


def mode_rate(loss: str, lam, alpha: float, sigma: float = 0.0):
    """r(λ) = ż_m / (η ẑ_m) for eigenvalue λ of W Wᵀ (Eq. 5-8 with augmentation noise σ)."""
    _check_loss(loss)
    k, a = 1 + sigma**2, lam**alpha
    return {"L": a * (1 - k * a), "noSG": -(k * (a * a + 1) - 2 * a), "ws": a - k, "iso": 1 - k * a}[loss]


def fixed_point(alpha: float, sigma: float = 0.0) -> float:
    """The non-zero eigenvalue where L and L_iso stop: κ λ^α = 1, λ* = κ^{−1/α} (1 when σ = 0)."""
    return (1 + sigma**2) ** (-1 / alpha)


def expected_gradient(W: torch.Tensor, loss: str, alpha: float, sigma: float = 0.0) -> torch.Tensor:
    """E[∇_W loss] in closed form for the linear network (W_P held constant)."""
    _check_loss(loss)
    from gradalign.methods.directpred import closed_form_predictor

    P, I, k = closed_form_predictor(W, alpha), torch.eye(W.shape[0], dtype=W.dtype), 1 + sigma**2  # noqa: E741 (the identity, as in the paper)
    poly = {"L": P @ (k * P - I), "noSG": k * (P @ P + I) - 2 * P, "ws": k * I - P, "iso": k * P - I}[loss]
    return poly @ W


def predicted_eigenvalues(
    lam0: torch.Tensor, loss: str, steps: int, lr: float, alpha: float, sigma: float = 0.0
) -> torch.Tensor:
    """λ_t for t = 0..steps under expected-gradient steps: λ ← λ (1 + η r(λ))²; shape (steps + 1, M)."""
    out = [lam0.clone()]
    lam = lam0.clone()
    for _ in range(steps):
        lam = lam * (1 + lr * mode_rate(loss, lam.clamp(min=0), alpha, sigma)) ** 2
        out.append(lam)
    return torch.stack(out)


def measured_mode_rates(W: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(λ_m, r_m) from a gradient: r_m = −u_mᵀ ∇W Wᵀ u_m / λ_m, the per-mode relative rate of ẑ_m."""
    lam, U = torch.linalg.eigh(W @ W.T)
    return lam, -torch.einsum("im,ij,jm->m", U, grad @ W.T, U) / lam


def isotropic_views(
    n: int,
    dim: int,
    sigma: float,
    generator: torch.Generator | None = None,
    exact_moments: bool = False,
    dtype=torch.float64,
):
    """Two augmented views (x + σε, x + σε′) of n isotropic Gaussian inputs, shape (n, dim) each.

    exact_moments: x, ε, ε′ are rescaled orthonormal columns, so their sample second moments are
    exactly I and 0 (cross terms): a batch gradient then equals the expected gradient of a linear
    network to float precision. Needs n ≥ 3·dim.
    """
    if exact_moments:
        if n < 3 * dim:
            raise ValueError(f"exact moments need n >= 3*dim = {3 * dim}; got n = {n}")
        q, _ = torch.linalg.qr(torch.randn(n, 3 * dim, generator=generator, dtype=dtype))
        x, e1, e2 = (q * n**0.5).split(dim, dim=1)
    else:
        x, e1, e2 = torch.randn(3, n, dim, generator=generator, dtype=dtype).unbind(0)
    return x + sigma * e1, x + sigma * e2
