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
from pathlib import Path

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
        return _imagenet_rows(cfg, element_id)
    gen = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, 3, cfg.image_size, cfg.image_size, generator=gen)
    y = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen)
    rows = [smoke_row(cfg, row, x, y) for row in cfg.rows]
    return outcome(smoke_checks(rows), {"rows": rows}, scope="reduced")


def imagenet_root(cfg: ImageNetLocalConfig) -> Path:
    from gradalign.data.fashion_mnist import data_root

    return Path(cfg.data_root) if cfg.data_root else data_root() / "imagenet"


def _imagenet_rows(cfg: ImageNetLocalConfig, element_id: str) -> dict:
    """Every row trained on ImageNet under torchrun (or in one process), each a run-cache unit."""
    from gradalign.training.distributed import init_distributed

    root = imagenet_root(cfg)
    if not (root / "train").is_dir() or not (root / "val").is_dir():
        nets = ", ".join(sorted({row[0] for row in cfg.rows}))
        raise NotRunHereError(
            f"{element_id} is not run here: {nets} on ImageNet needs the ILSVRC-2012 images at {root} (train/ and "
            f"val/ in ImageFolder layout, or set data_root); then launch `torchrun --nproc-per-node {cfg.gpus} -m "
            f"gradalign run {element_id} --preset paper` ({cfg.gpus} GPUs in the paper)"
        )
    with init_distributed() as context:
        rows = [row_unit(cfg, row, root, context).run() for row in cfg.rows]
    shrunk = cfg.epochs or cfg.batch or cfg.image_size != 224 or cfg.classes != 1000
    return outcome(
        imagenet_checks(rows, cfg.classes, element_id), {"rows": rows}, scope="reduced" if shrunk else "exact"
    )


def row_unit(cfg: ImageNetLocalConfig, row, root: Path, context):
    """One row's training on ImageNet as a run-cache unit (kind `sgr.imagenet`); every rank computes it."""
    import functools

    from gradalign.run_unit import Unit

    network, method, modules, lam = row
    spec = {
        "row": list(row),
        "split": cfg.split,
        "root": str(root.resolve()),
        "classes": cfg.classes,
        "image_size": cfg.image_size,
        "batch": cfg.batch,
        "epochs": cfg.epochs,
        "seed": cfg.seed,
        "world_size": context.world_size,  # per-rank BatchNorm and δ: a different world is a different run
    }
    label = f"{network} {method} K={modules} lambda={lam:g} on ImageNet"
    return Unit(label, "sgr.imagenet", spec, 1, functools.partial(_train_row, cfg, row, root, context, spec))


