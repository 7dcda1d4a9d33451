"""Conv-Large (Zhang et al. 2020, Table 6; Laine & Aila 2017; Tarvainen & Valpola 2017), as `SemiMeta`'s
`model.py` builds it (book/appendix/protocols.md): every convolution without bias, followed by BatchNorm and leaky
ReLU 0.1; Dropout2d(0.5) after each max pooling; no Gaussian input noise.

    3 × conv3×3 128 (pad 1) → maxpool 2 → Dropout2d 0.5
    3 × conv3×3 256 (pad 1) → maxpool 2 → Dropout2d 0.5
    conv3×3 512 (pad 0) → conv1×1 256 → conv1×1 128 → global average pool → linear 128 → classes

`width` scales every channel count (1.0: the paper's; the cpu presets use a narrower net, named on the page).
On 28×28 inputs (Fashion-MNIST) the maps are 28 → 14 → 7 → 5 instead of 32 → 16 → 8 → 6.
"""

from __future__ import annotations

from torch import nn

# (kind, channels at width 1, kernel, stride, padding): Table 6's rows in order
LAYERS = (
    ("conv", 128, 3, 1, 1),
    ("conv", 128, 3, 1, 1),
    ("conv", 128, 3, 1, 1),
    ("maxpool", None, 2, 2, 0),
    ("dropout", None, None, None, None),
    ("conv", 256, 3, 1, 1),
    ("conv", 256, 3, 1, 1),
    ("conv", 256, 3, 1, 1),
    ("maxpool", None, 2, 2, 0),
    ("dropout", None, None, None, None),
    ("conv", 512, 3, 1, 0),
    ("conv", 256, 1, 1, 0),
    ("conv", 128, 1, 1, 0),
    ("avgpool", None, None, None, None),
    ("linear", None, None, None, None),
)
DROPOUT = 0.5
LEAK = 0.1
BN_MOMENTUM = 0.1  # torch's default; model.py does not set it (our reading)


def channels(c: int, width: float) -> int:
    return max(1, round(c * width))


class ConvLarge(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: float = 1.0, dropout: float = DROPOUT):
        super().__init__()
        if width <= 0:
            raise ValueError(f"width must be > 0, got {width}")
        layers, cin = [], in_channels
        for kind, c, k, s, p in LAYERS:
            if kind == "conv":
                cout = channels(c, width)
                layers += [
                    nn.Conv2d(cin, cout, k, s, p, bias=False),
                    nn.BatchNorm2d(cout, momentum=BN_MOMENTUM),
                    nn.LeakyReLU(LEAK),
                ]
                cin = cout
            elif kind == "maxpool":
                layers.append(nn.MaxPool2d(k, s, p))
            elif kind == "dropout":
                layers.append(nn.Dropout2d(dropout))
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(cin, num_classes)
        self.feature_dim = cin

    def features(self, x):
        """The 128-d pooled features (Figure 3's t-SNE input)."""
        return self.body(x)

    def forward(self, x):
        return self.head(self.body(x))


def parameter_count(num_classes: int = 10, in_channels: int = 3, width: float = 1.0) -> int:
    """Parameters worked out from `LAYERS`: k²·c_in·c_out per conv (no bias), 2·c_out per BN (γ, β), and
    c_in·classes + classes for the linear head."""
    total, cin = 0, in_channels
    for kind, c, k, _, _ in LAYERS:
        if kind == "conv":
            cout = channels(c, width)
            total += k * k * cin * cout + 2 * cout
            cin = cout
    return total + cin * num_classes + num_classes
