"""SGR part, ImageNet (notebook sgr/05): Table 2 (ResNet-18, K = 4, the λ sweep) and Table 5 (ResNet-50/101,
ViT-S, Swin-T/S against global BP). Neither is run here.

Both are 100 to 300 epochs of ImageNet on 8 A100s (Table 5 gives 7 to 91 hours per row). Their `paper`
presets are validated configs that raise `NotRunHereError` before any compute; the launch (DDP under torchrun,
an ImageNet data loader) belongs to the scale-out issue. What runs here:
  - `smoke`: every row's network (`models.imagenet`), split as the paper splits it, trained for a few steps of
    the row's method with the optimizer of its App. E recipe on a fixed batch of random images; the record
    checks that the split network computes the whole network's function and that every step stayed finite.
  - the activation memory of the same networks and splits, at a small batch: `sgr.mem` measures it (one
    record for every memory number in the book) and the page shows it beside Table 5's memory column.

App. E's recipes (`RECIPES`): ResNets SGD 0.1, momentum 0.9, weight decay 1e-4, batch 1,024, 100 epochs, ×0.1 at
epochs 30, 60, 90; ViT-S/16 AdamW 1.6e-3, batch 4,096, 20 warm-up epochs then cosine, 300 epochs; Swin AdamW
1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.05, batch 1,024, 20 warm-up epochs, cosine to 1e-5, 300
epochs; λ = 10k for Table 5 (App. E), Table 2 sweeps it. Table 2's recipe is not stated apart: the ResNet one
(our reading).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.errors import NotRunHereError
from gradalign.experiments.base import Experiment, check, outcome

NOTEBOOK = "notebooks/sgr/05_imagenet.ipynb"
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
    """The rows of an ImageNet table and how they run: `steps` 0 is the paper's protocol (ImageNet, 8 GPUs; not
    run here); `steps` > 0 trains that many steps on one fixed batch of random images (smoke)."""

    rows: tuple[tuple[str, str, int, float], ...] = TABLE5_ROWS  # (network, method, K, λ)
    split: str = "memory"  # "stages" (Table 2: by spatial resolution) or "memory" (Table 5: least peak memory)
    data_root: str = ""  # "": $GRADALIGN_DATA/imagenet, ImageFolder layout
    gpus: int = 8  # Table 5: 8 A100s
    classes: int = 1000
    image_size: int = 224
    steps: int = 0
    batch: int = 0  # 0: the recipe's batch (paper); the random batch's size otherwise

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
        require(self, "batch", (self.batch == 0) == (self.steps == 0), "must be 0 exactly when steps is 0")


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


def smoke_row(cfg: ImageNetLocalConfig, row, x: torch.Tensor, y: torch.Tensor) -> dict:
    """`cfg.steps` steps of one row on the fixed batch (x, y) with its recipe's optimizer and schedule (the
    schedule compressed to the steps: our choice)."""
    from gradalign.methods.local import LOCAL_METHODS, LocalSettings

    network, method, modules, lam = row
    torch.manual_seed(cfg.seed)
    model, parts, heads = build_row(cfg, network, method, modules, x)
    model.eval()
    with torch.no_grad():
        whole, h = model(x), x
        for part in parts:
            h = part(h)
        split_gap = (heads[-1](h) - whole).abs().max().item()
    model.train()
    recipe = RECIPES[family(network)]
    optimizers = [make_optimizer(recipe, [*p.parameters(), *hd.parameters()]) for p, hd in zip(parts, heads)]
    settings = LocalSettings(method=method, modules=modules, lam=lam)
    losses, began = [], time.perf_counter()
    for t in range(cfg.steps):
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = lr_at(recipe, recipe["epochs"] * t / cfg.steps)
        losses.append(float(LOCAL_METHODS[method](parts, heads, optimizers, x, y, settings)["loss"]))
    return {
        "network": network,
        "method": method,
        "K": modules,
        "lambda": lam,
        "boundaries": list(model.boundaries.get(modules, ())),
        "units": len(model.units),
        "parameters": sum(p.numel() for p in model.parameters()),
        "split_gap": split_gap,
        "losses": losses,
        "seconds_per_step": (time.perf_counter() - began) / cfg.steps,
    }


def imagenet_table(cfg: ImageNetLocalConfig, device, element_id: str) -> dict:
    if cfg.steps == 0:
        nets = sorted({row[0] for row in cfg.rows})
        raise NotRunHereError(
            f"{element_id} is not run here: {', '.join(nets)} on ImageNet for 100-300 epochs needs the ImageNet "
            f"files and {cfg.gpus} GPUs under torchrun, which the scale-out issue adds"
        )
    gen = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, 3, cfg.image_size, cfg.image_size, generator=gen)
    y = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen)
    rows = [smoke_row(cfg, row, x, y) for row in cfg.rows]
    return outcome(smoke_checks(rows), {"rows": rows}, scope="reduced")


def smoke_checks(rows: list[dict]) -> dict[str, dict]:
    """What a smoke run can show: the split is the network, and every step's loss is finite."""
    gap = max(r["split_gap"] for r in rows)
    finite = all(math.isfinite(v) for r in rows for v in r["losses"])
    return {
        "split_is_the_network": check(
            gap <= 1e-4,
            gap,
            "max |logits of the K modules in turn − logits of the whole network| <= 1e-4 (eval mode)",
            "local learning cuts the network into modules without changing its function (§3.1)",
        ),
        "steps_finite": check(
            finite,
            finite,
            "every row's loss finite at every step of its recipe",
            "each row's method and recipe train the network (a smoke test of the protocol, not of accuracy)",
        ),
    }


