"""Mean Teacher (Tarvainen & Valpola 2017) as evaluated by Oliver et al. (2018): the squared difference of
the student's softmax and that of an EMA teacher (`EMATeacher`, torch's `AveragedModel`) on another
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


class EMATeacher(AveragedModel):
    """torch's EMA `AveragedModel` with the same arithmetic, updated without its copy of the step counter to the
    parameters' device (`n_averaged.to(device)`), which blocks a CUDA step on the host: a copy of the student at
    the first update, then θ_T ← θ_T + (1 − ema)(θ_S − θ_T) (`torch._foreach_lerp_`, as `get_ema_multi_avg_fn`),
    the buffers (batch-norm statistics) copied from the student. The counter stays on the CPU."""

    def __init__(self, model: torch.nn.Module, ema: float):
        super().__init__(model, multi_avg_fn=get_ema_multi_avg_fn(ema))
        self.ema = ema

    @torch.no_grad()
    def update_parameters(self, model: torch.nn.Module) -> None:
        ours, theirs = list(self.module.parameters()), [p.detach() for p in model.parameters()]
        if int(self.n_averaged) == 0:
            for mine, student in zip(ours, theirs, strict=True):
                mine.copy_(student)
        else:
            torch._foreach_lerp_(ours, theirs, 1 - self.ema)
        for mine, student in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.copy_(student)
        self.n_averaged += 1


def mean_teacher_init(model: torch.nn.Module, settings: MeanTeacherSettings, n_unlabeled: int, classes: int):
    """(the EMA teacher, no optimizer of its own)."""
    return EMATeacher(model, settings.ema), None


def mean_teacher_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l, logits_u = clean_pass(run, x_l, x_u)
    with torch.no_grad(), frozen_bn_stats(run.extra):
        teacher = run.extra(run.augment(x_u))
    unlabeled = softmax_mse(logits_u, teacher).sum()
    out = descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, run.settings.weight, ramp))
    run.extra.update_parameters(run.model)
    return out
