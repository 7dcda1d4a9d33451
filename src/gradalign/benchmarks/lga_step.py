"""What one LGA step costs: against one Pseudo-Label step, and the JVP w-gradient against its
double-backward reference (Algorithm 1's classification form, `methods.lga`), on the small CNN.

The two steps timed are the ones the benchmark tables train with: `training.ssl.SSLRun.step` of the
methods `lga` and `pseudo_label`, on fixed batches with augmentation switched off. Times: median over
`repeats` after `warmup` calls, the four calls interleaved so that machine load drifts hit them alike.
"""

from __future__ import annotations

import statistics
import warnings

import torch

from gradalign.benchmarks.timing import peak_bytes, timed
from gradalign.data.ssl_data import SSLData
from gradalign.methods.lga import double_backward_label_gradient, jvp_label_gradient, unlabeled_gradient
from gradalign.methods.lga_ssl import LGABenchmarkSettings
from gradalign.methods.pseudo_label import PseudoLabelSettings
from gradalign.models.small_cnn import SmallCNN
from gradalign.params import flat
from gradalign.training.protocols import OliverProtocol
from gradalign.training.ssl import SSLRun

warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")  # torch's JVP decompositions


def _fixed_batches(batch_size: int, n_unlabeled: int, image: int, device) -> SSLData:
    """Random images for timing: one labeled batch (also validation and test) and an unlabeled pool of
    `n_unlabeled` rows (w has one row per image) that are views of one image, so they cost no memory."""
    x = torch.randn(batch_size, 3, image, image, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    pool = torch.randn(1, 3, image, image, device=device).expand(n_unlabeled, 3, image, image)
    return SSLData(x, y, pool, x, y, x, y, augment=None, num_classes=10)


def measure_lga_cost(
    device="cpu",
    width: int = 32,
    batch_size: int = 50,
    n_unlabeled: int = 50_000,
    image: int = 32,
    warmup: int = 5,
    repeats: int = 30,
) -> dict:
    """Median times, peak memory and their ratios, measured in one run (see the module docstring)."""
    device = torch.device(device)
    torch.manual_seed(0)
    data = _fixed_batches(batch_size, n_unlabeled, image, device)
    protocol = OliverProtocol(steps=10**9, batch_labeled=batch_size, batch_unlabeled=batch_size)
    no_augmentation = lambda x, generator: x  # noqa: E731
    runs = {
        name: SSLRun(
            name, SmallCNN(10, 3, width).to(device).train(), settings, protocol, data, 0, augment=no_augmentation
        )
        for name, settings in (("lga", LGABenchmarkSettings()), ("pseudo_label", PseudoLabelSettings()))
    }
    lga_model = runs["lga"].model
    counter = {"lga": 0, "pseudo_label": 0}

    def step(name):
        counter[name] += 1
        runs[name].step(counter[name])

    # The w-gradient alone, both ways, from the same θ, y_u, EMA(g_ℓ) and normalizer.
    x_u = torch.randn(batch_size, 3, image, image, device=device)
    y_u = torch.softmax(torch.randn(batch_size, 10, device=device), -1)
    p = sum(q.numel() for q in lga_model.parameters())
    target = 1e-2 * torch.randn(p, device=device)
    normalizer = 1.0 / (1e-3 + torch.rand(p, device=device))

    def run_jvp():
        _, g_u, snapshot = unlabeled_gradient(lga_model, x_u, y_u, "classification")
        return jvp_label_gradient(lga_model, x_u, normalizer * (target - flat(g_u)), "classification", snapshot)

    def run_double_backward():
        return double_backward_label_gradient(lga_model, x_u, y_u, target, normalizer, "classification")

    gap = (run_jvp() - run_double_backward()).abs().max().item()
    calls = {
        "lga": lambda: step("lga"),
        "pl": lambda: step("pseudo_label"),
        "jvp": run_jvp,
        "double_backward": run_double_backward,
    }
    times = {name: [] for name in calls}
    for i in range(warmup + repeats):
        for name, fn in calls.items():
            t = timed(fn, device)
            if i >= warmup:
                times[name].append(t)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    memory = {name: peak_bytes(calls[name], device) for name in ("jvp", "double_backward")}
    return {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": f"SmallCNN, widths {width}/{2 * width}/{4 * width}, 3 conv + BN, {p} parameters",
        "input": [3, image, image],
        "batch_labeled": batch_size,
        "batch_unlabeled": batch_size,
        "n_unlabeled": n_unlabeled,
        "repeats": repeats,
        "warmup": warmup,
        "median_ms": {name: round(1e3 * t, 3) for name, t in median.items()},
        "lga_over_pseudo_label": round(median["lga"] / median["pl"], 3),
        "jvp_over_double_backward_time": round(median["jvp"] / median["double_backward"], 3),
        "peak_bytes": memory,
        "jvp_over_double_backward_memory": round(memory["jvp"] / memory["double_backward"], 3),
        "memory_method": "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "torch.profiler profile_memory: running sum of [memory] events",
        "max_abs_gap_jvp_vs_double_backward": gap,
    }
