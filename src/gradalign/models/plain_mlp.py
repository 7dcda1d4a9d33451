"""The BP-free PlainNet of Yang et al. (2024), §3.3 and Table 4: a stack of blocks, each one linear
transformation and one nonlinearity, every block a local module with a fixed ETF classifier (Eq. 7).

    flatten → [Linear(d_{l−1} → w) → ReLU] × L,   logits of block l: x_l M_l (M_l a fixed d × classes ETF)

With a parameter-free head the gradient at a block's output is analytic, δx_l = (softmax(x_l M_l) − y) M_lᵀ / B,
so nothing back-propagates across blocks. The paper states neither the depth nor the width of its BP-free
PlainNet, nor whether its blocks are convolutions (book/appendix/protocols.md). Ours: fully connected blocks, so that
the same network serves the FA, DFA, DRTP and PEPITA baselines, at width 1024 × `width` (1,024 is PEPITA's hidden
width on CIFAR-10), each block a Linear with bias, then ReLU, no BN. An ETF over 100 classes needs w ≥ 100.
The network's own classifier is the last block's ETF: `head`, never trained.
"""

from __future__ import annotations

from torch import nn

from gradalign.models.etf import FixedETFHead

BASE_WIDTH = 1024  # hidden units at width 1 (our choice)


def hidden_width(width: float) -> int:
    return max(1, round(BASE_WIDTH * width))


class PlainMLP(nn.Module):
    def __init__(self, depth: int, num_classes: int = 10, in_features: int = 784, width: float = 1.0):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        w = hidden_width(width)
        blocks = [nn.Sequential(nn.Flatten(), nn.Linear(in_features, w), nn.ReLU())]
        blocks += [nn.Sequential(nn.Linear(w, w), nn.ReLU()) for _ in range(depth - 1)]
        self.blocks = nn.ModuleList(blocks)
        self.head = FixedETFHead(w, num_classes)
        self.feature_dim = w

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def block_modules(blocks: nn.ModuleList, K: int, name: str) -> nn.ModuleList:
    """A stack of blocks as K modules: K = 1, the whole stack as one (global BP); K = depth, one block per module.
    `name` names the network in the error ("a PlainMLP")."""
    if K == 1:
        return nn.ModuleList([nn.Sequential(*blocks)])
    if K != len(blocks):
        raise ValueError(f"{name} of depth {len(blocks)} splits into 1 or {len(blocks)} modules, not {K}")
    return nn.ModuleList(blocks)


def mlp_modules(model: PlainMLP, K: int) -> nn.ModuleList:
    """K = 1: the whole stack as one module (global BP); K = depth: one block per module."""
    return block_modules(model.blocks, K, "a PlainMLP")


def parameter_count(depth: int, in_features: int = 784, width: float = 1.0) -> int:
    """(d_in + 1)·w for the first block, (w + 1)·w for each other; the ETF heads are buffers."""
    w = hidden_width(width)
    return (in_features + 1) * w + (depth - 1) * (w + 1) * w
