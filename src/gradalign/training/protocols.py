"""Benchmark protocols as values: the optimizer, learning-rate schedule, consistency ramp and batch
sizes a semi-supervised run follows. Oliver et al.'s (2018) is LGA's (book/appendix/protocols.md); SemiMeta's and
SGR's come with their parts and give the same three methods (`optimizer`, `lr_factor`, `ramp`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Settings, construct, require
from gradalign.errors import ConfigError
from gradalign.methods.lga_ssl import LGABenchmarkSettings
from gradalign.methods.mean_teacher import MeanTeacherSettings
from gradalign.methods.pi_model import PiModelSettings
from gradalign.methods.pseudo_label import PseudoLabelSettings
from gradalign.methods.supervised import SupervisedSettings
from gradalign.methods.vat import VATSettings
from gradalign.params import adam
from gradalign.training.schedules import sigmoid_rampup, step_decay


@dataclass(frozen=True)
class OliverProtocol(Settings):
    """Oliver et al. (2018): Adam, batches of 50 + 50, ramp-up over 40% of the run, lr x 0.2 after 80%."""

    steps: int = 500_000
    batch_labeled: int = 50
    batch_unlabeled: int = 50
    rampup_fraction: float = 0.4  # Oliver: 200k of 500k steps
    lr_decay_at: float = 0.8  # Oliver: x 0.2 at 400k of 500k
    lr_decay: float = 0.2
    eval_every: int = 500
    checkpoint_every: int = 0  # steps between checkpoints (0: at every evaluation)

    def validate(self) -> None:
        for name in ("steps", "batch_labeled", "batch_unlabeled", "eval_every"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "checkpoint_every", self.checkpoint_every >= 0, "must be >= 0")
        for name in ("rampup_fraction", "lr_decay_at"):
            require(self, name, 0 <= getattr(self, name) <= 1, "must lie in [0, 1]")
        require(self, "lr_decay", 0 < self.lr_decay <= 1, "must lie in (0, 1]")

    @property
    def rampup_steps(self) -> int:
        return int(round(self.rampup_fraction * self.steps))

    def optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        return adam(params, lr, (0.9, 0.999), 1e-8)

    def lr_factor(self, step: int) -> float:
        return step_decay(step, self.steps, self.lr_decay_at, self.lr_decay)

    def ramp(self, step: int) -> float:
        return sigmoid_rampup(step, self.rampup_steps)


FAMILIES = ("cifar", "svhn")
"""Oliver et al. tuned one hyperparameter set on CIFAR-10 and one on SVHN; they differ in VAT's eps."""


def oliver_settings(method: str, family: str = "cifar", **overrides) -> Settings:
    """The method's settings with Oliver et al.'s tuned values for `family`; LGA's are our choices."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown hyperparameter family {family!r}; choose one of: {', '.join(FAMILIES)}")
    eps = 6.0 if family == "cifar" else 1.0
    table = {
        "supervised": lambda: SupervisedSettings(),
        "pseudo_label": lambda: PseudoLabelSettings(),
        "pi_model": lambda: PiModelSettings(),
        "mean_teacher": lambda: MeanTeacherSettings(),
        "vat": lambda: VATSettings(eps=eps),
        "vat_entmin": lambda: VATSettings(eps=eps, entmin=0.1),
        "lga": lambda: LGABenchmarkSettings(),
        "lga_vat": lambda: LGABenchmarkSettings(vat=VATSettings(weight=0.3, eps=eps)),
    }
    if method not in table:
        raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(table)}")
    settings = table[method]()
    return construct(type(settings), {**{f: getattr(settings, f) for f in settings.__dataclass_fields__}, **overrides})
