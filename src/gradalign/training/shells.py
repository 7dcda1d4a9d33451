"""One trial of LGA's synthetic study (Jackson & Schulman 2019, §3.2, Figures 3-4).

A 4-layer fully connected ReLU network with 128 hidden units on the shells data (Eq. 14), trained
either by Adam on the labeled points (the supervised baseline) or by Algorithm 1 (`methods.lga`) with
the unlabeled points as well. Every `eval_every` steps: test accuracy and loss, and the alignment
(Eq. 13) of the next parameter update θ_{t+1} − θ_t with the principal eigenvector of the test-loss
Hessian at θ_t (Lanczos on Hessian-vector products, `analysis.hessian`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradalign.analysis.hessian import alignment, model_hessian_top_eigenvector
from gradalign.data.shells import N_CLASSES, ShellsData
from gradalign.errors import ConfigError
from gradalign.methods.lga import ConstantWeight, LGASettings, adam, flat, init_lga, lga_step
from gradalign.training.streams import IndexStream

METHODS = ("supervised", "lga")


def shells_mlp(d: int, hidden: int = 128, layers: int = 4, classes: int = N_CLASSES) -> nn.Sequential:
    """`layers` linear layers (d → hidden → … → classes) with ReLU between them."""
    sizes = [d] + [hidden] * (layers - 1) + [classes]
    modules = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        modules.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)


@dataclass(frozen=True)
class TrialSettings:
    steps: int = 3000
    batch: int = 128  # labeled and unlabeled minibatch sizes
    lr: float = 1e-3  # Adam, the supervised baseline and LGA's α_θ
    alpha_w: float = 1e-2
    eps_norm: float = 1e-3
    labeled_weight: float = 1.0  # T(i), constant
    eval_every: int = 100
    hessian_points: int = 2000  # test points whose loss Hessian gives q1
    lanczos_iters: int = 20

    def __post_init__(self):
        if min(self.steps, self.batch, self.eval_every, self.hessian_points, self.lanczos_iters) < 1:
            raise ConfigError("steps, batch, eval_every, hessian_points and lanczos_iters must be >= 1")
        if min(self.lr, self.alpha_w, self.eps_norm, self.labeled_weight) < 0:
            raise ConfigError("lr, alpha_w, eps_norm and labeled_weight must be >= 0")


@torch.no_grad()
def test_metrics(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    logits = model(x)
    return float((logits.argmax(-1) == y).float().mean()), float(F.cross_entropy(logits, y))


def shells_trial(data: ShellsData, method: str, s: TrialSettings, seed: int) -> dict[str, list[float]]:
    """Curves of one trial: step, alignment, test accuracy and loss (and, for LGA, imputed-label accuracy)."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
    torch.manual_seed(seed)
    model = shells_mlp(data.x_labeled.shape[1]).to(data.x_labeled.device)
    params = list(model.parameters())
    labeled = IndexStream(len(data.x_labeled), s.batch, seed)
    unlabeled = IndexStream(len(data.x_unlabeled), s.batch, seed + 1) if method == "lga" else None
    if method == "lga":
        settings = LGASettings(alpha_theta=s.lr, alpha_w=s.alpha_w, eps_norm=s.eps_norm,
                               labeled_weight=ConstantWeight(s.labeled_weight))
        state = init_lga(model, len(data.x_unlabeled), N_CLASSES, settings)
    else:
        optimizer = adam(params, s.lr, (0.9, 0.999), 1e-8)
    x_h, y_h = data.x_test[:s.hessian_points], data.y_test[:s.hessian_points]
    curves = {"step": [], "alignment": [], "test_accuracy": [], "test_loss": [], "eigenvalue": []}
    if method == "lga":
        curves["imputed_accuracy"] = []
    for step in range(s.steps):
        measure = step % s.eval_every == 0
        if measure:
            eigenvalue, q1 = model_hessian_top_eigenvector(model, lambda out: F.cross_entropy(out, y_h), x_h,
                                                           iters=s.lanczos_iters,
                                                           generator=torch.Generator().manual_seed(seed + step))
            before = flat([p.detach() for p in params]).clone()
        i_l = labeled.next()
        if method == "lga":
            i_u = unlabeled.next()
            lga_step(model, state, data.x_labeled[i_l], data.y_labeled[i_l], data.x_unlabeled[i_u], i_u)
        else:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(data.x_labeled[i_l]), data.y_labeled[i_l]).backward()
            optimizer.step()
        if measure:
            update = flat([p.detach() for p in params]) - before
            accuracy, loss = test_metrics(model, data.x_test, data.y_test)
            curves["step"].append(step)
            curves["alignment"].append(alignment(update, q1))
            curves["eigenvalue"].append(float(eigenvalue))
            curves["test_accuracy"].append(accuracy)
            curves["test_loss"].append(loss)
            if method == "lga":
                imputed = state.w.detach().argmax(-1)
                curves["imputed_accuracy"].append(float((imputed == data.y_unlabeled).float().mean()))
    accuracy, loss = test_metrics(model, data.x_test, data.y_test)
    curves["final_test_accuracy"], curves["final_test_loss"] = [accuracy], [loss]
    return curves
