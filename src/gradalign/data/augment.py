"""SimCLR augmentations for a batch already on the device (Chen et al. 2020, Appendix A).

Halvagal et al. (2022, §3) train with "SimCLR augmentations". For each sample, with its own random
parameters drawn from a `torch.Generator` (on the batch's device; CPU runs are reproducible):
1. random resized crop: area fraction in `crop_scale`, aspect ratio log-uniform in `crop_ratio`
   (3/4-4/3); up to 10 tries per sample for a box that fits, else the whole image (torchvision's
   rule; its fallback centre crop is the whole image for square inputs); resized back to the input
   size by bilinear `affine_grid`/`grid_sample`, box corners continuous rather than whole pixels;
2. horizontal flip, p = 0.5 (folded into the same affine map);
3. colour jitter with p = 0.8: brightness, contrast, saturation factors uniform in [1 − s, 1 + s]
   with s = 0.4, hue shift uniform in [−0.1, 0.1] (SimCLR's strength 0.5 for CIFAR-10), applied in the
   fixed order brightness, contrast, saturation, hue (torchvision shuffles the order); one-channel
   images get brightness and contrast only;
4. random grayscale, p = 0.2 (RGB only);
5. per-channel normalisation (x − mean) / std.
No Gaussian blur: SimCLR leaves it out for CIFAR-size images.
Input: float (N, C, H, W) in [0, 1], C = 1 or 3; output: same shape, normalised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601 luma weights, torchvision's grayscale."""


@dataclass(frozen=True)
class SimCLRAugment:
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    grayscale_p: float = 0.2
    crop_tries: int = 10

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        rand = lambda *shape: torch.rand(*shape, generator=generator, device=x.device)  # noqa: E731
        x = self.crop_and_flip(x, rand)
        x = torch.where(_per_sample(rand(len(x)) < self.jitter_p), self.jitter(x, rand), x)
        if x.shape[1] == 3:
            x = torch.where(_per_sample(rand(len(x)) < self.grayscale_p), _gray(x).expand_as(x), x)
        return normalise(x, self.mean, self.std)

    def crop_and_flip(self, x: torch.Tensor, rand) -> torch.Tensor:
        n, _, height, width = x.shape
        area = _between(rand(n, self.crop_tries), *self.crop_scale)
        ratio = torch.exp(_between(rand(n, self.crop_tries), *map(math.log, self.crop_ratio)))
        w = torch.sqrt(area * ratio * height / width)  # box sides as fractions of the image's
        h = torch.sqrt(area / ratio * width / height)
        fits = (w <= 1) & (h <= 1)
        first = fits.int().argmax(dim=1, keepdim=True)  # first box that fits
        any_fits = fits.any(dim=1)
        w = torch.where(any_fits, w.gather(1, first)[:, 0], 1.0)
        h = torch.where(any_fits, h.gather(1, first)[:, 0], 1.0)
        cx, cy = (2 * rand(n) - 1) * (1 - w), (2 * rand(n) - 1) * (1 - h)  # box centres, in [−1, 1]
        sign = torch.where(rand(n) < self.flip_p, -1.0, 1.0)
        zero = torch.zeros_like(w)
        theta = torch.stack([torch.stack([sign * w, zero, cx], 1), torch.stack([zero, h, cy], 1)], 1)
        grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def jitter(self, x: torch.Tensor, rand) -> torch.Tensor:
        n = len(x)
        factor = lambda s: _per_sample(_between(rand(n), 1 - s, 1 + s))  # noqa: E731
        x = (x * factor(self.brightness)).clamp(0, 1)
        mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
        x = (mean + factor(self.contrast) * (x - mean)).clamp(0, 1)
        if x.shape[1] == 3:
            gray = _gray(x)
            x = (gray + factor(self.saturation) * (x - gray)).clamp(0, 1)
            x = _shift_hue(x, _between(rand(n), -self.hue, self.hue).view(n, 1, 1))
        return x


def normalise(x: torch.Tensor, mean, std) -> torch.Tensor:
    """(x − mean) / std per channel, with Python scalars: no host-to-device copy."""
    return torch.cat([(x[:, i : i + 1] - m) / s for i, (m, s) in enumerate(zip(mean, std))], dim=1)


def _between(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return low + (high - low) * u


def _per_sample(v: torch.Tensor) -> torch.Tensor:
    return v.view(-1, 1, 1, 1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    return sum(c * x[:, i : i + 1] for i, c in enumerate(LUMA))


def _shift_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """RGB → HSV, hue + shift (mod 1), → RGB, for (N, 3, H, W) in [0, 1]; shift (N, 1, 1)."""
    r, g, b = x.unbind(1)
    value, low = x.amax(dim=1), x.amin(dim=1)
    chroma = value - low
    sat = torch.where(value > 0, chroma / value.clamp(min=1e-12), 0.0)
    c = chroma.clamp(min=1e-12)
    hue = torch.where(value == r, (g - b) / c, torch.where(value == g, 2 + (b - r) / c, 4 + (r - g) / c))
    hue = torch.where(chroma > 0, hue, 0.0) / 6 + shift
    k = lambda m: (m + 6 * hue) % 6  # noqa: E731  HSV → RGB: v − v s clamp(min(k, 4 − k), 0, 1)
    return torch.stack([value - value * sat * torch.minimum(k(m), 4 - k(m)).clamp(0, 1) for m in (5, 3, 1)], 1)
