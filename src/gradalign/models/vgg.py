"""VGG11 backbone (Simonyan & Zisserman 2014, configuration "A"), as in Halvagal et al. 2022, §3.

The paper's Table 1 trains "a VGG11 backbone with a one-hidden-layer projection MLP". Here: eight
3×3 convolutions (64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M; M = 2×2 max-pool), each
followed by BatchNorm and ReLU (conv bias dropped: BatchNorm's shift replaces it), no classifier.

Small inputs: a max-pool is skipped when the map is already 1×1 (28×28 maps go 14, 7, 3, 1, 1), and
the network always ends with adaptive average pooling to 1×1 (96×96 maps end at 3×3), so 28×28,
32×32 and 96×96 images all give flat features of size `feature_dim`.
"""

from __future__ import annotations

import torch
from torch import nn

VGG11_LAYERS = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
"""Configuration "A" of Simonyan & Zisserman (2014), Table 1: output channels of each 3×3 conv; M: max-pool."""


def scaled_channels(channels: int, width: float) -> int:
    """Channels of a layer at width multiplier `width` (rounded, at least 1)."""
    return max(1, round(channels * width))


class MaxPoolUnlessSingle(nn.MaxPool2d):
    """2×2 max-pool, skipped when the map is already 1 pixel high or wide."""

    def __init__(self):
        super().__init__(kernel_size=2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if min(x.shape[-2:]) < 2 else super().forward(x)


class VGG11(nn.Module):
    """VGG11-BN feature extractor: (N, in_channels, H, W) images → (N, feature_dim) features."""

    def __init__(self, in_channels: int = 3, width: float = 1.0):
        super().__init__()
        layers, channels = [], in_channels
        for item in VGG11_LAYERS:
            if item == "M":
                layers.append(MaxPoolUnlessSingle())
                continue
            out = scaled_channels(item, width)
            layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            channels = out
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = channels
        for module in self.modules():  # He initialisation, as in torchvision's VGG
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)
