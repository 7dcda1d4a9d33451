"""The Siamese network of Halvagal et al. (2022, §3): VGG11 backbone + a one-hidden-layer projector."""

from __future__ import annotations

import torch
from torch import nn

from gradalign.models.vgg import VGG11


def projection_mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """One hidden layer: Linear - BatchNorm1d - ReLU - Linear (§3)."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out_dim)
    )


class SiameseNet(nn.Module):
    """Backbone + projector: images -> (features h, embedding z)."""

    def __init__(self, in_channels: int, width: float, hidden: int, out_dim: int):
        super().__init__()
        self.backbone = VGG11(in_channels, width)
        self.projector = projection_mlp(self.backbone.feature_dim, hidden, out_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return h, self.projector(h)
