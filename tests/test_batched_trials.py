"""Batched trials (training.batched): vmap over stacked parameters equals the trials trained one at a time."""

import copy

import pytest
import torch
from torch import nn

from gradalign.data.shells import N_CLASSES, sample_shells
from gradalign.errors import ConfigError
from gradalign.models.mlp import relu_mlp
from gradalign.training.batched import (
    BatchedAdam,
    stack_models,
    train_supervised_batched,
    train_supervised_one_at_a_time,
    trial_differences,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: a second thread only adds synchronisation

TOL = 1e-5  # on one thread the runs agree to the last bit here; room for a BLAS that sums in another order (~3e-7)


def _models(trials: int, d: int = 6, hidden: int = 16, seed: int = 0) -> list[nn.Module]:
    out = []
    for k in range(trials):
        torch.manual_seed(seed + k)
        out.append(relu_mlp(d, hidden, 4, N_CLASSES))
    return out


def _data(trials: int, n: int = 60, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    data = [sample_shells(n, d, torch.Generator().manual_seed(seed + k)) for k in range(trials)]
    return torch.stack([x for x, _ in data]), torch.stack([y for _, y in data])


def _max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_batched_adam_equals_torch_adam_per_trial():
    models = _models(3)
    params, _, _ = stack_models(models)
    lrs = [1e-3, 3e-3, 1e-2]
    batched = BatchedAdam(params, lrs)
    copies = [copy.deepcopy(m) for m in models]
    optimizers = [torch.optim.Adam(m.parameters(), lr=lr) for m, lr in zip(copies, lrs)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        grads = {k: torch.randn(p.shape, generator=gen) for k, p in params.items()}
        batched.step(grads)
        for i, (model, optimizer) in enumerate(zip(copies, optimizers)):
            for k, p in model.named_parameters():
                p.grad = grads[k][i].clone()
            optimizer.step()
    reference, _, _ = stack_models(copies)
    assert _max_diff(params, reference) < 1e-6
    same_lr, _, _ = stack_models(models)  # one rate: torch's Adam on the stacked tensors is the same update
    torch_on_stacked = torch.optim.Adam(same_lr.values(), lr=3e-3)
    ours = BatchedAdam({k: p.clone() for k, p in same_lr.items()}, 3e-3)
    for _ in range(8):
        grads = {k: torch.randn(p.shape, generator=gen) for k, p in same_lr.items()}
        for k, p in same_lr.items():
            p.grad = grads[k].clone()
        torch_on_stacked.step()
        ours.step(grads)
    assert _max_diff(ours.params, same_lr) < 1e-6
    assert _max_diff(ours.params, stack_models(models)[0]) > 1e-3  # it moved, and the models were left alone


def test_batched_training_equals_one_at_a_time():
    models = _models(5)
    xs, ys = _data(5)
    seeds = [3, 1, 4, 1, 5]  # two trials share a stream seed but not data or weights
    a = train_supervised_batched(models, xs, ys, 30, 16, 1e-3, seeds)
    b = train_supervised_one_at_a_time(models, xs, ys, 30, 16, 1e-3, seeds)
    assert a.losses.shape == b.losses.shape == (5, 30)
    assert (a.losses - b.losses).abs().max() < TOL
    assert _max_diff(a.params, b.params) < TOL
    assert a.losses[:, -5:].mean() < a.losses[:, :5].mean()  # it trains
    assert (a.losses[0] - a.losses[1]).abs().max() > 1e-3  # the trials differ from each other


def test_a_different_trial_is_detected():
    models = _models(4)
    xs, ys = _data(4)
    seeds = [0, 1, 2, 3]
    reference = train_supervised_one_at_a_time(models, xs, ys, 30, 16, 1e-3, seeds)
    other_lr = train_supervised_batched(models, xs, ys, 30, 16, [1e-3, 1e-3, 2e-3, 1e-3], seeds)
    gap = trial_differences(other_lr, reference)
    assert gap[2] > 100 * TOL
    assert gap[[0, 1, 3]].max() < TOL

    perturbed = copy.deepcopy(models)
    with torch.no_grad():
        perturbed[1][0].weight[0, 0] += 1e-3
    moved = train_supervised_batched(perturbed, xs, ys, 30, 16, 1e-3, seeds)
    gap = trial_differences(moved, reference)
    assert gap[1] > 10 * TOL  # the 1e-3 nudge persists
    assert gap[[0, 2, 3]].max() < TOL
    moved_seed = train_supervised_batched(models, xs, ys, 30, 16, 1e-3, [0, 1, 2, 4])
    assert (moved_seed.losses - reference.losses).abs().max() > 100 * TOL


def test_bad_input_is_refused_before_compute():
    xs, ys = _data(3)
    seeds = [0, 1, 2]
    mixed = _models(2) + [nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, N_CLASSES))]
    with pytest.raises(ConfigError, match="one architecture"):
        train_supervised_batched(mixed, xs, ys, 5, 8, 1e-3, seeds)
    activation = _models(2) + [relu_mlp(6, 16, 4, N_CLASSES)]
    activation[2][1] = nn.Tanh()  # same tensors, another module tree
    with pytest.raises(ConfigError, match="one architecture"):
        stack_models(activation)
    with pytest.raises(ConfigError, match="3 models but xs holds 2 trials"):
        train_supervised_batched(_models(3), xs[:2], ys[:2], 5, 8, 1e-3, seeds)
    with pytest.raises(ConfigError, match="ys 2"):
        train_supervised_batched(_models(3), xs, ys[:2], 5, 8, 1e-3, seeds)
    with pytest.raises(ConfigError, match="2 seeds"):
        train_supervised_one_at_a_time(_models(3), xs, ys, 5, 8, 1e-3, seeds[:2])
    with pytest.raises(ConfigError, match="3 trials but 2 learning rates"):
        train_supervised_batched(_models(3), xs, ys, 5, 8, [1e-3, 1e-3], seeds)
    with pytest.raises(ConfigError, match="class indices"):
        train_supervised_batched(_models(3), xs, ys.float(), 5, 8, 1e-3, seeds)
    with pytest.raises(ConfigError, match="steps must be"):
        train_supervised_batched(_models(3), xs, ys, 0, 8, 1e-3, seeds)
    with_buffers = [nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.Linear(4, N_CLASSES)) for _ in range(3)]
    with pytest.raises(ConfigError, match="buffers"):
        train_supervised_batched(with_buffers, xs, ys, 5, 8, 1e-3, seeds)


def test_benchmark_runs_at_a_tiny_size():
    from gradalign.benchmarks.batched_trials import measure_batched_trials

    out = measure_batched_trials(trials=3, steps=10, repeats=1, n=64, d=8, batch=16)
    assert out["batched_over_one_at_a_time"] > 0
    assert out["max_abs_param_diff"] < TOL
    assert out["max_abs_loss_diff"] < TOL
    assert out["max_abs_param_diff_one_thread"] < TOL and out["order_sensitivity"] < TOL
    assert out["trials"] == 3 and out["steps"] == 10 and out["device"] == "cpu"
