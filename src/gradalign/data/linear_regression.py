"""Linear-regression problems for LGA §3.1: labeled and unlabeled data with chosen spectra.

`diagonal_problem` builds X_l, X_u whose Gram matrices (1/n) XᵀX are diagonal with prescribed
eigenvalues λ^ℓ_i, λ^u_i (the assumption of §3.1), and labels with (1/n_l) X_lᵀ y_l = b.
`gaussian_problem` builds generic correlated data for the checks that need no diagonal structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.errors import ConfigError


@dataclass(frozen=True)
class LinearProblem:
    X_l: torch.Tensor  # (n_l, m) labeled inputs
    y_l: torch.Tensor  # (n_l,) labels
    X_u: torch.Tensor  # (n_u, m) unlabeled inputs

    @property
    def lambda_l(self) -> torch.Tensor:
        """Diagonal of (1/n_l) X_lᵀX_l: the eigenvalues λ^ℓ_i when the Gram matrix is diagonal."""
        return (self.X_l * self.X_l).sum(0) / self.X_l.shape[0]

    @property
    def lambda_u(self) -> torch.Tensor:
        return (self.X_u * self.X_u).sum(0) / self.X_u.shape[0]

    @property
    def b(self) -> torch.Tensor:
        """b = (1/n_l) X_lᵀ y_l (appendix A)."""
        return self.X_l.T @ self.y_l / self.X_l.shape[0]

    def supervised_optimum(self) -> torch.Tensor:
        """θ* = (X_lᵀX_l)⁻¹ X_lᵀ y_l (Eq. 5)."""
        return torch.linalg.solve(self.X_l.T @ self.X_l, self.X_l.T @ self.y_l)


def _orthonormal_columns(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, m, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))  # unique QR


def diagonal_problem(
    lambda_l, lambda_u, b, n_l: int, n_u: int, seed: int = 0, label_noise: float = 1.0
) -> LinearProblem:
    """Data with (1/n_l) X_lᵀX_l = diag(λ^ℓ), (1/n_u) X_uᵀX_u = diag(λ^u) and (1/n_l) X_lᵀy_l = b.

    The labels also carry a component orthogonal to the columns of X_l (size `label_noise`), which
    leaves b unchanged and makes the supervised optimum a non-zero-residual fit.
    """
    lam_l = torch.as_tensor(lambda_l, dtype=torch.float64)
    lam_u = torch.as_tensor(lambda_u, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64).expand_as(lam_l)
    m = lam_l.numel()
    if lam_u.numel() != m:
        raise ConfigError(f"lambda_l and lambda_u must have the same length; got {m} and {lam_u.numel()}")
    if n_l < m + 1 or n_u < m:
        raise ConfigError(f"diagonal Gram matrices need n_l > m and n_u >= m; got n_l={n_l}, n_u={n_u}, m={m}")
    if (lam_l <= 0).any() or (lam_u <= 0).any():
        raise ConfigError("eigenvalues lambda_l and lambda_u must be > 0")
    gen = torch.Generator().manual_seed(seed)
    q_l = _orthonormal_columns(n_l, m + 1, gen)
    q_u = _orthonormal_columns(n_u, m, gen)
    scale_l = (n_l * lam_l).sqrt()
    X_l = q_l[:, :m] * scale_l
    y_l = q_l[:, :m] @ (n_l * b / scale_l) + label_noise * q_l[:, m]
    X_u = q_u * (n_u * lam_u).sqrt()
    return LinearProblem(X_l, y_l, X_u)


def gaussian_problem(
    m: int, n_l: int, n_u: int, seed: int = 0, noise: float = 0.1, spectrum: tuple[float, float] = (0.5, 2.0)
) -> LinearProblem:
    """Correlated Gaussian inputs, covariance Q diag(λ) Qᵀ with a random rotation Q and λ uniform in
    `spectrum`; labels y = xᵀθ_true + noise. The Gram matrices are far from diagonal."""
    gen = torch.Generator().manual_seed(seed)
    rotation = _orthonormal_columns(m, m, gen)
    lo, hi = spectrum
    root = (lo + (hi - lo) * torch.rand(m, generator=gen, dtype=torch.float64)).sqrt()
    X_l = torch.randn(n_l, m, generator=gen, dtype=torch.float64) * root @ rotation.T
    X_u = torch.randn(n_u, m, generator=gen, dtype=torch.float64) * root @ rotation.T
    theta = torch.randn(m, generator=gen, dtype=torch.float64)
    y_l = X_l @ theta + noise * torch.randn(n_l, generator=gen, dtype=torch.float64)
    return LinearProblem(X_l, y_l, X_u)
