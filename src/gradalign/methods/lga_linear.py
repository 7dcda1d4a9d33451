"""Label Gradient Alignment for linear regression (Jackson & Schulman 2019, §3.1, Eq. 8-11).

The simplifications of §3.1: gradient descent instead of Adam, full batches, every EMA replaced by
its argument (still treated as a constant: the stop-gradient of Eq. 22). Unlike the appendix we keep
ε_norm, so the normalized distance (Eq. 2) is Σ_i r_i² / (ε_norm + SG(r_i)²) with r = g_ℓ − g_u.
θ and y_u are updated simultaneously from the gradients at step k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.methods.gradient_descent import least_squares_gradient
from gradalign.data.linear_regression import LinearProblem
from gradalign.errors import DivergenceError
from gradalign.progress import progress


def normalized_sq_distance(v: torch.Tensor, eps_norm: float) -> torch.Tensor:
    """‖v‖²_normalized = Σ_i v_i² / (ε_norm + sqrt(SG(v_i⁴)))  (Eq. 2, EMA(v⁴) replaced by v⁴)."""
    return (v * v / (eps_norm + v.detach() ** 2)).sum()


def gradient_residual(theta, y_u, problem: LinearProblem) -> torch.Tensor:
    """r = g_ℓ − g_u (Eq. 8-9, 17-20): the labeled minus the unlabeled gradient."""
    return least_squares_gradient(theta, problem.X_l, problem.y_l) - least_squares_gradient(theta, problem.X_u, y_u)


def imputed_label_gradient(r: torch.Tensor, X_u: torch.Tensor, eps_norm: float) -> torch.Tensor:
    """∇_{y_u} ½‖g_ℓ − g_u‖²_normalized = (1/n_u) X_u (r / (ε_norm + r²))  (Eq. 23-25, ε kept).

    With ε_norm = 0 this is Eq. 25, (1/n_u) X_u Σ_i e_i / r_i.
    """
    return X_u @ (r / (eps_norm + r * r)) / X_u.shape[0]


@dataclass
class LGAState:
    theta: torch.Tensor
    y_u: torch.Tensor


def lga_step(
    state: LGAState,
    problem: LinearProblem,
    alpha_theta: float,
    alpha_w: float,
    eps_norm: float,
    label_weight: float = 0.0,
) -> LGAState:
    """One step of Eq. 10-11 (with Algorithm 1's T(i)·g_ℓ term as `label_weight`; §3.1 uses 0)."""
    g_l = least_squares_gradient(state.theta, problem.X_l, problem.y_l)
    g_u = least_squares_gradient(state.theta, problem.X_u, state.y_u)
    theta = state.theta - alpha_theta * (g_u + label_weight * g_l)
    y_u = state.y_u - alpha_w * imputed_label_gradient(g_l - g_u, problem.X_u, eps_norm)
    return LGAState(theta, y_u)


def c_coefficients(theta: torch.Tensor, problem: LinearProblem) -> torch.Tensor:
    """c_{k,i} = λ^ℓ_i θ_{k,i} / b_i  (Eq. 12, 28): c = 1 is the supervised optimum's coordinate."""
    return problem.lambda_l * theta / problem.b


def run_lga(
    problem: LinearProblem,
    steps: int,
    alpha_theta: float,
    alpha_w: float,
    eps_norm: float,
    record_every: int = 1,
    state: LGAState | None = None,
    label_weight: float = 0.0,
    show_progress: bool = True,
) -> dict:
    """Run LGA from θ = 0, y_u = 0 (or `state`); returns the recorded θ_k and the final state."""
    m, n_u = problem.X_l.shape[1], problem.X_u.shape[0]
    dtype = problem.X_l.dtype
    state = state or LGAState(torch.zeros(m, dtype=dtype), torch.zeros(n_u, dtype=dtype))
    steps_kept, thetas = [0], [state.theta]
    for k in progress(range(1, steps + 1), desc="LGA (linear)", disable=not show_progress):
        state = lga_step(state, problem, alpha_theta, alpha_w, eps_norm, label_weight)
        if k % record_every == 0 or k == steps:
            if not torch.isfinite(state.theta).all():
                raise DivergenceError(f"LGA diverged at step {k}: theta is not finite")
            steps_kept.append(k)
            thetas.append(state.theta)
    return {"steps": torch.tensor(steps_kept), "theta": torch.stack(thetas), "state": state}


def diagonal_recurrence(
    lambda_l, lambda_u, b, n_u: int, steps: int, alpha_theta: float, alpha_w: float, eps_norm: float
) -> torch.Tensor:
    """c_{k,i} for k = 0..steps from the per-coordinate recurrence (proof of Proposition 1).

    With diagonal Gram matrices, write s_i = (1/n_u) e_iᵀX_uᵀy_u. Then
    r_i = s_i − b_i + (λ^ℓ_i − λ^u_i) θ_i                   (Eq. 20)
    θ_i ← θ_i − α_θ (λ^u_i θ_i − s_i)                       (Eq. 10, 16)
    s_i ← s_i − α_w (λ^u_i / n_u) r_i / (ε_norm + r_i²)     (Eq. 25 projected on e_i)
    Coordinate i involves only λ^ℓ_i, λ^u_i, b_i: this is Proposition 1.
    """
    lam_l = torch.as_tensor(lambda_l, dtype=torch.float64)
    lam_u = torch.as_tensor(lambda_u, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64).expand_as(lam_l)
    theta = torch.zeros_like(lam_l)
    s = torch.zeros_like(lam_l)
    out = [theta]
    for _ in range(steps):
        r = s - b + (lam_l - lam_u) * theta
        theta, s = theta - alpha_theta * (lam_u * theta - s), s - alpha_w * (lam_u / n_u) * r / (eps_norm + r * r)
        out.append(theta)
    return lam_l * torch.stack(out) / b
