"""A small CNN for the `smoke`/`cpu` presets of LGA's benchmark (Figures 5-7, Table 1).

WRN-28-2 takes about 0.55 s per step of 64 images on this two-core CPU, far too slow for the
thousands of steps × methods × label counts of a figure. This stand-in keeps the ingredients that
matter to the methods (convolutions, BatchNorm, leaky ReLU 0.1 as in WRN-28-2, global average
pooling, a linear head): three 3×3 conv blocks of `width`, 2·width, 4·width channels, the first two
followed by 2×2 max pooling. BN momentum 0.01 (WRN's 0.001 averages over more steps than a cpu run has).
"""

from __future__ import annotations

from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1, width: int = 32):
        super().__init__()
        layers, cin = [], in_channels
        for i, cout in enumerate((width, 2 * width, 4 * width)):
            layers += [
                nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout, momentum=0.01),
                nn.LeakyReLU(0.1),
            ]
            if i < 2:
                layers.append(nn.MaxPool2d(2))
            cin = cout
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(cin, num_classes)
        self.feature_dim = cin

    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.body(x))
