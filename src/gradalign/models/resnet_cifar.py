"""The CIFAR ResNet of He et al. (2016, §4.2) and PlainNet, with the local splits of Yang et al. (2024, App. E).

ResNet-(6n+2): a stem (conv3×3 → 16, BN, ReLU), three stages of n basic blocks with widths 16, 32, 64
(times `width`), stride 2 in the first block of stages 2 and 3, then global average pooling and a linear
layer. n = 5 gives ResNet-32 (SGR's Tables 3 and 6). A basic block is conv3×3(stride) → BN → ReLU →
conv3×3 → BN, plus the shortcut, → ReLU.

Shortcut: where the shape changes (stride 2 or a new width) it is a 1×1 convolution (with the stride)
+ BN, as in the InfoPro code (`blackfeather-wang/InfoPro-Pytorch`, networks/resnet.py), whose ResNet-32
SGR's Table 6 compares with; elsewhere the identity. (He et al.'s option A, zero padding, would save
2,752 parameters of 0.467 M.) Initialisation as there: convolutions normal(0, sqrt(2 / (k²·C_out))),
BN weight 1 and bias 0, the linear layer PyTorch's default.

PlainNet (SGR, Table 3; book/appendix/protocols.md) is the same network without identity connections: each block is
conv3×3-BN-ReLU twice, no shortcut of any kind.

Local splits (App. E; book/appendix/protocols.md "Splits of ResNet-32"), for n blocks per stage:
  K = 3n + 1 (16 for ResNet-32): the stem and each block are modules;
  K = 3: by spatial resolution: stem + stage 1 (32 px) | stage 2 (16 px) | stage 3 (8 px);
  K = 2: stem + stages 1–2 | stage 3 (the last stage, 8×8, is the second module);
  K = 1: everything but the classifier (global BP).
`split_into_modules` returns `nn.Sequential`s holding the model's own submodules (shared parameters, not
copies), so `nn.Sequential(*modules, model.head)` computes exactly `model`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gradalign.errors import ConfigError
from gradalign.models.vgg import scaled_channels

STAGE_WIDTHS = (16, 32, 64)
"""Widths of the stem/stage 1, stage 2 and stage 3 at width multiplier 1 (He et al. 2016, §4.2)."""

STAGE_STRIDES = (1, 2, 2)


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """conv3×3(stride)-BN-ReLU-conv3×3-BN (+ shortcut) → ReLU; `residual=False` gives PlainNet's block."""

    def __init__(self, cin: int, cout: int, stride: int = 1, residual: bool = True):
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = _conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.residual = residual
        self.shortcut = None
        if residual and (stride != 1 or cin != cout):  # 1×1 conv + BN projection, as InfoPro's ResNet-32
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.out_channels, self.stride = cout, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        if self.residual:
            out = out + (x if self.shortcut is None else self.shortcut(x))
        return torch.relu(out)


class CifarResNet(nn.Module):
    """ResNet-(6n+2) or PlainNet-(6n+2) for small images: attributes `stem`, `blocks` (3n), `head`."""

    def __init__(
        self, blocks_per_stage: int, classes: int = 10, in_channels: int = 3, width: float = 1.0, plain: bool = False
    ):
        super().__init__()
        widths = [scaled_channels(w, width) for w in STAGE_WIDTHS]
        self.blocks_per_stage, self.plain = blocks_per_stage, plain
        self.stem = nn.Sequential(_conv3x3(in_channels, widths[0]), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for cout, stride in zip(widths, STAGE_STRIDES):
            for i in range(blocks_per_stage):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1, residual=not plain))
                cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))
        self.stem_channels, self.feature_dim = widths[0], cin
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
                nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's feature map (before pooling)."""
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def cifar_resnet(
    depth: int, classes: int = 10, in_channels: int = 3, width: float = 1.0, plain: bool = False
) -> CifarResNet:
    """ResNet-`depth` (PlainNet-`depth` if `plain`) with depth = 6n + 2 weight layers, n ≥ 1."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ConfigError(f"a CIFAR ResNet has depth 6n + 2 with n >= 1 (8, 14, 20, 32, ...), got {depth!r}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise ConfigError(f"classes must be a positive integer, got {classes!r}")
    if not (isinstance(width, (int, float)) and not isinstance(width, bool) and math.isfinite(width) and width > 0):
        raise ConfigError(f"width must be a positive finite number, got {width!r}")
    return CifarResNet((depth - 2) // 6, classes, in_channels, float(width), plain)


def resnet32(classes: int = 10, in_channels: int = 3, width: float = 1.0, plain: bool = False) -> CifarResNet:
    """ResNet-32 (n = 5; 0.467 M parameters for 10 classes) or, with `plain=True`, PlainNet-32."""
    return cifar_resnet(32, classes, in_channels, width, plain)


def valid_splits(model: CifarResNet) -> tuple[int, ...]:
    """The numbers of local modules `split_into_modules` accepts: 1, 2, 3 and 3n + 1 (16 for ResNet-32)."""
    return tuple(sorted({1, 2, 3, len(model.blocks) + 1}))


def _block_groups(model: CifarResNet, modules: int) -> list[list[nn.Module]]:
    n = model.blocks_per_stage
    blocks = list(model.blocks)
    if isinstance(modules, bool) or not isinstance(modules, int) or modules not in valid_splits(model):
        raise ConfigError(
            f"K = {modules!r} is not a split of this {2 * len(blocks) + 2}-layer network; "
            f"valid K: {valid_splits(model)}"
        )
    if modules == len(blocks) + 1:
        return [[model.stem]] + [[block] for block in blocks]
    if modules == 1:
        return [[model.stem, *blocks]]
    if modules == 2:
        return [[model.stem, *blocks[: 2 * n]], blocks[2 * n :]]
    return [[model.stem, *blocks[:n]], blocks[n : 2 * n], blocks[2 * n :]]


def split_into_modules(model: CifarResNet, modules: int) -> nn.ModuleList:
    """The K feature modules (K = `modules`) of App. E, sharing `model`'s parameters; the head is not included."""
    return nn.ModuleList(nn.Sequential(*group) for group in _block_groups(model, modules))


def module_channels(model: CifarResNet, modules: int) -> list[int]:
    """Output channels of each of the K modules."""
    return [
        group[-1].out_channels if group[-1] is not model.stem else model.stem_channels
        for group in _block_groups(model, modules)
    ]


def module_downsampling(model: CifarResNet, modules: int) -> list[int]:
    """Total stride from the image to each module's output (1, 2 or 4): an H px image gives ceil(H / s) px maps."""
    strides, total = [], 1
    for group in _block_groups(model, modules):
        for part in group:
            total *= getattr(part, "stride", 1)
        strides.append(total)
    return strides
