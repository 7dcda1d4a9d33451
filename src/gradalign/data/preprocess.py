"""CIFAR preprocessing of Oliver et al. (2018): global contrast normalisation, then ZCA whitening.

Oliver et al., "Realistic Evaluation of Deep Semi-Supervised Learning Algorithms", code
`brain-research/realistic-ssl-evaluation`, `lib/dataset_utils.py` (`gcn`, `get_zca_transformer`),
applied in `build_tfrecords.py`: GCN on every image, ZCA fitted on the GCN'd training images and
applied to train and test. Note that their ZCA is fitted on all 50,000 CIFAR training images, before
the 5,000 validation images are split off. SVHN is only scaled to [−1, 1] (no GCN, no ZCA).

Both functions work on flattened images; flattening (C, H, W) rather than their (H, W, C) order only
permutes the features, which commutes with GCN and ZCA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gradalign.errors import ConfigError


def _flat(x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[0] < 1 or math.prod(x.shape[1:]) < 2:
        raise ConfigError(f"expected a batch of images (N, ...) with N >= 1, got shape {tuple(x.shape)}")
    return x.reshape(x.shape[0], -1)


def global_contrast_normalize(x: Tensor, scale: float = 55.0, eps: float = 1e-10) -> Tensor:
    """Per image: x ← scale · (x − mean(x)) / ‖x − mean(x)‖₂, over all of the image's values.

    Oliver et al.'s numpy `gcn(images, multiplier=55, eps=1e-10)`: the norm is the plain L2 norm
    (sqrt of the sum of squares, not of the mean), so every output image has zero mean and L2 norm
    `scale`; an image whose norm is below eps (constant) is divided by 1 instead. Computed in float64
    (as theirs); returns float32, or x's dtype when x is floating. The result does not depend on
    the input's range ([0, 255] or [0, 1]) except through eps.
    """
    if not scale > 0 or not eps >= 0:
        raise ConfigError(f"GCN needs scale > 0 and eps >= 0, got scale={scale}, eps={eps}")
    flat = _flat(x).double()
    flat = flat - flat.mean(dim=1, keepdim=True)
    norm = flat.norm(dim=1, keepdim=True)
    norm = torch.where(norm < eps, torch.ones_like(norm), norm)
    out_dtype = x.dtype if x.is_floating_point() else torch.float32
    return (scale * flat / norm).to(out_dtype).reshape(x.shape)


@dataclass(frozen=True)
class ZCA:
    """ZCA whitening x ↦ (x − mean) · transform on flattened images; transform is symmetric."""

    mean: Tensor
    transform: Tensor

    def apply(self, x: Tensor) -> Tensor:
        """(N, C, H, W) or (N, D) → same shape and dtype (float32 for integer input), on x's device."""
        flat = _flat(x)
        if flat.shape[1] != self.mean.numel():
            raise ConfigError(f"ZCA was fitted on {self.mean.numel()} values per image, got {flat.shape[1]}")
        dtype = x.dtype if x.is_floating_point() else torch.float32
        mean = self.mean.to(device=x.device, dtype=dtype)
        transform = self.transform.to(device=x.device, dtype=dtype)
        return ((flat.to(dtype) - mean) @ transform).reshape(x.shape)


def fit_zca(x: Tensor, regularization: float = 0.1, eps: float = 1e-10, chunk: int = 4096) -> ZCA:
    """Oliver et al.'s `get_zca_transformer(images, identity_scale=0.1, eps=1e-10)`.

    C = unbiased covariance (np.cov, divisor N − 1) of the flattened images (after GCN);
    C + regularization·I = U diag(s) Uᵀ; transform = U diag(1/sqrt(s + eps)) Uᵀ; mean = per-feature
    mean. Whitened data then has covariance C (C + rI)⁻¹ (identity when r = 0). Computed in float64 on
    x's device, accumulating XᵀX over chunks of `chunk` images; stored float32.
    """
    flat = _flat(x)
    n, dim = flat.shape
    if n < 2:
        raise ConfigError(f"fit_zca needs at least 2 images, got {n}")
    if not regularization >= 0 or not eps >= 0 or chunk < 1:
        raise ConfigError(f"fit_zca needs regularization, eps >= 0, chunk >= 1; got {regularization}, {eps}, {chunk}")
    mean = sum(part.double().sum(dim=0) for part in flat.split(chunk)) / n
    cov = torch.zeros(dim, dim, dtype=torch.float64, device=flat.device)
    for part in flat.split(chunk):
        centred = part.double() - mean
        cov.addmm_(centred.T, centred)
    cov = cov / (n - 1) + regularization * torch.eye(dim, dtype=torch.float64, device=flat.device)
    s, u = torch.linalg.eigh(cov)
    transform = (u * (s.clamp_min(0) + eps).rsqrt()) @ u.T
    return ZCA(mean=mean.float(), transform=transform.float())
