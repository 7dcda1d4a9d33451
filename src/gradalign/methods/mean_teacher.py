"""Mean Teacher (Tarvainen & Valpola 2017) as evaluated by Oliver et al. (2018): the squared difference of
the student's softmax and that of an EMA teacher (`torch.optim.swa_utils.AveragedModel`) on another
augmentation of the same unlabeled image."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from gradalign.config import Settings, require
from gradalign.methods.consistency import frozen_bn_stats, softmax_mse
from gradalign.methods.semi_supervised import clean_pass, descend, oliver_objective


@dataclass(frozen=True)
class MeanTeacherSettings(Settings):
    lr: float = 4e-4  # Oliver et al.'s tuned values
    weight: float = 8.0
    ema: float = 0.95

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "weight", self.weight >= 0, "must be >= 0")
        require(self, "ema", 0 <= self.ema < 1, "must be in [0, 1)")


def mean_teacher_init(model: torch.nn.Module, settings: MeanTeacherSettings, n_unlabeled: int, classes: int):
    """(the EMA teacher, no optimizer of its own)."""
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(settings.ema)), None


def mean_teacher_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l, logits_u = clean_pass(run, x_l, x_u)
    with torch.no_grad(), frozen_bn_stats(run.extra):
        teacher = run.extra(run.augment(x_u))
    unlabeled = softmax_mse(logits_u, teacher).sum()
    out = descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, run.settings.weight, ramp))
    run.extra.update_parameters(run.model)
    return out
