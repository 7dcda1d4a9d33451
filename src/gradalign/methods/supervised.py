"""The supervised baseline of LGA's benchmark: cross entropy on the labeled batch only (Oliver et al. 2018)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Settings, require
from gradalign.methods.semi_supervised import descend, oliver_objective


@dataclass(frozen=True)
class SupervisedSettings(Settings):
    lr: float = 3e-3  # Oliver et al.'s tuned value

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")


def supervised_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    """Labeled cross entropy, still divided by B = B_ℓ + B_u as in Oliver et al.'s code."""
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l = run.model(run.augment(x_l))
    unlabeled = torch.zeros((), device=x_l.device)
    return descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, 0.0, ramp))
