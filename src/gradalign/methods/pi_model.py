"""Π-Model (Laine & Aila 2017) as evaluated by Oliver et al. (2018): the squared difference of the
softmaxes of two augmented passes of each unlabeled image, the second with BatchNorm statistics frozen."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Settings, require
from gradalign.methods.consistency import frozen_bn_stats, softmax_mse
from gradalign.methods.semi_supervised import clean_pass, descend, oliver_objective


@dataclass(frozen=True)
class PiModelSettings(Settings):
    lr: float = 3e-4  # Oliver et al.'s tuned values
    weight: float = 20.0

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "weight", self.weight >= 0, "must be >= 0")


def pi_model_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l, logits_u = clean_pass(run, x_l, x_u)
    with frozen_bn_stats(run.model):
        second = run.model(run.augment(x_u))
    unlabeled = softmax_mse(logits_u, second).sum()
    return descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, run.settings.weight, ramp))
