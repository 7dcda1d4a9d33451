"""The DirectPred predictor W_P = U D^α Uᵀ (Halvagal et al. 2022, Eq. 1; Tian et al. 2021).

W_P is set from the eigendecomposition of the correlation matrix E[zzᵀ] instead of being learned;
no gradient flows through it. Two estimates of E[zzᵀ]:
- `closed_form_predictor`: for a linear network z = Wx with isotropic inputs, E[zzᵀ] ∝ W Wᵀ, so
  W_P = f_α(W Wᵀ) exactly (the toy simulations of Figures 2-3; eigenvalues not normalised).
- `DirectPredictor`: a running average C ← τC + (1 − τ) zᵀz / B of the raw, detached embeddings of
  deep networks, whose eigenvalues are clamped at 0, divided by the largest, offset by ε, raised to α.
"""

from __future__ import annotations

import torch


def eigen_power(C: torch.Tensor, alpha: float) -> torch.Tensor:
    """f_α(C) = U D^α Uᵀ for a symmetric positive semi-definite C (negative eigenvalues clamped to 0)."""
    s, U = torch.linalg.eigh(C)
    return (U * s.clamp(min=0) ** alpha) @ U.T


def closed_form_predictor(W: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """W_P = f_α(W Wᵀ) for a linear network with isotropic Gaussian inputs (Eq. 1)."""
    return eigen_power(W @ W.T, alpha).detach()


class DirectPredictor:
    """Running correlation estimate and the predictor built from it, for deep Siamese networks."""

    def __init__(
        self, dim: int, alpha: float = 0.5, tau: float = 0.998, eps: float = 0.0, device=None, dtype=torch.float32
    ):
        if not 0 <= tau < 1:
            raise ValueError(f"tau must be in [0, 1); got {tau}")
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0; got {alpha}")
        self.alpha, self.tau, self.eps = alpha, tau, eps
        self.C = torch.zeros(dim, dim, device=device, dtype=dtype)

    @torch.no_grad()
    def update(self, z: torch.Tensor) -> None:
        """C ← τ C + (1 − τ) zᵀz / B on the raw projector output (not centred, not normalised)."""
        z = z.detach().to(self.C.dtype)
        self.C.mul_(self.tau).add_(z.T @ z / z.shape[0], alpha=1 - self.tau)

    @torch.no_grad()
    def spectrum(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(s, U): eigenvalues clamp(λ, 0) / max λ + ε, ascending, and their eigenvectors."""
        lam, U = torch.linalg.eigh(self.C)
        top = lam.max().clamp(min=torch.finfo(lam.dtype).tiny)
        return lam.clamp(min=0) / top + self.eps, U

    @torch.no_grad()
    def matrix(self) -> torch.Tensor:
        """W_P = U diag(s^α) Uᵀ."""
        s, U = self.spectrum()
        return (U * s**self.alpha) @ U.T

    def state_dict(self) -> dict:
        return {"C": self.C.clone(), "alpha": self.alpha, "tau": self.tau, "eps": self.eps}

    def load_state_dict(self, state: dict) -> None:
        self.C = state["C"].to(self.C)
        self.alpha, self.tau, self.eps = state["alpha"], state["tau"], state["eps"]


def spectrum_summary(s: torch.Tensor) -> dict:
    """min, max, mean of DirectPred's normalised eigenvalues s and the participation ratio (Σs)²/Σs²."""
    s = s.double()
    return {
        "s_min": float(s.min()),
        "s_max": float(s.max()),
        "s_mean": float(s.mean()),
        "participation_ratio": float(s.sum() ** 2 / (s * s).sum()),
    }
