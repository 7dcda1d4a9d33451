"""VAT (Miyato et al. 2018) and VAT + EntMin as evaluated by Oliver et al. (2018); the losses are in
`methods.consistency` (`vat_loss`: the direction found with KL(p_clean ‖ p(x + r)), the loss
KL(p_perturbed ‖ p_clean)). EntMin adds `entmin` · H(p_perturbed), ramped with the VAT weight."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Settings, require
from gradalign.methods.consistency import entropy, vat_loss
from gradalign.methods.semi_supervised import clean_pass, descend, oliver_objective


@dataclass(frozen=True)
class VATSettings(Settings):
    lr: float = 3e-3  # Oliver et al.'s tuned values
    weight: float = 0.3
    eps: float = 6.0  # perturbation norm: 6.0 with the CIFAR-10 set, 1.0 with the SVHN set
    xi: float = 1e-6
    entmin: float = 0.0  # entropy penalty on the perturbed output (VAT + EntMin: 0.1)

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")
        for name in ("weight", "entmin"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        for name in ("eps", "xi"):
            require(self, name, getattr(self, name) > 0, "must be > 0")
        require(
            self,
            "weight",
            self.entmin == 0 or self.weight > 0,
            "must be > 0 when entmin > 0 (the entropy term is ramped with the VAT weight)",
        )


def vat_term(run, settings, x_u: torch.Tensor, clean_logits: torch.Tensor) -> torch.Tensor:
    """Σ_u KL(p_perturbed ‖ p_clean) + (entmin / weight) · Σ_u H(p_perturbed); x_u un-augmented.

    Each VAT pass augments x_u + r afresh (Oliver et al.'s in-network augmentation). The caller
    multiplies by weight · ramp, so the entropy penalty enters as entmin · ramp · H.
    """
    kl, perturbed = vat_loss(
        run.model, x_u, clean_logits.detach(), settings.eps, settings.xi, generator=run.generator, augment=run.augment
    )
    total = kl.sum()
    if settings.entmin:
        total = total + settings.entmin / settings.weight * entropy(perturbed).sum()
    return total


def vat_step(run, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
    batch = x_l.shape[0] + x_u.shape[0]
    logits_l, logits_u = clean_pass(run, x_l, x_u)
    unlabeled = vat_term(run, run.settings, x_u, logits_u)
    return descend(run, *oliver_objective(logits_l, y_l, unlabeled, batch, run.settings.weight, ramp))
