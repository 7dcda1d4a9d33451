"""One trial of LGA's synthetic study (Jackson & Schulman 2019, §3.2, Figures 3-4), on the one loop.

A 4-layer fully connected ReLU network with 128 hidden units on the shells data (Eq. 14), trained
either by Adam on the labeled points (the supervised baseline) or by Algorithm 1 (`methods.lga`) with
the unlabeled points as well. Every `eval_every` steps (0-based step s with s % eval_every == 0): the
alignment (Eq. 13) of the update θ_{s+1} − θ_s with the principal eigenvector of the test-loss Hessian
at θ_s (Lanczos on Hessian-vector products, `analysis.hessian`; skipped with `alignment=False`, as in tuning),
then test error and loss, the validation split's when the data has one, and LGA's imputed labels: their accuracy
on the unlabeled pool, their confidence (mean largest probability) and how far they moved from Algorithm 1's
start w = 0 (mean total-variation distance from the uniform label). At the end: each arm's eval-mode error on its
own labeled training set, and for LGA the share of parameters whose ε_norm exceeds sqrt(EMA(v⁴)) (Eq. 2), where
the normalisation is effectively off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gradalign.analysis.hessian import alignment, model_hessian_top_eigenvector
from gradalign.config import Settings, require
from gradalign.data.shells import N_CLASSES, ShellsData
from gradalign.methods.divergence import raise_if_not_finite
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods.lga import (
    ConstantWeight,
    LGASettings,
    eps_dominated_share,
    imputed_diagnostics,
    init_lga,
    lga_step,
)
from gradalign.models.mlp import relu_mlp
from gradalign.params import adam, flat
from gradalign.store.run_unit import without_defaults
from gradalign.training import loop
from gradalign.training.evaluate import classification_metrics
from gradalign.training.streams import IndexStream

DIVERGED_LOSS = 100 * math.log(N_CLASSES)
"""A test loss above 100x that of a uniform guess counts as diverged (our choice): Adam's bounded steps keep
a blown-up network finite, so a NaN check alone lets losses of 1e13 through."""


@dataclass(frozen=True)
class ShellsTrialSettings(Settings):
    steps: int = 3000  # our choice; the paper does not state its iterations
    batch: int = 128  # labeled minibatch size (our choice)
    lr: float = 1e-3  # Adam: the supervised baseline and LGA's α_θ (Figure 1's value)
    alpha_w: float = 1e-2  # our choice
    eps_norm: float = 1e-3  # Figure 1's value
    labeled_weight: float = 1.0  # T(i), constant (our choice)
    eval_every: int = 150
    hessian_points: int = 2000  # test points whose loss Hessian gives q1 (our choice, for time)
    lanczos_iters: int = 20
    unlabeled_batch: int = 128  # LGA's unlabeled minibatch size (our choice)
    alignment: bool = True  # measure the alignment (Eq. 13) at each evaluation; off in tuning (cheap)

    def to_dict(self) -> dict:
        """The fields added later only where they differ from their defaults: earlier keys stay as they were."""
        return without_defaults(self, super().to_dict(), ("unlabeled_batch", "alignment"))

    def validate(self) -> None:
        for name in ("steps", "batch", "eval_every", "hessian_points", "lanczos_iters", "unlabeled_batch"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "eval_every", self.eval_every <= self.steps, "must be <= steps")
        for name in ("lr", "alpha_w", "eps_norm"):
            require(self, name, getattr(self, name) > 0, "must be > 0")
        require(self, "labeled_weight", self.labeled_weight >= 0, "must be >= 0")


class ShellsRun:
    """One trial's network and its method's update; trials are short and stored whole in the run cache, so
    the loop runs them without checkpoints (no state_dict)."""

    def __init__(self, data: ShellsData, method: str, s: ShellsTrialSettings, seed: int):
        if method not in METHODS:
            raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
        self.data, self.method, self.s, self.seed = data, method, s, seed
        torch.manual_seed(seed)
        self.model = relu_mlp(data.x_labeled.shape[1], 128, 4, N_CLASSES).to(data.x_labeled.device)
        self.params = list(self.model.parameters())
        self.labeled = IndexStream(len(data.x_labeled), s.batch, seed)
        self.update = METHODS[method](self, seed)
        self.x_h, self.y_h = data.x_test[: s.hessian_points], data.y_test[: s.hessian_points]

    def measured(self, t: int) -> bool:
        return (t - 1) % self.s.eval_every == 0

    def step(self, t: int) -> dict[str, torch.Tensor]:
        s = self.s
        out = {}
        if self.measured(t) and s.alignment:
            raise_if_not_finite(f"shells {self.method}", t - 1, {"parameters": flat([p.detach() for p in self.params])})
            eigenvalue, q1 = model_hessian_top_eigenvector(
                self.model,
                lambda o: F.cross_entropy(o, self.y_h),
                self.x_h,
                iters=s.lanczos_iters,
                generator=torch.Generator().manual_seed(self.seed + t - 1),
            )
            before = flat([p.detach() for p in self.params]).clone()
        out["loss"] = self.update(self.labeled.next())
        if self.measured(t) and s.alignment:
            update = flat([p.detach() for p in self.params]) - before
            out["alignment"] = torch.tensor(float(alignment(update, q1)), dtype=torch.float64)
            out["eigenvalue"] = torch.as_tensor(eigenvalue, dtype=torch.float64)
        return out

    def evaluate(self, t: int, sums: dict[str, float], count: int, last: dict[str, torch.Tensor]) -> dict[str, float]:
        error, loss = classification_metrics(self.model, self.data.x_test, self.data.y_test)
        if not loss < DIVERGED_LOSS:
            raise DivergenceError(
                f"shells {self.method} diverged at step {t - 1}: test_loss = {loss:.3g} "
                f"(over 100x the chance loss ln {N_CLASSES}); lower the learning rate"
            )
        values = {"test_accuracy": 1 - error / 100, "test_loss": loss}
        if self.s.alignment:
            values.update(alignment=float(last["alignment"]), eigenvalue=float(last["eigenvalue"]))
        values.update(validation_metrics(self.model, self.data))
        if self.method == "lga":
            values.update(imputed_diagnostics(self.lga.w.detach(), self.data.y_unlabeled))
        return values


def validation_metrics(model: torch.nn.Module, data: ShellsData) -> dict[str, float]:
    """Validation accuracy and loss, when the data has a validation split (else nothing)."""
    if data.x_val is None or len(data.x_val) == 0:
        return {}
    error, loss = classification_metrics(model, data.x_val, data.y_val)
    return {"val_accuracy": 1 - error / 100, "val_loss": loss}


def supervised_update(run: ShellsRun, seed: int):
    """The baseline: Adam on the labeled cross entropy."""
    optimizer = adam(run.params, run.s.lr, (0.9, 0.999), 1e-8)
    d = run.data

    def update(i_l: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(run.model(d.x_labeled[i_l]), d.y_labeled[i_l])
        loss.backward()
        optimizer.step()
        return loss.detach()

    return update


def lga_settings(s: ShellsTrialSettings) -> LGASettings:
    """Algorithm 1's settings of a trial's LGA arm: its lr (α_θ), α_w, ε_norm and constant T(i); every other field
    (the EMA decays, Adam's betas and ε, the finiteness check) at `LGASettings`' defaults."""
    return LGASettings(
        alpha_theta=s.lr, alpha_w=s.alpha_w, eps_norm=s.eps_norm, labeled_weight=ConstantWeight(s.labeled_weight)
    )


def lga_update(run: ShellsRun, seed: int):
    """Algorithm 1 with T(i) = labeled_weight; its imputed labels are kept on the run (`run.lga`)."""
    s, d = run.s, run.data
    unlabeled = IndexStream(len(d.x_unlabeled), s.unlabeled_batch, seed + 1)
    run.lga = init_lga(run.model, len(d.x_unlabeled), N_CLASSES, lga_settings(s))

    def update(i_l: torch.Tensor) -> torch.Tensor:
        i_u = unlabeled.next()
        return lga_step(run.model, run.lga, d.x_labeled[i_l], d.y_labeled[i_l], d.x_unlabeled[i_u], i_u)["loss_labeled"]

    return update


METHODS = {"supervised": supervised_update, "lga": lga_update}
"""Each method builds its update (what it keeps between steps lives in the closure or on the run)."""


def shells_trial(data: ShellsData, method: str, s: ShellsTrialSettings, seed: int) -> dict[str, list[float]]:
    """Curves of one trial: step, alignment, test (and validation) accuracy and loss, eigenvalue (LGA: the imputed
    labels' accuracy, confidence and distance moved); the finals as one-element lists (`final_*`)."""
    run = ShellsRun(data, method, s, seed)
    out = loop.train(run, s.steps, eval_at=run.measured, name=f"shells {method}")
    curves = {"step": [t - 1 for t in out.history["step"]], **{k: v for k, v in out.history.items() if k != "step"}}
    curves.update(final_metrics(run.model, data))
    if method == "lga":
        curves["final_eps_dominates"] = [eps_dominates(run.lga)]
    return curves


def final_metrics(model: torch.nn.Module, data: ShellsData) -> dict[str, list[float]]:
    """Test accuracy and loss after the last step, and the eval-mode error (%) on the arm's labeled training set."""
    error, loss = classification_metrics(model, data.x_test, data.y_test)
    labeled_error, _ = classification_metrics(model, data.x_labeled, data.y_labeled)
    return {"final_test_accuracy": [1 - error / 100], "final_test_loss": [loss], "final_labeled_error": [labeled_error]}


def eps_dominates(state) -> float:
    """Share of parameters whose ε_norm exceeds sqrt(EMA(v⁴)) (bias-corrected) in Eq. 2's normaliser: there the
    distance is ε-weighted, i.e. unnormalised."""
    st = state.settings
    ema = state.ema_v4 / (1.0 - st.norm_ema_decay ** max(state.step, 1))
    return float(eps_dominated_share(ema, st.eps_norm))
