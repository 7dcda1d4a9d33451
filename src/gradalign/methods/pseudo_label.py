"""Pseudo-Label (Lee 2013) as evaluated by Oliver et al. (2018): a baseline of LGA's Table 1.

One forward pass on the concatenated batch [x_ℓ; x_u] (B = B_ℓ + B_u rows). Unlabeled examples whose
largest softmax probability reaches the threshold get their argmax as a hard target:
    loss = Σ_ℓ CE(x_ℓ, y_ℓ) / B + weight · ramp(t) · Σ_u mask_u · CE(x_u, argmax p_u) / B.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gradalign.config import Settings, require
from gradalign.methods.semi_supervised import clean_pass, descend, oliver_objective


@dataclass(frozen=True)
class PseudoLabelSettings(Settings):
    """Oliver et al.'s tuned values (book/appendix/protocols.md)."""

    lr: float = 3e-4
    weight: float = 1.0
    threshold: float = 0.95

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "weight", self.weight >= 0, "must be >= 0")
        require(self, "threshold", 0 < self.threshold <= 1, "must be in (0, 1]")


def pseudo_label_terms(logits_u: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-example CE to the argmax where the top probability reaches `threshold`, else 0; the mask)."""
    confidence, target = torch.softmax(logits_u.detach(), dim=-1).max(dim=-1)
    mask = (confidence >= threshold).to(logits_u.dtype)
    return mask * F.cross_entropy(logits_u, target, reduction="none"), mask


def pseudo_label_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l, logits_u = clean_pass(run, x_l, x_u)
    unlabeled = pseudo_label_terms(logits_u, run.settings.threshold)[0].sum()
    return descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, run.settings.weight, ramp))