def _train_row(cfg: ImageNetLocalConfig, row, root: Path, context, spec: dict, checkpoint) -> dict:
    from gradalign.data.imagenet_folder import RankStream, imagenet_split
    from gradalign.errors import ConfigError
    from gradalign.methods.local import LOCAL_METHODS, LocalSettings
    from gradalign.training import loop
    from gradalign.training.checkpoint import fingerprint
    from gradalign.training.distributed import average_gradients_before_step, train_data_parallel
    from gradalign.training.imagenet import ImageNetLocalRun

    network, method, modules, lam = row
    recipe = RECIPES[family(network)]
    epochs, batch = cfg.epochs or recipe["epochs"], cfg.batch or recipe["batch"]
    train_images, val_images = (
        imagenet_split(root, "train", cfg.image_size),
        imagenet_split(root, "val", cfg.image_size),
    )
    if len(train_images.classes) != cfg.classes:
        raise ConfigError(f"classes is {cfg.classes} but {root / 'train'} holds {len(train_images.classes)} classes")
    stream = RankStream(
        train_images, batch, context.rank, context.world_size, cfg.seed, cfg.workers, context.device.type == "cuda"
    )
    torch.manual_seed(cfg.seed)
    sample = torch.randn(batch // context.world_size, 3, cfg.image_size, cfg.image_size)  # shapes set the cuts
    model, parts, heads = build_row(cfg, network, method, modules, sample)
    model.to(context.device)
    optimizers = [make_optimizer(recipe, [*p.parameters(), *hd.parameters()]) for p, hd in zip(parts, heads)]
    for optimizer in optimizers:
        average_gradients_before_step(optimizer, context)
    scale = batch / recipe["batch"]  # linear scaling rule for another batch (Goyal et al. 2017; our choice)

    def lr(epoch: float) -> float:
        return scale * lr_at(recipe, epoch * recipe["epochs"] / epochs)

    settings = LocalSettings(method=method, modules=modules, lam=lam)
    run = ImageNetLocalRun(parts, heads, optimizers, LOCAL_METHODS[method], settings, stream, val_images, lr, context)
    steps, per_epoch = epochs * stream.batches_per_epoch, stream.batches_per_epoch
    out = train_data_parallel(
        run,
        steps,
        context=context,
        checkpoint=checkpoint,
        run_fingerprint=fingerprint(spec),
        eval_at=loop.every(per_epoch, steps),
        name=f"{network} {method} K={modules}",
    )
    seconds = torch.tensor(out.train_seconds, dtype=torch.float64, device=context.device)
    return {
        "network": network,
        "method": method,
        "K": modules,
        "lambda": lam,
        "epochs": epochs,
        "global_batch": batch,
        "world_size": context.world_size,
        "history": out.history,
        "top1_error": out.history["val_error"][-1],
        "train_seconds": float(_max_over_ranks(seconds, context)),  # the same on every rank: one cache entry
    }


def _max_over_ranks(value: torch.Tensor, context) -> torch.Tensor:
    import torch.distributed as dist

    if context.world_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value


def imagenet_checks(rows: list[dict], classes: int, element_id: str) -> dict[str, dict]:
    """Every row learned (top-1 error below chance), and the table's claim: Table 2 (§4.2), "most choices of λ
    achieve more than 1% improvement over non-greedy layer-wise training"; Table 5 (§4.2), on the Transformers no
    "performance loss (more than 1.5%) compared with global BP". A claim without the rows it compares fails."""
    chance = 100 * (1 - 1 / classes)
    errors = {
        f"{r['network']} {r['method']} K={r['K']} lambda={r['lambda']:g}": round(r["top1_error"], 2) for r in rows
    }
    checks = {
        "rows_learn": check(
            all(math.isfinite(e) and e < chance for e in errors.values()),
            errors,
            f"every row's final top-1 error is finite and below chance ({chance:.1f} %)",
            "each row's method trains the network on ImageNet",
        )
    }
    if element_id == "sgr.tab2":
        layerwise = [r["top1_error"] for r in rows if r["method"] == "layerwise"]
        gains = [min(layerwise) - r["top1_error"] for r in rows if r["method"] == "sgr"] if layerwise else []
        checks["sgr_beats_layerwise_by_1"] = check(
            bool(gains) and sum(g > 1 for g in gains) > len(gains) / 2,
            [round(g, 2) for g in gains] if gains else "no layer-wise and SGR rows to compare",
            "top-1 accuracy of SGR − layer-wise > 1 point for more than half of the λ values",
            "most choices of λ achieve more than 1% improvement over non-greedy layer-wise training",
        )
    else:
        losses = {}
        for r in rows:
            bp = [b["top1_error"] for b in rows if b["network"] == r["network"] and b["method"] == "global_bp"]
            if r["method"] == "sgr" and r["network"] in ("vit_small", "swin_t", "swin_s") and bp:
                losses[f"{r['network']} K={r['K']}"] = round(r["top1_error"] - bp[0], 2)
        checks["transformers_within_1_5_of_bp"] = check(
            bool(losses) and all(v <= 1.5 for v in losses.values()),
            losses or "no Transformer with both an SGR and a global-BP row",
            "top-1 accuracy of global BP − SGR <= 1.5 points on ViT-S, Swin-T and Swin-S",
            "on the Transformers, no performance loss of more than 1.5% compared with global BP",
        )
    return checks


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
