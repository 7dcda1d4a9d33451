"""Oliver et al.'s (2018) in-network augmentation, vectorised on the batch's device.

Oliver et al., "Realistic Evaluation of Deep Semi-Supervised Learning Algorithms", code
`brain-research/realistic-ssl-evaluation`, `lib/networks.py` (`fast_flip`, `jitter`, Gaussian noise
in `wide_resnet`): applied to every forward pass in training, resampled at every pass, in this order:
1. horizontal flip with p = 0.5 (CIFAR only);
2. translation by integer shifts dy, dx uniform in {−t, …, t}, independent per example and axis:
   out[i, j] = reflect_pad(x, t)[i + t + dy, j + t + dx] (their pad-2-REFLECT, transform, crop);
3. additive Gaussian noise N(0, σ²), σ = 0.15 (CIFAR only).
Input: float (N, C, H, W), already preprocessed. Differentiable in x (gathers and additions only).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from gradalign.config import Settings, require
from gradalign.errors import ConfigError

_PRESETS = {
    "cifar10": (2, True, 0.15),
    "cifar100": (2, True, 0.15),
    "svhn": (2, False, 0.0),
    "fashion_mnist": (2, False, 0.0),
}


def translate_reflect(x: Tensor, dy: Tensor, dx: Tensor, pad: int) -> Tensor:
    """out[n, :, i, j] = reflect_pad(x, pad)[n, :, i + pad + dy[n], j + pad + dx[n]]; |dy|, |dx| <= pad."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    rows = torch.arange(h, device=x.device) + pad + dy[:, None]
    cols = torch.arange(w, device=x.device) + pad + dx[:, None]
    padded = padded.gather(2, rows[:, None, :, None].expand(n, c, h, w + 2 * pad))
    return padded.gather(3, cols[:, None, None, :].expand(n, c, h, w))


@dataclass(frozen=True)
class SSLAugment(Settings):
    """Random flip / translation / Gaussian noise of Oliver et al.; `for_dataset` gives their settings."""

    translate: int = 2
    flip: bool = False
    noise_std: float = 0.0

    def validate(self) -> None:
        require(self, "translate", self.translate >= 0, "must be >= 0")
        require(self, "noise_std", self.noise_std >= 0, "must be >= 0")

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """A fresh random augmentation of x (N, C, H, W); `generator` must live on x's device.

        With translate = 0, flip off and noise_std = 0 it returns x itself.
        """
        if x.ndim != 4 or not x.is_floating_point():
            raise ConfigError(f"SSLAugment expects float (N, C, H, W), got {x.dtype} {tuple(x.shape)}")
        if self.translate >= min(x.shape[2], x.shape[3]):
            raise ConfigError(f"translate={self.translate} needs images larger than {tuple(x.shape[2:])}")
        n = x.shape[0]
        if self.flip:
            flips = torch.rand(n, generator=generator, device=x.device) < 0.5
            x = torch.where(flips[:, None, None, None], x.flip(-1), x)
        if self.translate > 0:
            t = self.translate
            shifts = torch.randint(-t, t + 1, (2, n), generator=generator, device=x.device)
            x = translate_reflect(x, shifts[0], shifts[1], t)
        if self.noise_std > 0:
            x = x + self.noise_std * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return x

    @classmethod
    def for_dataset(cls, name: str) -> SSLAugment:
        """cifar10/cifar100: (2, flip, 0.15); svhn and fashion_mnist: (2, no flip, no noise)."""
        if name not in _PRESETS:
            raise ConfigError(f"no SSL augmentation for dataset {name!r}; choose one of {', '.join(_PRESETS)}")
        translate, flip, noise_std = _PRESETS[name]
        return cls(translate=translate, flip=flip, noise_std=noise_std)
