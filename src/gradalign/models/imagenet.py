"""The ImageNet networks of SGR's Tables 2 and 5 (Yang et al. 2024), as a sequence of units that local
learning can cut into K modules.

`UnitNetwork` is a network written as units u_1 … u_n applied in turn and a classifier `head`:
f(x) = head(u_n(… u_1(x))). A local split with K modules is K − 1 cut points in the unit list
(`split_units`); module k then gets a local head of its own (`unit_local_head`) and the last module the
network's classifier. The networks (torchvision's, with their own initialisation):

| name        | units                                                    | parameters (1,000 classes) |
|-------------|----------------------------------------------------------|----------------------------|
| `resnet18`  | stem (conv 7×7, BN, ReLU, max-pool), then each basic block | 11,689,512               |
| `resnet50`  | stem, then each bottleneck block                         | 25,557,032                 |
| `resnet101` | stem, then each bottleneck block                         | 44,549,160                 |
| `vit_small` | patch embedding + class token + position embedding, then each encoder block | 22,050,664 |
| `swin_t`    | patch embedding, then each Swin block and each patch merging | 28,288,354             |
| `swin_s`    | the same                                                 | 49,606,258                 |

ViT-S/16 is torchvision's `VisionTransformer` at its published size (patch 16, 12 layers, 6 heads, width 384,
MLP 1,536; DeiT-S). The paper says Swin uses "a patch size of 16×16" (App. E); Swin-T/S as published and
as torchvision builds them embed 4×4 patches, which we keep (our reading: the 16 is a slip).

Where the cuts go:
- Table 2: ResNet-18 "divided into 4 local modules according to feature spatial resolution":
  `stage_boundaries` cuts after each of the four stages (the stem joins the first).
- Table 5: "we divide a model into 2 or 3 local modules such that the training memory consumption reaches
  its minimum" (App. E). `balanced_boundaries` takes each unit's cost (the bytes it saves for backward,
  measured by `analysis.activation_memory.unit_costs`) and picks the K − 1 cuts that minimise the largest
  module's total, the peak of a local step up to the heads (our reading; the heads' memory is left out of
  the choice). Under SGR the modules after the first also keep the graph of their input gradient, so their
  units cost more and the cuts move later (`analysis.activation_memory.set_boundaries(..., method="sgr")`).

Local heads (our choice; SGR uses "the same local classifier following (Wang et al., 2021)" on ImageNet,
which the paper does not spell out): on feature maps InfoPro's '1c2f' head (`models.local_heads`); on
tokens (ViT: (N, T, D)) and on Swin's channels-last maps (N, H, W, C), LayerNorm, mean over tokens or
positions, Linear.
"""

from __future__ import annotations

import torch
from torch import nn

from gradalign.errors import ConfigError
from gradalign.data.vision import import_torchvision

IMAGENET_NETWORKS = ("resnet18", "resnet50", "resnet101", "vit_small", "swin_t", "swin_s")
VIT_SMALL = {"patch_size": 16, "num_layers": 12, "num_heads": 6, "hidden_dim": 384, "mlp_dim": 1536}
LAYOUTS = ("nchw", "tokens", "nhwc")  # a unit's output: feature map, (N, T, D) tokens, channels-last map


class UnitNetwork(nn.Module):
    """head(u_n(… u_1(x))); `widths[i]` and `layouts[i]` describe unit i's output; `stage_ends` the units
    that end a stage of one spatial resolution."""

    def __init__(self, name, units, head, widths, layouts, stage_ends=()):
        super().__init__()
        if not (len(units) == len(widths) == len(layouts)):
            raise ConfigError("a UnitNetwork needs one width and one layout per unit")
        self.name, self.units, self.head = name, nn.ModuleList(units), head
        self.widths, self.layouts, self.stage_ends = list(widths), list(layouts), tuple(stage_ends)
        self.boundaries: dict[int, tuple[int, ...]] = {}  # K -> the cuts set by `set_boundaries`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.units:
            x = unit(x)
        return self.head(x)


class ViTEmbedding(nn.Module):
    """ViT's input stage: patches → tokens, the class token in front, position embedding, dropout."""

    def __init__(self, vit):
        super().__init__()
        self.conv_proj, self.class_token = vit.conv_proj, vit.class_token
        self.pos_embedding, self.dropout = vit.encoder.pos_embedding, vit.encoder.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.conv_proj(x).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(x.shape[0], -1, -1)
        return self.dropout(torch.cat([cls, tokens], dim=1) + self.pos_embedding)


class MathAttention(nn.Module):
    """Runs a unit with scaled dot-product attention in its composite form, softmax(QKᵀ/√d)V, whose backward
    is itself differentiable (the fused kernels' backward is not): SGR takes the module's input gradient with
    `create_graph=True` (Eq. 5). Used for every ViT unit whatever the method, so that global BP and local
    learning run the same kernels (our choice); torchvision's Swin computes its window attention this way."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            return self.inner(x)


class ClassToken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


class MeanOver(nn.Module):
    """Mean over the given dimensions (tokens, or a channels-last map's positions)."""

    def __init__(self, dims: tuple[int, ...]):
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=self.dims)


def _resnet(name: str, classes: int) -> UnitNetwork:
    net = getattr(import_torchvision().models, name)(num_classes=classes)
    units, widths, stage_ends = [nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)], [64], []
    for stage in (net.layer1, net.layer2, net.layer3, net.layer4):
        for block in stage:
            units.append(block)
            widths.append(block.bn2.num_features if name == "resnet18" else block.bn3.num_features)
        stage_ends.append(len(units) - 1)
    head = nn.Sequential(net.avgpool, nn.Flatten(), net.fc)
    return UnitNetwork(name, units, head, widths, ["nchw"] * len(units), stage_ends)


