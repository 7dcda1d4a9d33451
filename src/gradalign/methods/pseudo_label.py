"""Pseudo-Label (Lee 2013) as evaluated by Oliver et al. (2018): the baseline of LGA's Table 1.

One forward pass on the concatenated batch [x_ℓ; x_u] (B = B_ℓ + B_u rows). Unlabeled examples whose
largest softmax probability reaches the threshold get their argmax as a hard target:
    loss = Σ_ℓ CE(x_ℓ, y_ℓ) / B + weight · ramp(t) · Σ_u mask_u · CE(x_u, argmax p_u) / B
with ramp(t) = exp(−5 (1 − t/T_ramp)²) for t < T_ramp, else 1 (Oliver et al.'s ramp-up). Adam.
Same interface as `lga_step`; the unlabeled indices are not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gradalign.errors import ConfigError
from gradalign.methods.lga import adam, raise_if_not_finite


@dataclass(frozen=True)
class PseudoLabelSettings:
    """Oliver et al.'s tuned Pseudo-Label values (PROTOCOLS.md)."""

    lr: float = 3e-4
    weight: float = 1.0
    threshold: float = 0.95
    rampup_steps: int = 200_000  # 0 = no ramp-up
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    check_every: int = 50  # steps between NaN/Inf checks (one host sync each); 0 = never

    def __post_init__(self):
        for name in ("lr", "weight", "adam_eps", "rampup_steps", "check_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0; got {getattr(self, name)!r}")
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"threshold must be in (0, 1]; got {self.threshold!r}")


@dataclass
class PseudoLabelState:
    settings: PseudoLabelSettings
    optimizer: torch.optim.Optimizer
    step: int = 0


def rampup(step: int, rampup_steps: int) -> float:
    """exp(−5 (1 − t/T)²) for t < T, else 1."""
    if step >= rampup_steps:
        return 1.0
    return math.exp(-5.0 * (1.0 - step / rampup_steps) ** 2)


def pseudo_label_terms(logits_u: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-example CE to the argmax where the top probability reaches `threshold`, else 0; the mask)."""
    confidence, target = torch.softmax(logits_u.detach(), dim=-1).max(dim=-1)
    mask = (confidence >= threshold).to(logits_u.dtype)
    return mask * F.cross_entropy(logits_u, target, reduction="none"), mask


def init_pseudo_label(model: torch.nn.Module, settings: PseudoLabelSettings = PseudoLabelSettings()
                      ) -> PseudoLabelState:
    params = [p for p in model.parameters() if p.requires_grad]
    return PseudoLabelState(settings, adam(params, settings.lr, settings.adam_betas, settings.adam_eps))


def pseudo_label_step(model: torch.nn.Module, state: PseudoLabelState, x_l: torch.Tensor, y_l: torch.Tensor,
                      x_u: torch.Tensor, indices: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One Adam step on the Pseudo-Label loss; returns scalar tensors (no host sync unless a check is due)."""
    s = state.settings
    if x_l.shape[0] != y_l.shape[0] or y_l.dim() != 1 or y_l.is_floating_point():
        raise ConfigError("y_l must be class indices (B,), one per row of x_l")
    if x_l.shape[1:] != x_u.shape[1:] or x_u.shape[0] < 1:
        raise ConfigError(f"x_l and x_u must share their example shape; got {tuple(x_l.shape)}, {tuple(x_u.shape)}")
    step = state.step + 1
    n_l, batch = x_l.shape[0], x_l.shape[0] + x_u.shape[0]
    logits = model(torch.cat([x_l, x_u]))
    logits_l, logits_u = logits[:n_l], logits[n_l:]
    loss_l = F.cross_entropy(logits_l, y_l, reduction="sum") / batch
    terms, mask = pseudo_label_terms(logits_u, s.threshold)
    loss_u = terms.sum() / batch
    loss = loss_l + s.weight * rampup(step, s.rampup_steps) * loss_u
    diagnostics = {"loss": loss.detach(), "loss_labeled": loss_l.detach(), "loss_unlabeled": loss_u.detach(),
                   "mask_rate": mask.mean()}
    if s.check_every and step % s.check_every == 0:
        raise_if_not_finite("Pseudo-Label", step, diagnostics)
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    state.optimizer.step()
    state.step = step
    return diagnostics
