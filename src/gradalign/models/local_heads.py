"""Local classifier heads (and InfoPro's decoder) put on a module's output of C channels.

Local learning (Yang et al. 2024, §3 and App. E) trains each module through a small head of its own.
The readings here (book/appendix/protocols.md, "SGR: more facts"):

- `belilovsky_head`: what SGR says it uses on CIFAR ("following Belilovsky et al. 2019, k = 2": one
  convolution and one linear layer): conv3×3 C → C stride 1, BN, ReLU, adaptive average pool to 2×2,
  BN, flatten, Linear(4C → classes).
- `infopro_head`: InfoPro's "conv + linear" head (`blackfeather-wang/InfoPro-Pytorch`, '1c2f'):
  conv3×3 (stride 2, or stride 1 when the map is already ≤ 8 px), BN, ReLU, global average pool,
  Linear(→ 128), ReLU, Linear(→ classes). InfoPro picks the stride by the stage (2 on the 32 and 16 px
  stages, 1 on the 8 px stage); here it is picked from the map the head receives at each call, which is
  the same for ResNet-32 (our reading). InfoPro also doubles the width where it downsamples
  (16 → 32, 32 → 64, 64 → 64); here the conv keeps C channels unless `out_channels` is given (our choice:
  a head is built from C alone, before any map size is known).
- `dgl_head`: DGL's "cnn" auxiliary network (`eugenium/DGL`): 2 × (conv3×3 C → C + BN + ReLU), adaptive
  average pool to 2×2, BN, flatten, Linear(4C → classes).
- `gap_linear_head`: Greedy supervised learning as InfoPro runs it ('0c1f'): global average pool,
  Linear(C → classes).
- `pooled_belilovsky_head` (our variant, `belilovsky_pool4`): Belilovsky et al.'s head after a 4×4 average pool,
  so that its convolution runs on a map 16 times smaller (`sgr.mem`: SGR's K = 16 peak falls from 0.396 to 0.299
  of global BP's; `sgr.poolhead` measures what it costs in accuracy).
- `infopro_decoder`: InfoPro's reconstruction head: bilinear upsampling (align_corners=True) to the
  image size, conv3×3 → 12, BN, ReLU, conv3×3 → image channels, sigmoid. It returns the reconstruction
  (in [0, 1]); the loss (BCE against the de-normalised image) belongs to the method.

Convolutions in the heads have no bias where BN follows (BN's shift replaces it; InfoPro's convention);
the decoder's convolutions keep theirs, as in InfoPro.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from gradalign.errors import ConfigError

INFOPRO_HIDDEN = 128
"""Width of the hidden linear layer of InfoPro's head ('1c2f', aux_net_feature_dim = 128)."""

INFOPRO_DECODER_WIDTH = 12
"""Channels of the decoder's hidden convolution (InfoPro: int(12 · widen), widen = 1)."""

LARGE_MAP_PX = 8
"""InfoPro's head downsamples (stride 2) only maps larger than this (its 32 and 16 px stages; our reading)."""


