"""WRN-28-2 as in Oliver et al. (2018), "Realistic Evaluation of Deep SSL" (the LGA benchmark, §4).

Facts from their public code (book/appendix/protocols.md): a 3×3 stem to 16 channels; three stages of 4
pre-activation residual units with widths 32, 64, 128 (strides 1, 2, 2); in the first unit of the
first stage the BN + leaky ReLU is applied before the shortcut branches off ("activate before
residual"); a 1×1 convolution shortcut only where the channel count changes; leaky ReLU slope 0.1;
final BN + leaky ReLU + global average pool + linear. Convolutions have no bias and are initialised
normal(0, sqrt(2 / (k² · out_channels))); the logit layer is Glorot-normal with a zero bias. BN decay
0.999 and epsilon 1e-3 (PyTorch: momentum 0.001, eps 1e-3).
"""

from __future__ import annotations

import math

import torch
from torch import nn

SLOPE = 0.1


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=0.001, eps=1e-3)


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)
    nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (k * k * cout)))
    return conv


class ResidualUnit(nn.Module):
    """Pre-activation unit: [BN, lReLU] → conv3×3(stride) → BN, lReLU → conv3×3, plus the shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, activate_before_residual: bool):
        super().__init__()
        self.activate_before_residual = activate_before_residual
        self.bn1, self.conv1 = _bn(cin), _conv(cin, cout, 3, stride)
        self.bn2, self.conv2 = _bn(cout), _conv(cout, cout, 3)
        self.shortcut = _conv(cin, cout, 1, stride) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.leaky_relu(self.bn1(x), SLOPE)
        skip = act if self.activate_before_residual else x
        out = self.conv2(nn.functional.leaky_relu(self.bn2(self.conv1(act)), SLOPE))
        return out + (self.shortcut(skip) if self.shortcut is not None else skip)


class WideResNet(nn.Module):
    """WRN-(6·units+4)-widen; the defaults give WRN-28-2 (about 1.5M parameters)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, widen: int = 2, units: int = 4):
        super().__init__()
        widths = (16 * widen, 32 * widen, 64 * widen)
        layers, cin = [_conv(in_channels, 16, 3)], 16
        for stage, (cout, stride) in enumerate(zip(widths, (1, 2, 2))):
            for i in range(units):
                layers.append(ResidualUnit(cin, cout, stride if i == 0 else 1, stage == 0 and i == 0))
                cin = cout
        self.body = nn.Sequential(*layers)
        self.bn = _bn(cin)
        self.fc = nn.Linear(cin, num_classes)
        nn.init.xavier_normal_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)
        self.feature_dim = cin

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.leaky_relu(self.bn(self.body(x)), SLOPE).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
