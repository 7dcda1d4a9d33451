"""The BP-free PlainNet as a conv net: our second reading of Yang et al. (2024), §4.2 and Table 4 (`sgr.tab4conv`).

The paper (§4.2): "In BP-free training, we use PlainNet where each block is only a linear-nonlinear transformation
and the local classifier is a fixed ETF structure"; its PlainNet elsewhere is ResNet-32 without identity connections
(a conv net), and Figure 3 uses "a 4-layer PlainNet". Table 4's FA / DRTP / PEPITA rows are quoted from Dellaferrera
& Kreiman (2022), whose conv network is one conv (3 → 32, 5 × 5), ReLU, max-pool 2 and a linear layer. So here each
block is one convolution (the linear transformation) and a ReLU, with no BN and no pooling layer (our choice:
downsampling by stride-2 convolutions keeps every block a linear map followed by σ, so that a BP-free rule's signal
at a block's pre-activation is δ ⊙ σ′(a) exactly as in the MLP), every block a local module with the fixed ETF head
(Eq. 7) on its flattened output:

    [Conv2d(c_{l−1} → c_l, 3 × 3, stride s_l, padding 1) → ReLU] × L,   logits of block l: flatten(h_l) M_l

Channels, kernels and strides (our choice, sized to two CPU cores; 3 × 3 kernels as in ResNet-32's PlainNet): c = 16,
32, 32, 64 × `width`, s = 1, 2, 2, 2, biases (as the MLP's blocks), PyTorch's default initialisation. On a
28-pixel image the blocks' outputs are 16 × 28², 32 × 14², 32 × 7², 64 × 4² (12,544, 6,272, 1,568, 1,024 features,
each at least the classes an ETF needs); on a 32-pixel one 32², 16², 8², 4². Depth 1 … 4 (Figure 3's
"4-layer PlainNet" is 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from gradalign.models.etf import FixedETFHead
from gradalign.models.plain_mlp import block_modules

CHANNELS = (16, 32, 32, 64)  # at width 1 (our choice)
STRIDES = (1, 2, 2, 2)  # our choice: stride-2 convs in place of pooling layers
KERNEL = 3
MAX_DEPTH = len(CHANNELS)


@dataclass(frozen=True)
class ConvBlock:
    """One block's geometry: input and output channels, stride, output side (square maps)."""

    c_in: int
    c_out: int
    stride: int
    size: int

    @property
    def features(self) -> int:
        return self.c_out * self.size**2


def channels(depth: int, width: float = 1.0) -> list[int]:
    """The blocks' output channels, c_l = round(CHANNELS[l] · width) (at least 1)."""
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"a conv PlainNet has 1 to {MAX_DEPTH} blocks, got {depth}")
    return [max(1, round(c * width)) for c in CHANNELS[:depth]]


def geometry(depth: int, in_channels: int, image_size: int, width: float = 1.0) -> list[ConvBlock]:
    """Each block's channels, stride and output side (3 × 3, padding 1: side ⌈side / stride⌉)."""
    out, c_in, size = [], in_channels, image_size
    for c, stride in zip(channels(depth, width), STRIDES):
        size = (size + 2 - KERNEL) // stride + 1
        out.append(ConvBlock(c_in, c, stride, size))
        c_in = c
    return out


def conv(block: ConvBlock, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(block.c_in, block.c_out, KERNEL, stride=block.stride, padding=1, bias=bias)


class PlainConvNet(nn.Module):
    """L blocks Conv → ReLU, the last one's ETF head the network's classifier (`head`, never trained)."""

    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, width=1.0):
        super().__init__()
        self.geometry = geometry(depth, in_channels, image_size, width)
        self.blocks = nn.ModuleList(nn.Sequential(conv(b), nn.ReLU()) for b in self.geometry)
        self.feature_sizes = [b.features for b in self.geometry]
        self.head = FixedETFHead(self.feature_sizes[-1], num_classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def conv_modules(model: PlainConvNet, K: int) -> nn.ModuleList:
    """K = 1: the whole stack as one module (global BP); K = depth: one block per module."""
    return block_modules(model.blocks, K, "a conv PlainNet")


def conv_depth(network: str) -> int | None:
    """The number of blocks of a `conv<L>` network name (`training.local`), L = 1 … MAX_DEPTH, else None."""
    digits = network[4:]
    ok = network.startswith("conv") and digits.isdigit() and 1 <= int(digits) <= MAX_DEPTH
    return int(digits) if ok else None


def bp_free_plainnet(network: str, classes: int, in_channels: int, image_size: int, width: float, K: int):
    """(model, its K modules, each module's output features) of the BP-free PlainNet named `mlp<L>` (Table 4:
    `models.plain_mlp`) or `conv<L>` (its conv reading); K = 1 or L (`training.local.build_split_network`)."""
    from gradalign.models.plain_mlp import PlainMLP, mlp_modules

    if network.startswith("mlp"):
        model = PlainMLP(int(network[3:]), classes, in_channels * image_size**2, width)
        return model, mlp_modules(model, K), [model.feature_dim] * K
    model = PlainConvNet(int(network[4:]), classes, in_channels, image_size, width)
    return model, conv_modules(model, K), model.feature_sizes[-K:]


def describe(depth: int, width: float = 1.0) -> str:
    """'4-block conv PlainNet, 16-32-32-64 channels' (the scale string's network)."""
    return f"{depth}-block conv PlainNet, {'-'.join(map(str, channels(depth, width)))} channels"