def _check_sizes(channels: int, classes: int) -> None:
    for name, value in (("channels", channels), ("classes", classes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"a local head needs a positive integer number of {name}, got {value!r}")


class StrideBySizeConv(nn.Conv2d):
    """conv3×3 (padding 1) whose stride is 2 on maps larger than `LARGE_MAP_PX` pixels and 1 otherwise."""

    def __init__(self, cin: int, cout: int):
        super().__init__(cin, cout, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stride = 2 if min(x.shape[-2:]) > LARGE_MAP_PX else 1
        return F.conv2d(x, self.weight, None, stride, 1)


def belilovsky_head(channels: int, classes: int) -> nn.Sequential:
    """Belilovsky et al. (2019) k = 2 head, as SGR (App. E) cites it: conv + linear, 2×2 pooled."""
    _check_sizes(channels, classes)
    return nn.Sequential(
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.BatchNorm2d(channels),
        nn.Flatten(),
        nn.Linear(4 * channels, classes),
    )


def pooled_belilovsky_head(channels: int, classes: int, factor: int = 4) -> nn.Sequential:
    """The lighter variant of SGR's CIFAR head (our choice): a `factor`×`factor` average pool (stride `factor`,
    ceil mode, so a map smaller than the pool gives one pixel), then Belilovsky et al.'s head (conv3×3, BN, ReLU,
    2×2 average pool, BN, linear), whose convolution then runs on a map `factor`² times smaller."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
        raise ConfigError(f"a pooled head needs an integer pool factor >= 2, got {factor!r}")
    return nn.Sequential(nn.AvgPool2d(factor, ceil_mode=True), *belilovsky_head(channels, classes))


def infopro_head(
    channels: int, classes: int, out_channels: int | None = None, hidden: int = INFOPRO_HIDDEN
) -> nn.Sequential:
    """InfoPro's 'conv + linear' head ('1c2f'): conv3×3 (s2 on large maps), BN, ReLU, GAP, MLP(hidden)."""
    _check_sizes(channels, classes)
    width = channels if out_channels is None else out_channels
    _check_sizes(width, hidden)
    return nn.Sequential(
        StrideBySizeConv(channels, width),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def dgl_head(channels: int, classes: int) -> nn.Sequential:
    """DGL's 'cnn' auxiliary head: 2 × (conv3×3 + BN + ReLU), 2×2 average pool, BN, linear."""
    _check_sizes(channels, classes)
    convs = []
    for _ in range(2):
        convs += [nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()]
    return nn.Sequential(
        *convs, nn.AdaptiveAvgPool2d(2), nn.BatchNorm2d(channels), nn.Flatten(), nn.Linear(4 * channels, classes)
    )


def gap_linear_head(channels: int, classes: int) -> nn.Sequential:
    """Greedy SL's head as InfoPro runs it ('0c1f'): global average pool and one linear layer."""
    _check_sizes(channels, classes)
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))


class InfoProDecoder(nn.Module):
    """Features (N, C, h, w) → reconstruction (N, image_channels, H, W) in [0, 1] (InfoPro's decoder)."""

    def __init__(self, channels: int, image_channels: int = 3, image_size: int | tuple[int, int] | None = None):
        super().__init__()
        _check_sizes(channels, image_channels)
        self.image_size = image_size
        self.decode = nn.Sequential(
            nn.Conv2d(channels, INFOPRO_DECODER_WIDTH, 3, padding=1),
            nn.BatchNorm2d(INFOPRO_DECODER_WIDTH),
            nn.ReLU(),
            nn.Conv2d(INFOPRO_DECODER_WIDTH, image_channels, 3, padding=1),
            nn.Sigmoid(),
        )

    def forward(self, features: torch.Tensor, size: int | tuple[int, int] | None = None) -> torch.Tensor:
        size = self.image_size if size is None else size
        if size is None:
            raise ConfigError("InfoProDecoder needs the image size: pass size= at call time or image_size= at build")
        upsampled = F.interpolate(features, size=size, mode="bilinear", align_corners=True)
        return self.decode(upsampled)


def infopro_decoder(
    channels: int, image_channels: int = 3, image_size: int | tuple[int, int] | None = None
) -> InfoProDecoder:
    """InfoPro's reconstruction head; the image size is stored here or passed at each call."""
    return InfoProDecoder(channels, image_channels, image_size)


def etf_head(features: int, classes: int) -> nn.Module:
    """The fixed ETF classifier of Eq. 7 on a module's flat output of `features` units (the BP-free PlainMLP):
    no parameters, never trained; drawn from the global generator (seeded by the run)."""
    from gradalign.models.etf import FixedETFHead

    return FixedETFHead(features, classes)


HEADS: dict[str, Callable[[int, int], nn.Module]] = {
    "belilovsky": belilovsky_head,
    "belilovsky_pool4": pooled_belilovsky_head,  # our variant (`sgr.poolhead`)
    "etf": etf_head,
    "infopro": infopro_head,
    "dgl": dgl_head,
    "gap_linear": gap_linear_head,
}
"""Local classifier heads by name: each maps (channels, classes) to a module giving (N, classes) logits."""


def local_head(kind: str, channels: int, classes: int) -> nn.Module:
    """The local classifier head `kind` (a key of `HEADS`) for a module output of `channels` channels."""
    if kind not in HEADS:
        raise ConfigError(f"unknown local head {kind!r}; choose one of {sorted(HEADS)}")
    return HEADS[kind](channels, classes)
