"""SGR's ImageNet tables (Tables 2 and 5): their rows, App. E's training recipes, and the config of a table.

App. E's recipes (`RECIPES`): ResNets SGD 0.1, momentum 0.9, weight decay 1e-4, batch 1,024, 100 epochs, ×0.1 at
epochs 30, 60, 90; ViT-S/16 AdamW 1.6e-3, batch 4,096, 20 warm-up epochs then cosine, 300 epochs; Swin AdamW
1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.05, batch 1,024, 20 warm-up epochs, cosine to 1e-5, 300
epochs; λ = 10k for Table 5 (App. E), Table 2 sweeps it. Table 2's recipe is not stated apart: the ResNet one
(our reading).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gradalign.config import Config, require

SGR_LAMBDA = 10000.0  # App. E: "the coefficient of our SGR loss λ is set as 10k" (Table 5)
TABLE2_LAMBDAS = (1000.0, 2000.0, 3000.0, 5000.0, 7000.0)
TABLE2_ROWS = (("resnet18", "greedy", 4, 0.0), ("resnet18", "layerwise", 4, 0.0)) + tuple(
    ("resnet18", "sgr", 4, lam) for lam in TABLE2_LAMBDAS
)
TABLE5_ROWS = tuple(
    (net, method, k, SGR_LAMBDA if method == "sgr" else 0.0)
    for net, splits in (("resnet50", (2, 3)), ("resnet101", (2, 3)), ("vit_small", (3,)), ("swin_t", (3,)))
    + (("swin_s", (3,)),)
    for method, ks in (("global_bp", (1,)), ("sgr", splits))
    for k in ks
)
"""(network, method, K, λ): the supervised rows of Table 5 that are SGR or global BP. InfoPro's rows are the
paper's only: InfoPro's reconstruction decoder is defined on feature maps, not on ViT's or Swin's tokens."""

RECIPES = {
    "resnet": {
        "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "batch": 1024, "epochs": 100,
        "schedule": "step", "milestones": (30, 60, 90), "gamma": 0.1, "warmup_epochs": 0, "min_lr": 0.0,
    },
    "vit": {
        "optimizer": "adamw", "lr": 1.6e-3, "weight_decay": 0.05, "batch": 4096, "epochs": 300,
        "schedule": "cosine", "warmup_epochs": 20, "min_lr": 0.0, "betas": (0.9, 0.999), "eps": 1e-8,
    },
    "swin": {
        "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.05, "batch": 1024, "epochs": 300,
        "schedule": "cosine", "warmup_epochs": 20, "min_lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8,
    },
}  # fmt: skip
"""App. E's training recipes by family. ViT-S's weight decay is not stated: 0.05 (DeiT's, our choice)."""


def family(network: str) -> str:
    return "resnet" if network.startswith("resnet") else "vit" if network.startswith("vit") else "swin"


def lr_at(recipe: dict, epoch: float) -> float:
    """The recipe's learning rate at a (fractional) epoch: step decay, or linear warm-up then cosine."""
    if recipe["schedule"] == "step":
        return recipe["lr"] * recipe["gamma"] ** sum(epoch >= m for m in recipe["milestones"])
    warm = recipe["warmup_epochs"]
    if epoch < warm:
        return recipe["lr"] * epoch / warm
    t = (epoch - warm) / (recipe["epochs"] - warm)
    return recipe["min_lr"] + (recipe["lr"] - recipe["min_lr"]) * (1 + math.cos(math.pi * t)) / 2


def make_optimizer(recipe: dict, params) -> torch.optim.Optimizer:
    if recipe["optimizer"] == "sgd":
        return torch.optim.SGD(
            params, lr=recipe["lr"], momentum=recipe["momentum"], weight_decay=recipe["weight_decay"]
        )
    return torch.optim.AdamW(
        params, lr=recipe["lr"], betas=recipe["betas"], eps=recipe["eps"], weight_decay=recipe["weight_decay"]
    )


@dataclass(frozen=True)
class ImageNetLocalConfig(Config):
    """The rows of an ImageNet table and how they run: `steps` 0 is the paper's protocol (ImageNet under
    torchrun); `steps` > 0 trains that many steps on one fixed batch of random images (smoke)."""

    rows: tuple[tuple[str, str, int, float], ...] = TABLE5_ROWS  # (network, method, K, λ)
    split: str = "memory"  # "stages" (Table 2: by spatial resolution) or "memory" (Table 5: least peak memory)
    data_root: str = ""  # "": $GRADALIGN_DATA/imagenet, ImageFolder layout
    gpus: int = 8  # Table 5: 8 A100s
    classes: int = 1000
    image_size: int = 224
    steps: int = 0
    batch: int = 0  # the global batch; 0: the recipe's (ImageNet only); the random batch's size in smoke runs
    epochs: int = 0  # ImageNet runs: 0 is the recipe's; fewer compress its schedule (our choice)
    workers: int = 8  # data-loader processes per rank (our choice)

    def validate(self) -> None:
        from gradalign.methods.local import LOCAL_METHODS
        from gradalign.models.imagenet import IMAGENET_NETWORKS

        super().validate()
        require(self, "rows", len(self.rows) >= 1, "must name at least one (network, method, K, lambda) row")
        for row in self.rows:
            ok = len(row) == 4 and row[0] in IMAGENET_NETWORKS and row[1] in LOCAL_METHODS
            require(self, "rows", ok, f"must be (network in {IMAGENET_NETWORKS}, a local method, K, lambda) rows")
            ok = (row[2] == 1) == (row[1] == "global_bp") and row[2] >= 1 and row[3] >= 0
            require(self, "rows", ok, "must have K = 1 exactly for global_bp, K >= 2 otherwise, lambda >= 0")
        require(self, "split", self.split in ("stages", "memory"), "must be 'stages' or 'memory'")
        require(self, "gpus", self.gpus >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")
        require(
            self, "image_size", self.image_size >= 32 and self.image_size % 16 == 0, "must be >= 32, a multiple of 16"
        )
        require(self, "steps", self.steps >= 0, "must be >= 0")
        require(self, "batch", self.batch == 0 or self.batch >= 2, "must be 0 (the recipe's) or >= 2 (BatchNorm)")
        require(self, "batch", self.steps == 0 or self.batch >= 2, "must be >= 2 when steps > 0 (the random batch)")
        require(self, "epochs", self.epochs >= 0, "must be >= 0 (0: the recipe's)")
        require(self, "workers", self.workers >= 0, "must be >= 0")


def build_row(cfg: ImageNetLocalConfig, network: str, method: str, modules: int, sample: torch.Tensor):
    """(model, its K modules, K heads) of one row, split by the config's rule (the cuts of least peak for the
    row's method under "memory")."""
    from gradalign.analysis.activation_memory import set_boundaries
    from gradalign.models.imagenet import imagenet_network, local_heads, split_units

    model = imagenet_network(network, cfg.classes, cfg.image_size)
    if modules > 1:
        set_boundaries(model, modules, cfg.split, sample, "sgr" if method == "sgr" else "local")
    heads = [*local_heads(model, modules, cfg.classes), model.head] if modules > 1 else [model.head]
    return model, split_units(model, modules), heads
