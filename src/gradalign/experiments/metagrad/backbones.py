"""Meta-gradient part, the other backbones (notebook metagrad/05): Table 2 (ResNet-26 shake-shake 2×96d on
CIFAR-10 and CIFAR-100) and Table 3 (ResNet-18 on ImageNet with 10 % labels). Neither is run here.

- `metagrad.tab2` is Table 1's comparison (`benchmark.against_labeled_only`) with the shake-shake network
  (`models.shake_shake`): a runnable experiment at every preset, but a 26.2M-parameter network trained for
  400,000 steps of 128 + 128 images per column is GPU-days, so no record is stored from this machine. `cpu`
  and `gpu` are the reduced variant on Fashion-MNIST that the element table calls optional (`TABLE2_CPU`): Tables 1
  and 4's `cpu` design with the network ×0.125. Its step costs several times Conv-Large ×0.125's (`bench fast_path`
  measures both in one run), so its 6 runs are hours on two cores: the page projects them, and the GPU window's
  backlog trains them.
- `metagrad.tab3` declares the ImageNet protocol of App. C and the code (book/appendix/protocols.md) as a validated
  config. It needs ImageNet (1.28M images, streamed from disk) and was run on 8 GPUs for 600 epochs: where the files
  are, it trains its columns data-parallel under torchrun (`imagenet_runs`); without them it raises
  `NotRunHereError` before any compute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradalign.config import Config, require
from gradalign.errors import ConfigError
from gradalign.experiments.base import Experiment
from gradalign.experiments.metagrad.benchmark import CHOICES, against_labeled_only
from gradalign.experiments.metagrad.imagenet_runs import train_table3
from gradalign.experiments.metagrad.benchmark import table1_checks  # noqa: F401 (Table 2 checks Table 1's claim)
from gradalign.experiments.metagrad.ssl_runs import (
    CPU,
    CPU_FITS,
    GPU,
    SMOKE,
    SemiMetaConfig,
    ssl_scale,
    unused_settings,
)
from gradalign.methods.semimeta import VARIANTS
from gradalign.training.semimeta import MODELS, SemiMetaRunSpec

NOTEBOOK = "notebooks/metagrad/05_backbones.ipynb"
TABLE2_COLUMNS = (("cifar10", 1000), ("cifar10", 2000), ("cifar10", 4000)) + tuple(
    ("cifar100", n) for n in (6000, 8000, 10000)
)


@dataclass(frozen=True)
class BackboneConfig(SemiMetaConfig):
    model: str = "shake_shake26"

    def validate(self) -> None:
        require(self, "model", self.model in MODELS, f"must be one of {tuple(MODELS)}")
        super().validate()

    def spec(self, variant: str, dataset: str, labels: int, seed: int) -> SemiMetaRunSpec:
        return replace(super().spec(variant, dataset, labels, seed), model=self.model)


def table2(cfg: BackboneConfig, device) -> dict:
    return against_labeled_only(cfg, device, TABLE2_COLUMNS)


@dataclass(frozen=True)
class ImageNetConfig(Config):
    """Table 3's protocol: App. C (batch 512, SGD momentum 0.9, weight decay 1e-4, lr 0.1 with cosine annealing,
    600 epochs, γ = 1) and the code (5 warm-up epochs; random-resized-crop-like augmentation, area 0.1–1 and
    aspect 0.8–1.25, where the paper says resize to 256 and crop 224)."""

    data_root: str = ""  # "": $GRADALIGN_DATA/imagenet, ImageFolder layout (train/<wnid>/*.JPEG, val/<wnid>/...)
    model: str = "resnet18"
    label_fraction: float = 0.1  # 10 % of the training images labeled, class-balanced
    gpus: int = 8
    batch_per_gpu: int = 64  # the code's 64 per GPU: 512 overall (App. C)
    epochs: int = 600
    warmup_epochs: int = 5
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    gamma: float = 1.0  # mixup's Beta(γ, γ)
    image_size: int = 224
    crop_area: tuple[float, float] = (0.1, 1.0)
    crop_aspect: tuple[float, float] = (0.8, 1.25)
    classes: int = 1000
    variants: tuple[str, ...] = ("labeled_only", "meta_mixup")  # Table 3's "Labeled-Only" and "Ours"
    workers: int = 8  # data-loader processes per rank (our choice)

    def validate(self) -> None:
        super().validate()
        require(self, "model", self.model in MODELS, f"must be one of {tuple(MODELS)}")
        require(self, "label_fraction", 0 < self.label_fraction < 1, "must be in (0, 1)")
        for name in ("gpus", "batch_per_gpu", "epochs", "image_size"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")
        require(self, "workers", self.workers >= 0, "must be >= 0")
        require(
            self,
            "variants",
            len(self.variants) >= 1 and set(self.variants) <= set(VARIANTS),
            f"must be a non-empty subset of {tuple(VARIANTS)}",
        )
        require(self, "warmup_epochs", 0 <= self.warmup_epochs < self.epochs, "must be in [0, epochs)")
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "momentum", 0 <= self.momentum < 1, "must be in [0, 1)")
        require(self, "weight_decay", self.weight_decay >= 0, "must be >= 0")
        require(self, "gamma", self.gamma > 0, "must be > 0")
        a, b = self.crop_area
        require(self, "crop_area", 0 < a <= b <= 1, "must be (low, high) with 0 < low <= high <= 1")
        a, b = self.crop_aspect
        require(self, "crop_aspect", 0 < a <= b, "must be (low, high) with 0 < low <= high")

    @property
    def batch(self) -> int:
        return self.gpus * self.batch_per_gpu


def table3(cfg: ImageNetConfig, device) -> dict:
    return train_table3(cfg)


def projected_hours(step_ratio: float, seconds_by_variant: dict[str, list[float]], seeds: int, cores: int = 2) -> float:
    """Wall hours of Table 2's `cpu` runs on `cores` cores (one run per core, one thread each): for each variant, the
    mean measured seconds of its Conv-Large ×0.125 run at the same protocol, times `seeds`, times the measured
    step-time ratio of the shake-shake network to Conv-Large (both ×0.125)."""
    if not step_ratio > 0 or not seconds_by_variant or not all(seconds_by_variant.values()) or seeds < 1:
        raise ConfigError("the projection needs a positive step ratio and measured seconds for every variant")
    per_seed = sum(sum(v) / len(v) for v in seconds_by_variant.values())
    return step_ratio * per_seed * seeds / cores / 3600


def _without_dropout(preset: dict) -> dict:
    """`preset` without Conv-Large's dropout setting: the shake-shake network has no dropout layer."""
    return {k: v for k, v in preset.items() if k != "dropout"}


