"""The VGG family of Table 7 (Yang et al. 2024): depth d ∈ {12, 17, 27, 37, 47, 57} on CIFAR-10.

The paper gives no configuration (book/appendix/protocols.md, "Table 7's VGG ... not given"). Our choice:

- d weight layers = (d − 2) conv3×3 layers + 2 linear layers. The convs are split evenly over VGG's five
  stages of widths 64, 128, 256, 512, 512 (times `width`): (d − 2)/5 = 2, 3, 5, 7, 9, 11 convs per stage for
  the six depths (every depth of Table 7 gives a whole number, which is what suggested this reading).
  Each stage ends with a 2×2 max-pool (skipped on a 1-pixel map, so 28×28 Fashion-MNIST images go 14, 7, 3,
  1, 1 and 32×32 CIFAR images 16, 8, 4, 2, 1). The classifier: global average pool (a no-op on the final
  1×1 map), flatten, Linear(512 → 512), ReLU, Linear(512 → classes), no dropout.
- **No BatchNorm** by default (`batch_norm=False`). Table 7's claim is that global BP "decreases sharply
  until a failed convergence" as depth grows (90.8 % at d = 12, 78.5 % at 37, 37.7 % at 47, "fail" at 57)
  and ties it to "the notorious gradient vanishing and explosion problems" (the text beside it). A VGG
  with BN after every conv still trains at 50+ layers (He et al. 2016, Fig. 6: 56-layer plain nets with BN
  converge on CIFAR-10, only to a higher error), so the collapse the paper reports fits a plain VGG, as
  Simonyan & Zisserman built it. `batch_norm=True` gives the other reading (conv → BN → ReLU, no conv bias).
- Initialisation (`init`): `"torchvision"` (the default) is torchvision's VGG: He-normal (fan_out, ReLU gain)
  for the convs, zero biases, the linear layers normal(0, 0.01). Without BN at width ×0.125 it leaves VGG-12
  at chance under global BP at every rate we tried (0.003 to 0.03, 30 epochs on Fashion-MNIST: measured
  here): fan_out shrinks the forward signal wherever a stage widens, and the 0.01 head shrinks it again.
  `"fan_in"` is He et al. (2015)'s forward-preserving He-normal (fan_in, ReLU gain) for every conv and linear
  layer, zero biases: the init under which they trained 22- and 30-layer plain networks without BN, and
  under which our VGG-12 without BN trains (our choice for the no-BN reading, `sgr.tab7nobn`).

Local splits (`vgg_modules`, our choice; the paper states no K for Table 7): K = 1 (global BP: every conv
in one module), K = 5 (one module per stage, each ending with its max-pool) and K = d − 2 (every conv
layer, with the pool that follows it, is a module: layer-wise training). As for the ResNet, the modules
share the model's parameters and `nn.Sequential(*modules, model.head)` computes exactly `model`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gradalign.errors import ConfigError
from gradalign.models.vgg import MaxPoolUnlessSingle, scaled_channels

VGG_DEPTHS = (12, 17, 27, 37, 47, 57)
"""The depths of Table 7 (weight layers)."""

VGG_STAGE_WIDTHS = (64, 128, 256, 512, 512)
VGG_STAGES = len(VGG_STAGE_WIDTHS)
VGG_HIDDEN = 512  # our choice: the hidden linear layer as wide as the last stage


class ConvUnit(nn.Sequential):
    """conv3×3 (→ BN) → ReLU (→ 2×2 max-pool when it closes a stage)."""

    def __init__(self, cin: int, cout: int, batch_norm: bool, pool: bool):
        layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=not batch_norm)]
        layers += [nn.BatchNorm2d(cout)] if batch_norm else []
        layers += [nn.ReLU()] + ([MaxPoolUnlessSingle()] if pool else [])
        super().__init__(*layers)
        self.out_channels, self.stride = cout, 2 if pool else 1


INITS = ("torchvision", "fan_in")


class DeepVGG(nn.Module):
    """VGG-d: `layers` (nn.ModuleList of d − 2 ConvUnits) then `head` (pool, flatten, 2 linear layers)."""

    def __init__(
        self,
        depth: int,
        classes: int = 10,
        in_channels: int = 3,
        width: float = 1.0,
        batch_norm: bool = False,
        init: str = "torchvision",
    ):
        super().__init__()
        self.depth, self.per_stage, self.batch_norm = depth, (depth - 2) // VGG_STAGES, batch_norm
        units, cin = [], in_channels
        for stage_width in VGG_STAGE_WIDTHS:
            cout = scaled_channels(stage_width, width)
            for i in range(self.per_stage):
                units.append(ConvUnit(cin, cout, batch_norm, pool=i == self.per_stage - 1))
                cin = cout
        self.layers = nn.ModuleList(units)
        hidden = scaled_channels(VGG_HIDDEN, width)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )
        self.feature_dim = cin
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                mode = "fan_in" if init == "fan_in" else "fan_out"
                nn.init.kaiming_normal_(module.weight, mode=mode, nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                if init == "fan_in":
                    nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
                else:
                    nn.init.normal_(module.weight, 0.0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.layers:
            x = unit(x)
        return self.head(x)


def vgg_deep(
    depth: int,
    classes: int = 10,
    in_channels: int = 3,
    width: float = 1.0,
    batch_norm: bool = False,
    init: str = "torchvision",
) -> DeepVGG:
    """VGG-`depth` of Table 7: `depth` ∈ VGG_DEPTHS (any 5m + 2 with m ≥ 1 is built too)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 7 or (depth - 2) % VGG_STAGES:
        raise ConfigError(f"a Table 7 VGG has depth 5m + 2 (Table 7: {', '.join(map(str, VGG_DEPTHS))}), got {depth!r}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise ConfigError(f"classes must be a positive integer, got {classes!r}")
    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 1:
        raise ConfigError(f"in_channels must be a positive integer, got {in_channels!r}")
    if not (isinstance(width, (int, float)) and not isinstance(width, bool) and math.isfinite(width) and width > 0):
        raise ConfigError(f"width must be a positive finite number, got {width!r}")
    if init not in INITS:
        raise ConfigError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    return DeepVGG(depth, classes, in_channels, float(width), batch_norm, init)


def vgg_valid_splits(model: DeepVGG) -> tuple[int, ...]:
    """The numbers of local modules `vgg_modules` accepts: 1, 5 (by stage) and d − 2 (by conv layer)."""
    return tuple(sorted({1, VGG_STAGES, len(model.layers)}))


def _unit_groups(model: DeepVGG, modules: int) -> list[list[nn.Module]]:
    if isinstance(modules, bool) or not isinstance(modules, int) or modules not in vgg_valid_splits(model):
        raise ConfigError(f"K = {modules!r} is not a split of VGG-{model.depth}; valid K: {vgg_valid_splits(model)}")
    units, size = list(model.layers), len(model.layers) // modules
    return [units[i * size : (i + 1) * size] for i in range(modules)]


def vgg_modules(model: DeepVGG, modules: int) -> nn.ModuleList:
    """The K feature modules of VGG-d (K = `modules`), sharing the model's parameters; the head is not included."""
    return nn.ModuleList(nn.Sequential(*group) for group in _unit_groups(model, modules))


def vgg_module_channels(model: DeepVGG, modules: int) -> list[int]:
    """Output channels of each of the K modules."""
    return [group[-1].out_channels for group in _unit_groups(model, modules)]
