"""What batching the trials of a study buys: the supervised trials of LGA's shells study (§3.2) trained all at
once (`training.batched`, vmap over stacked parameters) against one after the other, on the same data, initial
weights, minibatches and learning rate.

Trial k is the supervised baseline of the study's trial k with its evaluations left out, and torch's default
Adam in place of the fused one (`params.adam`; the same update up to the last bit): the labeled split of
make_shells(d, n, ..., seed + k) (`sample_shells` from a generator seeded with seed + k draws it first), the
4-layer ReLU MLP of 128 units initialised after torch.manual_seed(seed + k), Adam (lr 1e-3) on minibatches of
128 from IndexStream(n, 128, seed + k). Times: the median over `repeats` whole runs after one short warm-up run
of each (the first vmap and the first optimizer step load code), the two interleaved so that machine load
drifts hit them alike. Both do trials x steps trial-steps, so the throughput ratio is the inverse time ratio.

Equality. The two runs compute each trial's gradient with matrix products that may sum in different orders, and
training amplifies last-bit differences: over a few hundred steps some trials drift apart by ~1e-2 (a ReLU that
flips on one point changes the next gradients). So on a CPU the equality is also checked where the orders agree,
both runs on one thread (in our runs, torch 2.13 on a CPU, they then agree to the last bit), and
`order_sensitivity` says how far the one-at-a-time run itself moves when only its thread count changes: the
yardstick for `max_abs_param_diff`.
"""

from __future__ import annotations

import contextlib
import statistics

import torch

from gradalign.benchmarks.timing import timed
from gradalign.data.shells import N_CLASSES, sample_shells
from gradalign.models.mlp import relu_mlp
from gradalign.training.batched import (
    train_supervised_batched,
    train_supervised_one_at_a_time,
    trial_differences,
)

HIDDEN, LAYERS = 128, 4  # the study's network (§3.2)
WARMUP_STEPS = 3


def _shells_trials(trials: int, n: int, d: int, seed: int, device: torch.device):
    """(models, xs (trials, n, d), ys (trials, n), seeds): trial k as the study's trial k draws it."""
    seeds = [seed + k for k in range(trials)]
    data = [sample_shells(n, d, torch.Generator().manual_seed(s)) for s in seeds]
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(relu_mlp(d, HIDDEN, LAYERS, N_CLASSES).to(device))
    xs = torch.stack([x for x, _ in data]).to(device)
    ys = torch.stack([y for _, y in data]).to(device)
    return models, xs, ys, seeds


@contextlib.contextmanager
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def measure_batched_trials(
    trials: int = 25,
    steps: int = 300,
    device="cpu",
    repeats: int = 3,
    n: int = 5000,
    d: int = 50,
    batch: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> dict:
    """Median seconds of a batched and a one-at-a-time run, their throughput ratio, and how far apart their final
    parameters and loss curves are (see the module docstring)."""
    device = torch.device(device)
    models, xs, ys, seeds = _shells_trials(trials, n, d, seed, device)
    runs = {
        "batched": lambda k: train_supervised_batched(models, xs, ys, k, batch, lr, seeds),
        "one_at_a_time": lambda k: train_supervised_one_at_a_time(models, xs, ys, k, batch, lr, seeds),
    }
    for run in runs.values():
        run(min(steps, WARMUP_STEPS))
    times = {name: [] for name in runs}
    results = {}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(timed(lambda: results.update({name: run(steps)}), device))
    seconds = {name: statistics.median(ts) for name, ts in times.items()}
    a, b = results["batched"], results["one_at_a_time"]
    one_thread = {}
    if device.type == "cpu":
        with _one_thread():
            a1, b1 = runs["batched"](steps), runs["one_at_a_time"](steps)
        one_thread = {
            "max_abs_param_diff_one_thread": trial_differences(a1, b1).max().item(),
            "max_abs_loss_diff_one_thread": (a1.losses - b1.losses).abs().max().item(),
            "order_sensitivity": trial_differences(b, b1).max().item(),
        }
    p = sum(t[0].numel() for t in a.params.values())
    return {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": f"ReLU MLP, {LAYERS} layers of {HIDDEN} units, {p} parameters per trial",
        "trials": trials,
        "steps": steps,
        "batch": batch,
        "n": n,
        "d": d,
        "lr": lr,
        "repeats": repeats,
        "seconds": {name: round(t, 4) for name, t in seconds.items()},
        "trial_steps_per_second": {name: round(trials * steps / t, 1) for name, t in seconds.items()},
        "batched_over_one_at_a_time": round(seconds["one_at_a_time"] / seconds["batched"], 3),
        "max_abs_param_diff": trial_differences(a, b).max().item(),
        "max_abs_loss_diff": (a.losses - b.losses).abs().max().item(),
        "max_abs_param": max(t.abs().max().item() for t in b.params.values()),
        **one_thread,
    }
