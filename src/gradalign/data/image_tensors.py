"""Image tensors as the trainers take them: uint8 (N, C, H, W), their channel statistics, and the checks
that a training and a test set fit together."""

from __future__ import annotations

import torch

from gradalign.errors import ConfigError


def as_uint8_nchw(images) -> torch.Tensor:
    """uint8 (N, H, W) or (N, C, H, W) → (N, C, H, W)."""
    images = torch.as_tensor(images)
    if images.dtype != torch.uint8 or images.dim() not in (3, 4):
        raise ConfigError(f"images must be uint8 (N, H, W) or (N, C, H, W); got {images.dtype} {tuple(images.shape)}")
    return images[:, None] if images.dim() == 3 else images


def channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 (N, C, H, W) images scaled to [0, 1] (float64, in chunks)."""
    total = squares = torch.zeros(images.shape[1], dtype=torch.float64, device=images.device)
    for chunk in images.split(4096):
        x = chunk.double() / 255
        total, squares = total + x.sum(dim=(0, 2, 3)), squares + (x * x).sum(dim=(0, 2, 3))
    n = images.numel() // images.shape[1]
    mean = total / n
    return tuple(mean.tolist()), tuple((squares / n - mean**2).clamp(min=1e-12).sqrt().tolist())


def check_image_sets(train_images, train_labels, test_images, test_labels) -> None:
    if train_images.shape[1] not in (1, 3):
        raise ConfigError(f"images need 1 or 3 channels; got {train_images.shape[1]}")
    if train_images.shape[1:] != test_images.shape[1:]:
        raise ConfigError(
            f"train and test images differ in shape: {tuple(train_images.shape[1:])} vs {tuple(test_images.shape[1:])}"
        )
    for images, labels, name in ((train_images, train_labels, "train"), (test_images, test_labels, "test")):
        if labels.shape != (len(images),):
            raise ConfigError(f"{name} labels must have shape ({len(images)},); got {tuple(labels.shape)}")
    if (test_labels < 0).any() or not (train_labels >= 0).any():
        raise ConfigError("test labels must be ≥ 0, and some training labels too (−1 marks unlabelled images)")