def _vit_small(classes: int, image_size: int) -> UnitNetwork:
    from torchvision.models.vision_transformer import VisionTransformer

    import_torchvision()
    vit = VisionTransformer(image_size=image_size, num_classes=classes, **VIT_SMALL)
    units = [ViTEmbedding(vit), *(MathAttention(block) for block in vit.encoder.layers)]
    head = nn.Sequential(vit.encoder.ln, ClassToken(), vit.heads.head)
    width = VIT_SMALL["hidden_dim"]
    return UnitNetwork("vit_small", units, head, [width] * len(units), ["tokens"] * len(units))


def _swin(name: str, classes: int) -> UnitNetwork:
    net = getattr(import_torchvision().models, name)(num_classes=classes)
    units, widths, stage_ends = [net.features[0]], [net.features[0][0].out_channels], []
    for part in list(net.features)[1:]:
        if isinstance(part, nn.Sequential):  # a stage: its Swin blocks
            for block in part:
                units.append(block)
                widths.append(block.norm1.normalized_shape[0])
            stage_ends.append(len(units) - 1)
        else:  # patch merging: halves the resolution, doubles the width
            units.append(part)
            widths.append(part.reduction.out_features)
    head = nn.Sequential(net.norm, net.permute, net.avgpool, net.flatten, net.head)
    return UnitNetwork(name, units, head, widths, ["nhwc"] * len(units), stage_ends)


def imagenet_network(name: str, classes: int = 1000, image_size: int = 224) -> UnitNetwork:
    """One of `IMAGENET_NETWORKS` as a UnitNetwork (`image_size` matters to ViT's position embedding only)."""
    if name not in IMAGENET_NETWORKS:
        raise ConfigError(f"unknown ImageNet network {name!r}; choose one of {IMAGENET_NETWORKS}")
    if name.startswith("resnet"):
        return _resnet(name, classes)
    if name == "vit_small":
        return _vit_small(classes, image_size)
    return _swin(name, classes)


# --- where the cuts go --------------------------------------------------------------------------------------


def stage_boundaries(model: UnitNetwork) -> tuple[int, ...]:
    """Cut after every stage but the last (Table 2's split by spatial resolution: K = number of stages)."""
    if not model.stage_ends:
        raise ConfigError(f"{model.name} has no stages of one resolution to split by")
    return model.stage_ends[:-1]


def balanced_boundaries(costs: list[float], modules: int, later_costs: list[float] | None = None) -> tuple[int, ...]:
    """The K − 1 cut points (the last unit of each module but the last) that minimise the largest module's
    total cost, modules being contiguous runs of units; exact, by dynamic programming over prefixes.
    `later_costs` (default `costs`): the units' costs in modules 2 … K, which under SGR also keep the graph of
    their input gradient (module 1 has no δ before it and no SGR term)."""
    n = len(costs)
    if not 1 <= modules <= n:
        raise ConfigError(f"cannot split {n} units into {modules} modules")
    later = costs if later_costs is None else later_costs
    if len(later) != n:
        raise ConfigError(f"later_costs has {len(later)} units, costs {n}")
    first, rest = [0.0], [0.0]
    for a, b in zip(costs, later):
        first.append(first[-1] + a)
        rest.append(rest[-1] + b)
    inf = float("inf")
    # best[k][j]: the smallest peak of the first j units in k modules; cut[k][j]: where module k begins
    best = [[inf] * (n + 1) for _ in range(modules + 1)]
    cut = [[0] * (n + 1) for _ in range(modules + 1)]
    best[0][0] = 0.0
    for k in range(1, modules + 1):
        prefix = first if k == 1 else rest
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                peak = max(best[k - 1][i], prefix[j] - prefix[i])
                if peak < best[k][j]:
                    best[k][j], cut[k][j] = peak, i
    ends, j = [], n
    for k in range(modules, 1, -1):
        j = cut[k][j]
        ends.append(j - 1)
    return tuple(sorted(ends))


def split_units(model: UnitNetwork, modules: int) -> list[nn.Sequential]:
    """The K modules of the split fixed by `set_boundaries` (K = 1: all units in one module)."""
    if modules == 1:
        return [nn.Sequential(*model.units)]
    if modules not in model.boundaries:
        raise ConfigError(
            f"no split of {model.name} into K = {modules} modules; call analysis.activation_memory.set_boundaries first"
        )
    starts = [0, *(e + 1 for e in model.boundaries[modules])]
    stops = [*starts[1:], len(model.units)]
    return [nn.Sequential(*model.units[a:b]) for a, b in zip(starts, stops)]


def module_ends(model: UnitNetwork, modules: int) -> list[int]:
    """The last unit of each of the K modules."""
    return [*model.boundaries.get(modules, ()), len(model.units) - 1]


def unit_local_head(layout: str, width: int, classes: int) -> nn.Module:
    """A module's local classifier by its output layout (see the module docstring; our choice)."""
    from gradalign.models.local_heads import infopro_head

    if layout == "nchw":
        return infopro_head(width, classes)
    if layout == "tokens":
        return nn.Sequential(nn.LayerNorm(width), MeanOver((1,)), nn.Linear(width, classes))
    if layout == "nhwc":
        return nn.Sequential(nn.LayerNorm(width), MeanOver((1, 2)), nn.Linear(width, classes))
    raise ConfigError(f"unknown layout {layout!r}; choose one of {LAYOUTS}")


def local_heads(model: UnitNetwork, modules: int, classes: int) -> list[nn.Module]:
    """The K − 1 local heads of a split (the last module uses `model.head`)."""
    ends = module_ends(model, modules)[:-1]
    return [unit_local_head(model.layouts[e], model.widths[e], classes) for e in ends]
