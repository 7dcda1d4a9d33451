"""Batched trials: N small independent trainings of one architecture as one training of stacked tensors.

A study of many small trials (LGA's shells study, §3.2: 25 trials of a 4-layer ReLU MLP, each trained by
Adam on its own data set) spends most of a step on launching small kernels. Stacking the N models' parameters
along a new leading dimension (`torch.func.stack_module_state`) and mapping one functional loss over it
(`vmap(grad_and_value(loss))` with `functional_call`) turns N matrix products into one batched product per
layer, and N optimizer steps into one elementwise update of the stacked tensors:

    trial i:    g_i = ∇θ CE(f(θ_i, X_i[I_i]), y_i[I_i]),     θ_i ← Adam(α_i, g_i)
    batched:    G = vmap(∇ CE)(Θ, X[I], Y[I]) with Θ = stack(θ_1..θ_N),   Θ ← BatchedAdam(α, G)

Each trial keeps its own data (X_i, y_i), minibatch indices I_i (an `IndexStream` seeded with its seed), initial
weights and learning rate, so trial i of the batched run is trial i of `train_supervised_one_at_a_time`.
`BatchedAdam` repeats torch's Adam operation for operation, and on one CPU thread the two runs agree to the last
bit (torch 2.13). Elsewhere a batched matrix product may sum in another order than N single ones (so may one
product on 1 and on 2 threads): the runs agree to float rounding per step (~1e-7), and training amplifies that
as it amplifies any change of summation order: after a few hundred steps some trials are ~1e-2 apart, as far as
the one-at-a-time run on 1 thread is from itself on 2 (`benchmarks.batched_trials` measures both).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from gradalign.errors import ConfigError
from gradalign.training.streams import IndexStream


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _per_trial(lr: float | Sequence[float], trials: int) -> list[float]:
    """One learning rate for every trial, or one per trial."""
    lrs = [float(lr)] * trials if isinstance(lr, (int, float)) else [float(a) for a in lr]
    _require(len(lrs) == trials, f"{trials} trials but {len(lrs)} learning rates")
    return lrs


def _signature(model: nn.Module) -> tuple:
    """What trials must share to be stacked: the module tree (its repr) and every tensor's name, shape, dtype
    and device."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return repr(model), [(name, tuple(t.shape), t.dtype, t.device) for name, t in tensors]


def _check_one_architecture(models: list[nn.Module]) -> None:
    _require(len(models) >= 1, "need at least one model")
    first = _signature(models[0])
    for i, model in enumerate(models[1:], start=1):
        _require(
            _signature(model) == first,
            f"model {i} differs from model 0 in its modules or its tensors' names, shapes, dtypes or devices; "
            "batched trials need one architecture",
        )


def stack_models(models: Sequence[nn.Module]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], nn.Module]:
    """(params, buffers, base): every tensor of the N models stacked on a new leading trial dimension (detached
    copies; the models are left as they are), and a copy of the first model on the meta device, the structure
    that `functional_call` runs the stacked tensors through."""
    models = list(models)
    _check_one_architecture(models)
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    return {k: p.detach() for k, p in params.items()}, buffers, base


class BatchedAdam:
    """torch.optim.Adam's default update (no amsgrad, no weight decay, no maximize) on stacked parameters, one
    learning rate per trial; trial i's slice moves exactly as an Adam on trial i alone:

        m ← lerp(m, g, 1 − β1),   v ← β2·v + (1 − β2)·g²,
        θ ← θ + (−α_i / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + ε)

    with torch's grouping of every floating-point operation (its single-tensor CPU path: the step size in
    double precision, rounded to the parameter dtype, times m, divided by the denominator). The per-trial step
    sizes are computed on the device in float64 from α (a float64 tensor), so a step never waits on the host.
    On CUDA torch's default Adam is its foreach path, which groups the last product as s·(m/denom): the same
    update up to rounding. Adam acts elementwise, so with one rate for every trial torch.optim.Adam on the stacked
    tensors is this update too; the class is for one rate per trial (a learning-rate sweep as one batch).
    """

    def __init__(
        self,
        params: dict[str, torch.Tensor],
        lr: float | Sequence[float],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        _require(len(params) >= 1, "BatchedAdam needs at least one stacked parameter")
        like = next(iter(params.values()))
        trials = like.shape[0]
        lrs = _per_trial(lr, trials)
        _require(all(a >= 0 for a in lrs), f"learning rates must be >= 0; got {lrs}")
        _require(all(0 <= b < 1 for b in betas), f"betas must lie in [0, 1); got {betas}")
        _require(eps >= 0, f"eps must be >= 0; got {eps}")
        for name, p in params.items():
            _require(p.shape[:1] == (trials,), f"parameter {name} has no leading trial dimension of {trials}")
        self.params, self.betas, self.eps = params, betas, eps
        self.lr = torch.tensor(lrs, dtype=torch.float64, device=like.device)
        self.exp_avg = {name: torch.zeros_like(p) for name, p in params.items()}
        self.exp_avg_sq = {name: torch.zeros_like(p) for name, p in params.items()}
        self.steps = 0

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor]) -> None:
        """One update of every trial from its stacked gradients (the same names and shapes as the parameters)."""
        self.steps += 1
        beta1, beta2 = self.betas
        bias_correction1 = 1 - beta1**self.steps
        bias_correction2_sqrt = (1 - beta2**self.steps) ** 0.5
        step_size = (self.lr / bias_correction1).neg()  # float64, (N,)
        rounded = {dtype: step_size.to(dtype) for dtype in {p.dtype for p in self.params.values()}}
        for name, p in self.params.items():
            g, m, v = grads[name], self.exp_avg[name], self.exp_avg_sq[name]
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.add_(rounded[p.dtype].view(-1, *[1] * (p.dim() - 1)) * m / denom)


