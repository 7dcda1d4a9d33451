"""Gradient descent on least squares and its closed form (LGA §3.1, Eq. 3-7)."""

from __future__ import annotations

import torch


def least_squares_gradient(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∇θ (1/2n)‖y − Xθ‖² = (1/n) Xᵀ(Xθ − y)  (Eq. 3; Eq. 15-16 of the appendix)."""
    return X.T @ (X @ theta - y) / X.shape[0]


def gradient_descent_iterates(X: torch.Tensor, y: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    """θ_0 = 0, θ_{k+1} = θ_k − α∇L(θ_k)  (Eq. 4); returns all iterates, shape (steps + 1, m)."""
    theta = torch.zeros(X.shape[1], dtype=X.dtype)
    out = [theta]
    for _ in range(steps):
        theta = theta - alpha * least_squares_gradient(theta, X, y)
        out.append(theta)
    return torch.stack(out)


def gradient_descent_closed_form(X: torch.Tensor, y: torch.Tensor, alpha: float, k) -> torch.Tensor:
    """θ_k = (1/n) Σ_i (1 − (1 − αλ_i)^k)/λ_i · q_i q_iᵀ Xᵀy  (Eq. 7), for each k in `k`."""
    n = X.shape[0]
    lam, q = torch.linalg.eigh(X.T @ X / n)
    k = torch.as_tensor(k, dtype=X.dtype).reshape(-1, 1)
    factor = (1 - (1 - alpha * lam) ** k) / lam  # (len(k), m)
    return (factor * (q.T @ (X.T @ y) / n)) @ q.T
