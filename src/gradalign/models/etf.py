"""The fixed simplex-ETF classifier head (Yang et al. 2024, Eq. 7), never trained.

M = sqrt(K/(K−1)) · P (I_K − 1 1ᵀ/K), with P ∈ R^{d×K} having orthonormal columns (from the QR of a
random Gaussian d×K matrix, as in the same group's code; book/appendix/protocols.md). Its columns m_k have unit norm
and pairwise cosine −1/(K−1): the K class vectors of a regular simplex. It needs d ≥ K. The logits of
a feature x are xᵀM (one per class).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def etf_matrix(dim: int, classes: int, generator: torch.Generator | None = None, dtype=torch.float32) -> torch.Tensor:
    """A d × K simplex equiangular tight frame (Eq. 7)."""
    if classes < 2:
        raise ValueError(f"an ETF needs at least 2 classes, got {classes}")
    if dim < classes:
        raise ValueError(f"an ETF of {classes} classes needs a feature size of at least {classes}, got {dim}")
    gauss = torch.randn(dim, classes, generator=generator, dtype=torch.float64)
    p, _ = torch.linalg.qr(gauss)  # d × K, orthonormal columns
    centre = torch.eye(classes, dtype=torch.float64) - torch.full(
        (classes, classes), 1.0 / classes, dtype=torch.float64
    )
    return (math.sqrt(classes / (classes - 1)) * p @ centre).to(dtype)


class FixedETFHead(nn.Module):
    """Logits x ↦ flatten(x) M with M a fixed ETF (a buffer: saved with the model, never a parameter)."""

    def __init__(self, dim: int, classes: int, generator: torch.Generator | None = None):
        super().__init__()
        self.register_buffer("weight", etf_matrix(dim, classes, generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight
