"""One trial of LGA's synthetic study (Jackson & Schulman 2019, §3.2, Figures 3-4), on the one loop.

A 4-layer fully connected ReLU network with 128 hidden units on the shells data (Eq. 14), trained
either by Adam on the labeled points (the supervised baseline) or by Algorithm 1 (`methods.lga`) with
the unlabeled points as well. Every `eval_every` steps (0-based step s with s % eval_every == 0): the
alignment (Eq. 13) of the update θ_{s+1} − θ_s with the principal eigenvector of the test-loss Hessian
at θ_s (Lanczos on Hessian-vector products, `analysis.hessian`), then test error and loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gradalign.analysis.hessian import alignment, model_hessian_top_eigenvector
from gradalign.config import Settings, require
from gradalign.data.shells import N_CLASSES, ShellsData
from gradalign.divergence import raise_if_not_finite
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods.lga import ConstantWeight, LGASettings, init_lga, lga_step
from gradalign.models.mlp import relu_mlp
from gradalign.params import adam, flat
from gradalign.training import loop
from gradalign.training.evaluate import classification_metrics
from gradalign.training.streams import IndexStream

DIVERGED_LOSS = 100 * math.log(N_CLASSES)
"""A test loss above 100x that of a uniform guess counts as diverged (our choice): Adam's bounded steps keep
a blown-up network finite, so a NaN check alone lets losses of 1e13 through."""


@dataclass(frozen=True)
class ShellsTrialSettings(Settings):
    steps: int = 3000  # our choice; the paper does not state its iterations
    batch: int = 128  # labeled and unlabeled minibatch sizes (our choice)
    lr: float = 1e-3  # Adam: the supervised baseline and LGA's α_θ (Figure 1's value)
    alpha_w: float = 1e-2  # our choice
    eps_norm: float = 1e-3  # Figure 1's value
    labeled_weight: float = 1.0  # T(i), constant (our choice)
    eval_every: int = 150
    hessian_points: int = 2000  # test points whose loss Hessian gives q1 (our choice, for time)
    lanczos_iters: int = 20

    def validate(self) -> None:
        for name in ("steps", "batch", "eval_every", "hessian_points", "lanczos_iters"):
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
        if self.measured(t):
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
        if self.measured(t):
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
        values = {
            "alignment": float(last["alignment"]),
            "test_accuracy": 1 - error / 100,
            "test_loss": loss,
            "eigenvalue": float(last["eigenvalue"]),
        }
        if self.method == "lga":
            imputed = self.lga.w.detach().argmax(-1)
            values["imputed_accuracy"] = float((imputed == self.data.y_unlabeled).float().mean())
        return values


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


def lga_update(run: ShellsRun, seed: int):
    """Algorithm 1 with T(i) = labeled_weight; its imputed labels are kept on the run (`run.lga`)."""
    s, d = run.s, run.data
    unlabeled = IndexStream(len(d.x_unlabeled), s.batch, seed + 1)
    settings = LGASettings(
        alpha_theta=s.lr, alpha_w=s.alpha_w, eps_norm=s.eps_norm, labeled_weight=ConstantWeight(s.labeled_weight)
    )
    run.lga = init_lga(run.model, len(d.x_unlabeled), N_CLASSES, settings)

    def update(i_l: torch.Tensor) -> torch.Tensor:
        i_u = unlabeled.next()
        return lga_step(run.model, run.lga, d.x_labeled[i_l], d.y_labeled[i_l], d.x_unlabeled[i_u], i_u)["loss_labeled"]

    return update


METHODS = {"supervised": supervised_update, "lga": lga_update}
"""Each method builds its update (what it keeps between steps lives in the closure or on the run)."""


def shells_trial(data: ShellsData, method: str, s: ShellsTrialSettings, seed: int) -> dict[str, list[float]]:
    """Curves of one trial: step, alignment, test accuracy and loss, eigenvalue (LGA: imputed-label accuracy)."""
    run = ShellsRun(data, method, s, seed)
    out = loop.train(run, s.steps, eval_at=run.measured, name=f"shells {method}")
    curves = {"step": [t - 1 for t in out.history["step"]], **{k: v for k, v in out.history.items() if k != "step"}}
    error, loss = classification_metrics(run.model, data.x_test, data.y_test)
    curves["final_test_accuracy"], curves["final_test_loss"] = [1 - error / 100], [loss]
    return curves
