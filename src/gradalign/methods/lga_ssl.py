"""LGA and LGA + VAT in the semi-supervised benchmark (Jackson & Schulman 2019, §4): Algorithm 1
(`methods.lga`) on augmented batches, T(i) = 1; LGA + VAT adds the VAT gradient to θ's update."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from gradalign.config import Settings, require
from gradalign.methods.consistency import frozen_bn_stats
from gradalign.methods.lga import ConstantWeight, LGASettings, init_lga, lga_step
from gradalign.methods.vat import VATSettings, vat_term
from gradalign.params import trainable


LABELED_WEIGHT = 1.0
"""T(i) = 1 for every i in the benchmark (our choice: the paper states no schedule for §4)."""
ADDED_FIELDS = ("labeled_weight", "grad_ema_decay", "norm_ema_decay")
"""Fields added after runs were stored: left out of `to_dict` at their defaults, so those runs keep their keys."""


@dataclass(frozen=True)
class LGABenchmarkSettings(Settings):
    lr: float = 1e-3  # α_θ: Figure 1's value; the tuned values are not stated (our choice)
    alpha_w: float = 1e-3  # Figure 1's value
    eps_norm: float = 1e-3  # Figure 1's value
    vat: VATSettings = VATSettings(weight=0.0)  # LGA + VAT: weight 0.3 and VAT's eps (our choice: VAT's tuned values)
    labeled_weight: float = LABELED_WEIGHT  # T(i), constant over training (our choice: §4 states none)
    grad_ema_decay: float = 0.9  # EMA(g_ℓ): not stated (`LGASettings`' default, Adam's β1)
    norm_ema_decay: float = 0.999  # EMA(v⁴): not stated (`LGASettings`' default, Adam's β2)

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "alpha_w", self.alpha_w >= 0, "must be >= 0 (0: w frozen, the control of the mechanism check)")
        require(self, "eps_norm", self.eps_norm >= 0, "must be >= 0")
        require(self, "labeled_weight", self.labeled_weight >= 0, "must be >= 0")
        for name in ("grad_ema_decay", "norm_ema_decay"):
            require(self, name, 0 <= getattr(self, name) < 1, "must be in [0, 1)")

    def to_dict(self) -> dict:
        """`ADDED_FIELDS` only where they differ from their defaults: earlier runs keep their keys."""
        values = super().to_dict()
        return {k: v for k, v in values.items() if not (k in ADDED_FIELDS and v == _DEFAULTS[k])}


_DEFAULTS = {f.name: f.default for f in fields(LGABenchmarkSettings)}


def lga_settings(settings: LGABenchmarkSettings) -> LGASettings:
    """Algorithm 1's settings that a benchmark run trains with: the benchmark's α_θ, α_w, ε_norm, constant T(i)
    (`LABELED_WEIGHT` unless set) and EMA decays, no finiteness check inside the step (the loop checks at every
    evaluation), and every other field (Adam's betas and ε) at `LGASettings`' defaults."""
    return LGASettings(
        alpha_theta=settings.lr,
        alpha_w=settings.alpha_w,
        eps_norm=settings.eps_norm,
        grad_ema_decay=settings.grad_ema_decay,
        norm_ema_decay=settings.norm_ema_decay,
        labeled_weight=ConstantWeight(settings.labeled_weight),
        check_every=0,
    )


def lga_init(model: torch.nn.Module, settings: LGABenchmarkSettings, n_unlabeled: int, classes: int):
    """(Algorithm 1's state, its θ optimizer: the protocol's learning-rate schedule acts on it)."""
    state = init_lga(model, n_unlabeled, classes, lga_settings(settings))
    return state, state.theta_optimizer


def lga_ssl_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    return _lga(run, ramp, x_l, y_l, x_u, idx_u, with_vat=False)


def lga_vat_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    return _lga(run, ramp, x_l, y_l, x_u, idx_u, with_vat=True)


def _lga(run, ramp: float, x_l, y_l, x_u, idx_u, with_vat: bool) -> dict[str, torch.Tensor]:
    x_l_aug, x_u_aug = run.augment(x_l), run.augment(x_u)
    extra = None
    if with_vat:
        vat = run.settings.vat
        with torch.no_grad(), frozen_bn_stats(run.model):
            clean = run.model(x_u_aug)
        term = vat_term(run, vat, x_u, clean)
        batch = x_l.shape[0] + x_u.shape[0]
        extra = torch.autograd.grad(
            vat.weight * ramp * term / batch, list(trainable(run.model).values()), materialize_grads=True
        )
    out = lga_step(run.model, run.extra, x_l_aug, y_l, x_u_aug, idx_u, extra_gradient=extra)
    return {
        "loss": out["loss_labeled"] + out["loss_unlabeled"],
        "loss_labeled": out["loss_labeled"],
        "loss_unlabeled": out["loss_unlabeled"],
        "distance": out["distance"],
        "alignment": out["grad_cosine"],  # cos(g_ℓ, g_u): the label gradient's batch against the labeled one
        "eps_dominated": out["eps_dominated"],  # share of parameters with ε_norm > sqrt(EMA(v⁴)) (Eq. 2)
    }
