"""One training step of SemiMeta (Zhang et al. 2020, Algorithm 2) and the rows of its ablation (Table 4), as the
official `train_meta.py` codes them (book/appendix/protocols.md):

1. labeled only: the mean cross entropy of the labeled batch;
2. meta only: labeled CE + weight · (1/B) Σ ‖f(x^u) − ŷ‖², ŷ the meta pseudo labels;
3. mixup only: the targets of the unlabeled images are the plain eval-mode softmax (no meta step), the loss is
   the KL (batch mean) on the mixed batch only;
4. meta + mixup (the method): KL on the mixed batch + weight · the MSE consistency to ŷ (Eq. 13).

The meta step runs in eval mode (BN running statistics, dropout off) with the step's scheduled learning rate
as both α and β; `form="jvp"` swaps the code's finite difference for its exact limit (not in the paper).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from gradalign.config import Settings, require
from gradalign.methods.metagrad import (
    SEMIMETA_C,
    algorithm2_loss,
    classifier,
    coded_pseudo_labels,
    mixed_kl,
    mixup,
    mse_loss,
    renormalised,
)

VARIANTS = {  # name: (title, meta step, mixup), in Table 4's order
    "labeled_only": ("Labeled only", False, False),
    "meta": ("Meta only", True, False),
    "mixup": ("Mixup only", False, True),
    "meta_mixup": ("Meta + mixup", True, True),
}


@dataclass(frozen=True)
class SemiMetaSettings(Settings):
    variant: str = "meta_mixup"
    gamma: float | None = None  # Beta(γ, γ) of mixup; None: the data set's (App. C: 0.1 on SVHN, 1.0 elsewhere)
    weight: float = 1.0  # consistency weight, ramped up linearly over the warm-up (the code's compute_weight)
    c: float = SEMIMETA_C  # ε = c / ‖g‖
    form: str = "fd"  # the code's finite difference, or "jvp" (its exact limit)

    def validate(self) -> None:
        require(self, "variant", self.variant in VARIANTS, f"must be one of {', '.join(VARIANTS)}")
        require(self, "gamma", self.gamma is None or self.gamma > 0, "must be > 0 (or null: the data set's)")
        require(self, "weight", self.weight >= 0, "must be >= 0")
        require(self, "c", self.c > 0, "must be > 0")
        require(self, "form", self.form in ("fd", "jvp"), "must be 'fd' or 'jvp'")

    @property
    def meta(self) -> bool:
        return VARIANTS[self.variant][1]

    @property
    def mixup(self) -> bool:
        return VARIANTS[self.variant][2]


def finite_difference_in_place(model, x_l, y_l, x_u, lr: float, c: float) -> torch.Tensor:
    """`coded_pseudo_labels(form="fd")` the way `train_meta.py` runs it, on the module itself: g by autograd, the
    parameters moved to θ ± εg in place for two forward passes, then put back. Put back from a copy (our choice:
    the code adds εg, subtracts 2εg and adds εg again, which in float32 need not return θ exactly). Equal to the
    functional form to float precision (tested). Returns (ŷ, ỹ): the pseudo labels and the plain eval-mode
    softmax the meta step starts from."""
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.autograd.grad(F.cross_entropy(model(x_l), y_l), params)
    with torch.no_grad():
        y_tilde = torch.softmax(model(x_u), dim=1)
        eps = c / torch.sqrt(sum(t.square().sum() for t in g))
        saved = [p.detach().clone() for p in params]
        torch._foreach_add_(params, g, alpha=eps)
        plus = torch.softmax(model(x_u), dim=1)
        for p, p0, t in zip(params, saved, g):
            p.copy_(p0).sub_(eps * t)
        minus = torch.softmax(model(x_u), dim=1)
        for p, p0 in zip(params, saved):
            p.copy_(p0)
        return renormalised(y_tilde - lr * (plus - minus) / eps), y_tilde


def pseudo_labels(model, x_l, y_l, onehot, x_u, lr: float, s: SemiMetaSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(ŷ, ỹ) for the unlabeled batch, computed in eval mode: ŷ the meta step's pseudo labels (rows 2, 4) or the
    plain softmax (row 3), ỹ the plain softmax the meta step starts from."""
    model.eval()
    try:
        if s.meta and s.form == "fd":
            return finite_difference_in_place(model, x_l, y_l, x_u, lr, s.c)
        with torch.no_grad():
            plain = torch.softmax(model(x_u), dim=1)
        if s.meta:
            params = {k: v.detach() for k, v in model.named_parameters()}
            return coded_pseudo_labels(classifier(model), params, x_l, onehot, x_u, lr, s.c, s.form)[0], plain
        return plain, plain
    finally:
        model.train()


def pseudo_label_update(y_hat: torch.Tensor, plain: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the meta step did to the unlabeled batch's targets: the mean total-variation distance of ŷ from the
    plain softmax ỹ (the size of the update) and the share of images whose most likely class it changed."""
    return {
        "pseudo_update": 0.5 * (y_hat - plain).abs().sum(1).mean(),
        "pseudo_changed": (y_hat.argmax(1) != plain.argmax(1)).float().mean(),
    }


def semimeta_step(model, optimizer, x_l, y_l, x_u, lr: float, ramp: float, s: SemiMetaSettings, classes: int):
    """One update of `model` (in train mode) on a labeled and an unlabeled batch; returns the diagnostics (the
    loss; with a meta step also `pseudo_label_update`)."""
    onehot = F.one_hot(y_l, classes).to(x_l.dtype)
    weight = s.weight * ramp
    diagnostics = {}
    if s.variant == "labeled_only":
        loss = F.cross_entropy(model(x_l), y_l)
    else:
        y_hat, plain = pseudo_labels(model, x_l, y_l, onehot, x_u, lr, s)
        if s.meta:
            diagnostics = pseudo_label_update(y_hat.detach(), plain)
        if s.mixup:
            if s.gamma is None:
                raise ValueError("SemiMetaSettings.gamma is None: a run's settings give γ (the data set's, App. C)")
            beta = torch.distributions.Beta(torch.tensor(s.gamma), torch.tensor(s.gamma))
            lam = beta.sample((len(x_l),)).to(x_l)
            if s.meta:
                loss = algorithm2_loss(model, x_l, onehot, x_u, y_hat, lam, weight)
            else:  # row 3: the mixed batch only, no unlabeled pass
                loss = mixed_kl(model, *mixup(x_l, onehot, x_u, y_hat, lam))
        else:
            loss = F.cross_entropy(model(x_l), y_l) + weight * mse_loss(torch.softmax(model(x_u), 1), y_hat)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return {"loss": loss.detach(), **diagnostics}
