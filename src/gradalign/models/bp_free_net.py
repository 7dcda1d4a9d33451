"""The BP-free PlainNet: L blocks (one linear transformation, then a nonlinearity) and a linear output layer.

The network of the BP-free baselines of Yang et al. (2024), Table 4 (FA, DRTP, PEPITA and the BP-free SGR), and
of their sources (Lillicrap et al. 2016; Nøkland 2016; Frenkel et al. 2021; Dellaferrera & Kreiman 2022). With
h_0 = flatten(x) and, for l = 1 … L,

    a_l = W_l h_{l−1} (+ b_l)        the pre-activation of block l (`blocks[l − 1]`)
    h_l = σ(a_l)                      its output, the input of layer l + 1
    o   = W_{L+1} h_L (+ b_{L+1})     the logits (`out`)

Layer list (sizes n_0 = d_in, n_1 … n_L = `hidden`, n_{L+1} = classes):

    blocks[0]: Linear(n_0 → n_1), σ
    …
    blocks[L−1]: Linear(n_{L−1} → n_L), σ
    out: Linear(n_L → classes)

so the network has Σ_{l=1}^{L+1} n_l·n_{l−1} weights (+ Σ n_l biases with `bias`), `parameter_count`. PEPITA's
CIFAR-10 setting is 3072 → 1024 → 10 without biases: 3,155,968 weights.

A block is any module mapping h_{l−1} to a_l: the training rules (`gradalign.methods.bp_free`) get each block's
weight gradient from a vector-Jacobian product inside that one block, so a convolution (with a_l flattened for
the direct feedback of DFA / DRTP) fits the same interface: `ConvBPFreeNet` has the conv blocks of
`models.plain_conv` (our conv reading, `sgr.tab4conv`). No
batch norm, no dropout (our choice: PEPITA's tutorial uses dropout 0.9, which needs the same mask in both
forward passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS: dict[str, tuple[Callable, Callable]] = {
    # σ and σ′ (σ′ of ReLU is 0 at 0, as autograd has it)
    "relu": (F.relu, lambda a: (a > 0).to(a.dtype)),
    "tanh": (torch.tanh, lambda a: 1 - torch.tanh(a) ** 2),
}


@dataclass
class Trace:
    """One forward pass, detached. `inputs[l]` = h_l (l = 0 … L: each layer's input, h_0 the flattened x),
    `pre[l − 1]` = a_l (l = 1 … L), `logits` = o."""

    inputs: list[torch.Tensor]
    pre: list[torch.Tensor]
    logits: torch.Tensor


def parameter_count(in_features: int, hidden: Sequence[int], classes: int, bias: bool = True) -> int:
    """Σ over the layer list of n_l·n_{l−1} weights (+ n_l biases)."""
    sizes = [in_features, *hidden, classes]
    return sum(n_out * n_in + (n_out if bias else 0) for n_in, n_out in zip(sizes, sizes[1:]))


class BPFreeNet(nn.Module):
    """L fully connected blocks σ(W_l h + b_l) and a linear output layer (module docstring).

    Weights: PyTorch's default nn.Linear initialisation (our choice; PEPITA's code draws He-uniform ±sqrt(6/fan_in),
    apply it with `he_uniform_`)."""

    def __init__(
        self, in_features: int, hidden: Sequence[int], classes: int, bias: bool = True, activation: str = "relu"
    ):
        super().__init__()
        if not hidden or min(hidden) < 1 or in_features < 1 or classes < 2:
            raise ValueError(
                f"need in_features >= 1, hidden sizes >= 1 and classes >= 2, got {in_features}, "
                f"{list(hidden)}, {classes}"
            )
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; one of {', '.join(ACTIVATIONS)}")
        sizes = [in_features, *hidden]
        self.blocks = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(sizes, sizes[1:]))
        self.out = nn.Linear(sizes[-1], classes, bias=bias)
        self.in_features, self.hidden, self.classes = in_features, tuple(hidden), classes
        self.activation = activation
        self.sigma, self.sigma_prime = ACTIVATIONS[activation]

    @property
    def layers(self) -> list[nn.Module]:
        """Layers 1 … L + 1: the blocks, then the output layer."""
        return [*self.blocks, self.out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for block in self.blocks:
            h = self.sigma(block(h))
        return self.out(h)

    @torch.no_grad()
    def forward_trace(self, x: torch.Tensor) -> Trace:
        """The forward pass with every h_l and a_l kept, without a graph (the rules need no autograd through it)."""
        h, inputs, pre = x.flatten(1), [], []
        for block in self.blocks:
            inputs.append(h)
            a = block(h)
            pre.append(a)
            h = self.sigma(a)
        inputs.append(h)
        return Trace(inputs, pre, self.out(h))


class ConvBPFreeNet(nn.Module):
    """The conv reading (`models.plain_conv`): L blocks a_l = conv_l(h_{l−1}), h_l = σ(a_l) (3 × 3, the strides and
    channels of `plain_conv.geometry`), then o = W_{L+1} flatten(h_L) (+ b). Its trace keeps h_0 = x (the image),
    h_l and a_l as maps, and h_L flattened (`inputs[L]`, the output layer's input); `hidden` holds each a_l's size
    flattened (n_l, the width of DFA / DRTP's K × n_l feedback). PyTorch's default initialisation (our choice)."""

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        depth: int,
        classes: int,
        width: float = 1.0,
        bias: bool = True,
        activation: str = "relu",
    ):
        from gradalign.models.plain_conv import conv, geometry

        super().__init__()
        if classes < 2:
            raise ValueError(f"need classes >= 2, got {classes}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; one of {', '.join(ACTIVATIONS)}")
        blocks = geometry(depth, in_channels, image_size, width)
        self.blocks = nn.ModuleList(conv(b, bias) for b in blocks)
        self.out = nn.Linear(blocks[-1].features, classes, bias=bias)
        self.in_features, self.hidden = in_channels * image_size**2, tuple(b.features for b in blocks)
        self.classes, self.activation = classes, activation
        self.sigma, self.sigma_prime = ACTIVATIONS[activation]

    @property
    def layers(self) -> list[nn.Module]:
        """Layers 1 … L + 1: the conv blocks, then the output layer."""
        return [*self.blocks, self.out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for block in self.blocks:
            h = self.sigma(block(h))
        return self.out(h.flatten(1))

    @torch.no_grad()
    def forward_trace(self, x: torch.Tensor) -> Trace:
        h, inputs, pre = x, [], []
        for block in self.blocks:
            inputs.append(h)
            a = block(h)
            pre.append(a)
            h = self.sigma(a)
        inputs.append(h.flatten(1))
        return Trace(inputs, pre, self.out(inputs[-1]))


@torch.no_grad()
def he_uniform_(net: BPFreeNet, generator: torch.Generator | None = None) -> BPFreeNet:
    """Every weight U(±sqrt(6/fan_in)), biases 0: PEPITA's initialisation (Dellaferrera & Kreiman 2022, code)."""
    for layer in net.layers:
        bound = (6.0 / layer.weight.shape[1]) ** 0.5
        draw = torch.rand(layer.weight.shape, generator=generator, dtype=torch.float64) * 2 - 1
        layer.weight.copy_(draw * bound)
        if layer.bias is not None:
            layer.bias.zero_()
    return net
