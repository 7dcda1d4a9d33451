"""The standard CIFAR augmentation on a batch already on the device: random crop with zero padding, then a
horizontal flip (SGR's App. E; SemiMeta's `dataloader.py`, without the flip for SVHN)."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def crop_flip(x: torch.Tensor, padding: int, flip: bool, generator: torch.Generator) -> torch.Tensor:
    """Random crop of x's size from x zero-padded by `padding` (torchvision's RandomCrop(size, padding)), then a
    horizontal flip with p = 0.5; x float (N, C, H, W) in [0, 1], one draw per image from `generator`."""
    n, c, h, w = x.shape
    if padding:
        shifts = torch.randint(0, 2 * padding + 1, (2, n), generator=generator, device=x.device)
        padded = F.pad(x, (padding, padding, padding, padding))
        rows = torch.arange(h, device=x.device) + shifts[0][:, None]
        cols = torch.arange(w, device=x.device) + shifts[1][:, None]
        x = padded.gather(2, rows[:, None, :, None].expand(n, c, h, w + 2 * padding))
        x = x.gather(3, cols[:, None, None, :].expand(n, c, h, w))
    if flip:
        flips = torch.rand(n, generator=generator, device=x.device) < 0.5
        x = torch.where(flips[:, None, None, None], x.flip(-1), x)
    return x