TABLE2_CPU = {**_without_dropout(CPU_FITS), "columns": (("fashion_mnist", 1000),)}
"""Table 2's reduced variant (our choice): Tables 1 and 4's `cpu` design (`ssl_runs.CPU_FITS`: 4,000 steps of 32 + 32,
the decays at 50 % and 70 %; the shake-shake network has no dropout layer) with the network ×0.125 at 1,000 labels,
so that the two networks are compared at one protocol. On this machine its 6 runs are over the 1.5-hour budget of
two cores (the page projects the time from the measured step ratio, `bench fast_path`); the GPU window trains them."""
EXPERIMENTS = [
    Experiment(
        "metagrad.tab2",
        table2,
        BackboneConfig,
        {
            "smoke": SMOKE,
            "cpu": {**CPU, **TABLE2_CPU},
            "gpu": {**_without_dropout(GPU), **TABLE2_CPU},
            "paper": {"columns": TABLE2_COLUMNS},
        },
        1,
        NOTEBOOK,
        status="not run here",
        note="not run here: ResNet-26 shake-shake 2x96d (26.2M parameters) for 400k steps per column is GPU-days; "
        "the cpu/gpu presets (Fashion-MNIST, the network x0.125, Tables 1 and 4's 4,000-step protocol) are over the "
        "budget of two CPU cores and wait for a GPU window",
        choices={
            **CHOICES,
            "model": "Mean Teacher's cifar_shakeshake26 (What the papers leave out); global average pooling "
            "(AvgPool2d(8) on "
            "32x32); eval-mode gate 0.5 in both directions",
        },
        scale=ssl_scale,
        shares="metagrad.ssl runs (kind shared with Tables 1 and 4; the model is in the key)",
        unused=unused_settings,
    ),
    Experiment(
        "metagrad.tab3",
        table3,
        ImageNetConfig,
        {"paper": {}},
        1,
        NOTEBOOK,
        status="not run here",
        note="not run here: ImageNet and 8 GPUs for 600 epochs (the paper preset runs under torchrun where the "
        "ImageNet files are)",
        choices={"augmentation": "the code's random-resized crop (area 0.1-1, aspect 0.8-1.25), 5 warm-up epochs"},
    ),
]