def table2(cfg: ImageNetLocalConfig, device) -> dict:
    return imagenet_table(cfg, device, "sgr.tab2")


def table5(cfg: ImageNetLocalConfig, device) -> dict:
    return imagenet_table(cfg, device, "sgr.tab5")


SMOKE = {"steps": 2, "batch": 2, "image_size": 32, "classes": 10}
TABLE2_PRESETS = {
    "smoke": {**SMOKE, "rows": TABLE2_ROWS[:3], "split": "stages"},
    "paper": {"rows": TABLE2_ROWS, "split": "stages"},
}
TABLE5_SMOKE_ROWS = (
    ("resnet50", "sgr", 3, SGR_LAMBDA),
    ("vit_small", "sgr", 3, SGR_LAMBDA),
    ("swin_t", "sgr", 3, SGR_LAMBDA),
)
CHOICES = {
    "local heads": "InfoPro's conv + linear head ('1c2f') on feature maps; LayerNorm, mean over tokens or positions "
    "and a linear layer on ViT's tokens and Swin's maps (the paper follows Wang et al. 2021 without details)",
    "split": "Table 2: after each ResNet-18 stage; Table 5: the cuts that minimise the largest module's saved bytes, "
    "measured per unit on the run's batch (App. E: 'such that the training memory consumption reaches its minimum')",
    "Swin patch": "4x4 patches as Swin-T/S are published (App. E says 16x16)",
    "ViT-S weight decay": "0.05 (DeiT's; App. E does not state it)",
    "smoke": "a fixed batch of random images; the recipe's schedule compressed to the smoke steps",
}
EXPERIMENTS = [
    Experiment(
        "sgr.tab2",
        table2,
        ImageNetLocalConfig,
        TABLE2_PRESETS,
        1,
        NOTEBOOK,
        status="not run here",
        note="not run here: ResNet-18 on ImageNet for 100 epochs per row on 8 GPUs; smoke runs the rows on random "
        "images; the launch (DDP) comes with the scale-out issue",
        choices=CHOICES,
    ),
    Experiment(
        "sgr.tab5",
        table5,
        ImageNetLocalConfig,
        {"smoke": {**SMOKE, "rows": TABLE5_SMOKE_ROWS}, "paper": {}},
        1,
        NOTEBOOK,
        status="not run here",
        note="not run here: five networks on ImageNet for 100-300 epochs on 8 GPUs; smoke runs them on random "
        "images and sgr.mem measures their activation memory; the launch (DDP) comes with the scale-out issue",
        choices=CHOICES,
    ),
]