@dataclass
class TrialsResult:
    """Final parameters stacked on the trial dimension (name -> (N, ...)) and each step's minibatch loss (N, steps),
    on the device of the data."""

    params: dict[str, torch.Tensor]
    losses: torch.Tensor


def trial_differences(a: TrialsResult, b: TrialsResult) -> torch.Tensor:
    """(N,): for each trial, the largest absolute difference between a's and b's final parameters."""
    _require(a.params.keys() == b.params.keys(), "the two results hold different parameters")
    return torch.stack([(a.params[k] - b.params[k]).abs().flatten(1).amax(1) for k in a.params]).amax(0)


def _check_trials(models, xs, ys, steps: int, batch: int, lr, seeds) -> tuple[list[nn.Module], list[float]]:
    """Host-side checks of everything a run is given, before any compute; returns the models and per-trial lrs."""
    models = list(models)
    n_trials = len(models)
    _require(n_trials >= 1, "need at least one trial (model)")
    _require(isinstance(xs, torch.Tensor) and xs.dim() >= 3, "xs must be a tensor (trials, n, ...) of inputs")
    _require(isinstance(ys, torch.Tensor) and ys.dim() == 2, "ys must be a tensor (trials, n) of class indices")
    _require(not ys.is_floating_point(), "ys must hold class indices (an integer dtype)")
    _require(
        xs.shape[0] == n_trials and ys.shape[0] == n_trials,
        f"{n_trials} models but xs holds {xs.shape[0]} trials and ys {ys.shape[0]}",
    )
    _require(xs.shape[1] == ys.shape[1], f"xs has {xs.shape[1]} points per trial but ys has {ys.shape[1]}")
    _require(xs.shape[1] >= 1, "each trial needs at least one data point")
    _require(xs.device == ys.device, f"xs is on {xs.device} but ys on {ys.device}")
    _require(len(seeds) == n_trials, f"{n_trials} models but {len(seeds)} seeds")
    _require(all(isinstance(s, int) and not isinstance(s, bool) for s in seeds), "seeds must be integers")
    for name, value in (("steps", steps), ("batch", batch)):
        _require(isinstance(value, int) and value >= 1, f"{name} must be an integer >= 1; got {value!r}")
    lrs = _per_trial(lr, n_trials)
    _require(all(a > 0 for a in lrs), f"learning rates must be > 0; got {lrs}")
    _check_one_architecture(models)
    for i, model in enumerate(models):
        _require(next(model.buffers(), None) is None, f"model {i} has buffers; batched training needs none")
        _require(
            all(p.device == xs.device for p in model.parameters()),
            f"model {i}'s parameters are not on the data's device {xs.device}",
        )
    return models, lrs


def trial_loss(base: nn.Module):
    """The functional loss of one trial, CE(f(θ, x), y), mean over its minibatch."""

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(base, params, (x,)), y)

    return loss


def train_supervised_batched(
    models: Sequence[nn.Module],
    xs: torch.Tensor,
    ys: torch.Tensor,
    steps: int,
    batch: int,
    lr: float | Sequence[float],
    seeds: Sequence[int],
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> TrialsResult:
    """All trials at once: trial i trains models[i] (left unchanged; its weights are copied) by Adam with rate
    lr (or lr[i]) on the cross entropy of (xs[i], ys[i]), minibatches of `batch` from IndexStream(n, batch,
    seeds[i]). The models must be buffer-free (BatchNorm's running statistics would be written under vmap)."""
    models, lrs = _check_trials(models, xs, ys, steps, batch, lr, seeds)
    params, _, base = stack_models(models)
    optimizer = BatchedAdam(params, lrs, betas, eps)
    gradient_and_loss = vmap(grad_and_value(trial_loss(base)))
    streams = [IndexStream(xs.shape[1], batch, seed) for seed in seeds]
    rows = torch.arange(len(models), device=xs.device)[:, None]
    losses = torch.empty(len(models), steps, device=xs.device, dtype=xs.dtype)
    for t in range(steps):
        idx = torch.stack([s.next() for s in streams]).to(xs.device)  # (N, batch)
        grads, loss = gradient_and_loss(params, xs[rows, idx], ys[rows, idx])
        optimizer.step(grads)
        losses[:, t] = loss
    return TrialsResult(params, losses)


def train_supervised_one_at_a_time(
    models: Sequence[nn.Module],
    xs: torch.Tensor,
    ys: torch.Tensor,
    steps: int,
    batch: int,
    lr: float | Sequence[float],
    seeds: Sequence[int],
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> TrialsResult:
    """The reference: the same trials one after the other, each a copy of its model trained by torch.optim.Adam
    (torch's default implementation for the device) in a plain loop; the parameters are stacked at the end."""
    models, lrs = _check_trials(models, xs, ys, steps, batch, lr, seeds)
    losses = torch.empty(len(models), steps, device=xs.device, dtype=xs.dtype)
    trained = []
    for i, model in enumerate(models):
        model = copy.deepcopy(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=lrs[i], betas=betas, eps=eps)
        stream = IndexStream(xs.shape[1], batch, seeds[i])
        for t in range(steps):
            idx = stream.next().to(xs.device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xs[i][idx]), ys[i][idx])
            loss.backward()
            optimizer.step()
            losses[i, t] = loss.detach()
        trained.append(model)
    params, _, _ = stack_models(trained)
    return TrialsResult(params, losses)
