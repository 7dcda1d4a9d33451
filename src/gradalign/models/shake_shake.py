"""ResNet-26 2×96d with shake-shake regularisation (Gastaldi 2017), the backbone of Zhang et al. (2020)
Table 2, as Mean Teacher's `cifar_shakeshake26` builds it (book/appendix/protocols.md):

    stem conv3×3 in → 16 (no bias, no BN, no ReLU)
    3 stages of 4 blocks, widths 96 / 192 / 384 (strides 1, 2, 2)
        block: x + shake(branch_a(x), branch_b(x)),
        branch: ReLU → conv3×3 → BN → ReLU → conv3×3 → BN (convolutions without bias)
        shortcut of the first block: conv1×1 + BN at stride 1 (16 → 96), the shift-conv below at stride 2
    global average pool (the code's AvgPool2d(8) on 32×32) → Linear(384 → classes)

Shift-conv downsampling: concatenate x[..., ::2, ::2] and x[..., 1::2, 1::2], ReLU, a grouped (2 groups) 1×1
convolution with bias, BN. Shake: in training, out = g·a + (1 − g)·b with g ~ U(0, 1) drawn per sample; the
backward pass uses an independent gate h ~ U(0, 1) per sample. In eval mode g = 0.5 both ways (our choice: the
code's backward draws a random gate even in eval mode, which only the meta step's gradient would see; with
0.5 the eval-mode network is an ordinary function, so the meta-gradient's JVP form applies to it too).

`width` scales every channel count (1.0: the paper's 26.2M-parameter network on 10 classes).
"""

from __future__ import annotations

import torch
from torch import nn

STEM = 16
WIDTHS = (96, 192, 384)
BLOCKS = 4  # per stage: depth 26 = 2 + 3 stages × 4 blocks × 2 convolutions


def channels(c: int, width: float) -> int:
    return max(1, round(c * width))


class _Shake(torch.autograd.Function):
    @staticmethod
    def forward(a, b, gate):
        return a * gate + b * (1 - gate)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.gate_shape = inputs[2].shape

    @staticmethod
    def backward(ctx, grad):
        h = torch.rand(ctx.gate_shape, dtype=grad.dtype, device=grad.device)
        return grad * h, grad * (1 - h), None


def shake(a: torch.Tensor, b: torch.Tensor, training: bool) -> torch.Tensor:
    """Shake-shake's combination of two branches (per-sample gates in training, 0.5 in eval)."""
    if not training:
        return 0.5 * (a + b)
    gate = torch.rand((a.shape[0],) + (1,) * (a.dim() - 1), dtype=a.dtype, device=a.device)
    return _Shake.apply(a, b, gate)


def _branch(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.ReLU(),
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
        nn.BatchNorm2d(cout),
    )


class ShiftConvDownsample(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(2 * cin, cout, 1, groups=2)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = torch.cat((x[..., 0::2, 0::2], x[..., 1::2, 1::2]), dim=1)
        return self.bn(self.conv(torch.relu(x)))


class ShakeShakeBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.branch_a, self.branch_b = _branch(cin, cout, stride), _branch(cin, cout, stride)
        self.shortcut = None
        if stride != 1:
            self.shortcut = ShiftConvDownsample(cin, cout)
        elif cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        residual = x if self.shortcut is None else self.shortcut(x)
        return residual + shake(self.branch_a(x), self.branch_b(x), self.training)


class ShakeShake26(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: float = 1.0):
        super().__init__()
        if width <= 0:
            raise ValueError(f"width must be > 0, got {width}")
        cin = channels(STEM, width)
        layers: list[nn.Module] = [nn.Conv2d(in_channels, cin, 3, 1, 1, bias=False)]
        for stage, c in enumerate(WIDTHS):
            cout = channels(c, width)
            for block in range(BLOCKS):
                layers.append(ShakeShakeBlock(cin, cout, 2 if stage > 0 and block == 0 else 1))
                cin = cout
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(cin, num_classes)
        self.feature_dim = cin

    def features(self, x):
        """The pooled features (384-d at width 1)."""
        return self.body(x)

    def forward(self, x):
        return self.head(self.body(x))


def parameter_count(num_classes: int = 10, in_channels: int = 3, width: float = 1.0) -> int:
    """Parameters worked out from the layer list: k²·c_in·c_out per convolution without bias, 2·c per BN,
    the shift-conv's two grouped halves (2·c_in·c_out/2 + c_out bias), and the linear head."""
    stem = channels(STEM, width)
    total, cin = 9 * in_channels * stem, stem
    for stage, c in enumerate(WIDTHS):
        cout = channels(c, width)
        for block in range(BLOCKS):
            total += 2 * (9 * cin * cout + 2 * cout + 9 * cout * cout + 2 * cout)  # two branches
            if stage > 0 and block == 0:
                total += cin * cout + cout + 2 * cout  # grouped 1×1 on 2·c_in channels (2 groups), bias, BN
            elif cin != cout:
                total += cin * cout + 2 * cout
            cin = cout
    return total + cin * num_classes + num_classes
