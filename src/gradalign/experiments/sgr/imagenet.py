"""SGR part, ImageNet (notebook sgr/05): Table 2 (ResNet-18, K = 4, the λ sweep) and Table 5 (ResNet-50/101,
ViT-S, Swin-T/S against global BP). Neither has been run for this book.

Both are 100 to 300 epochs of ImageNet on 8 A100s (Table 5 gives 7 to 91 hours per row).
  - `paper` (`steps` = 0): each row trained on ImageNet (`data.imagenet_folder`, ImageFolder layout under
    `data_root`) with App. E's recipe, data-parallel over the processes torchrun starts
    (`training.imagenet`, `training.distributed`), one run-cache unit per row so that an interrupted table
    resumes at its row and step. Without the ImageNet files it raises `NotRunHereError` before any compute,
    with the command to launch it. `epochs` and `batch` shrink the protocol for smaller machines (the schedule
    compressed into the epochs, the learning rate scaled with the batch as Goyal et al. do: our choices).
  - `smoke` (`steps` > 0): every row's network (`models.imagenet`), split as the paper splits it, trained for a
    few steps of the row's method with the optimizer of its App. E recipe on a fixed batch of random images; the
    record checks that the split network computes the whole network's function and that every step stayed finite.
  - the activation memory of the same networks and splits, at a small batch: `sgr.mem` measures it (one
    record for every memory number in the book) and the page shows it beside Table 5's memory column.

App. E's recipes, the rows and the config: `imagenet_recipes`; the runs on ImageNet itself: `imagenet_rows`.
"""

from __future__ import annotations

import math
import time

import torch

from gradalign.experiments.base import Experiment, check, outcome
from gradalign.experiments.sgr.imagenet_rows import train_imagenet_rows
from gradalign.experiments.sgr.imagenet_recipes import (
    RECIPES,
    SGR_LAMBDA,
    TABLE2_ROWS,
    ImageNetLocalConfig,
    build_row,
    family,
    lr_at,
    make_optimizer,
)

NOTEBOOK = "notebooks/sgr/05_imagenet.ipynb"


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
        return train_imagenet_rows(cfg, element_id)
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
        note="not run here: ResNet-18 on ImageNet for 100 epochs per row on 8 GPUs (the paper preset runs under "
        "torchrun where the ImageNet files are); smoke runs the rows on random images",
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
        note="not run here: five networks on ImageNet for 100-300 epochs on 8 GPUs (the paper preset runs under "
        "torchrun where the ImageNet files are); smoke runs them on random images and sgr.mem measures their "
        "activation memory",
        choices=CHOICES,
    ),
]
