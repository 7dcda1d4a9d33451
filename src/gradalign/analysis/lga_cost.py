"""What one LGA step costs: against one Pseudo-Label step, and the JVP w-gradient against its
double-backward reference (Algorithm 1's classification form, `methods.lga`), on a small CNN with BatchNorm.

Times: median over `repeats` after `warmup` calls, the four calls interleaved so that machine load
drifts hit them alike. Peak memory above the starting point: torch.cuda.max_memory_allocated on
CUDA; on CPU, the running sum of the allocation/free events recorded by torch.profiler
(profile_memory=True), read back from its Chrome trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
import warnings

import torch
import torch.nn as nn

from gradalign.methods.lga import (LGASettings, double_backward_label_gradient, flat, init_lga,
                                   jvp_label_gradient, lga_step, unlabeled_gradient)
from gradalign.methods.pseudo_label import PseudoLabelSettings, init_pseudo_label, pseudo_label_step

warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")  # torch's JVP decompositions


def small_cnn(width: int, classes: int = 10) -> nn.Module:
    """Three conv stages (width, 2·width, 4·width), BN + leaky ReLU 0.1, max pools, global pool, linear."""
    layers, c_in = [], 3
    for c_out in (width, 2 * width, 4 * width):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.LeakyReLU(0.1),
                   nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.LeakyReLU(0.1),
                   nn.MaxPool2d(2)]
        c_in = c_out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes))


def timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ start/stop lines), restoring it afterwards."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_bytes(fn, device: torch.device) -> int:
    """Peak bytes allocated while `fn` runs, above what was allocated when it started."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e["ts"]):
        if event["args"].get("Device Type", 0) == 0:  # CPU
            live += event["args"]["Bytes"]
            peak = max(peak, live)
    return peak


def measure_lga_cost(device="cpu", width: int = 32, batch_size: int = 50, n_unlabeled: int = 50_000,
                     image: int = 32, warmup: int = 5, repeats: int = 30) -> dict:
    """Median times, peak memory and their ratios, measured in one run (see the module docstring)."""
    device = torch.device(device)
    torch.manual_seed(0)

    def images(n):
        return torch.randn(n, 3, image, image, device=device)

    x_l, y_l, x_u = images(batch_size), torch.randint(0, 10, (batch_size,), device=device), images(batch_size)
    indices = torch.randint(0, n_unlabeled, (batch_size,))
    lga_model, pl_model = small_cnn(width).to(device).train(), small_cnn(width).to(device).train()
    lga_state = init_lga(lga_model, n_unlabeled, 10, LGASettings(check_every=0))
    pl_state = init_pseudo_label(pl_model, PseudoLabelSettings(check_every=0))

    def run_lga():
        lga_step(lga_model, lga_state, x_l, y_l, x_u, indices)

    def run_pl():
        pseudo_label_step(pl_model, pl_state, x_l, y_l, x_u, indices)

    # The w-gradient alone, both ways, from the same θ, y_u, EMA(g_ℓ) and normalizer.
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
    times = {name: [] for name in ("lga", "pl", "jvp", "double_backward")}
    calls = {"lga": run_lga, "pl": run_pl, "jvp": run_jvp, "double_backward": run_double_backward}
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
        "model": f"small CNN, widths {width}/{2 * width}/{4 * width}, 6 conv + BN, {p} parameters",
        "input": [3, image, image],
        "batch_labeled": batch_size, "batch_unlabeled": batch_size, "n_unlabeled": n_unlabeled,
        "repeats": repeats, "warmup": warmup,
        "median_ms": {name: round(1e3 * t, 3) for name, t in median.items()},
        "lga_over_pseudo_label": round(median["lga"] / median["pl"], 3),
        "jvp_over_double_backward_time": round(median["jvp"] / median["double_backward"], 3),
        "peak_bytes": memory,
        "jvp_over_double_backward_memory": round(memory["jvp"] / memory["double_backward"], 3),
        "memory_method": "torch.cuda.max_memory_allocated" if device.type == "cuda"
        else "torch.profiler profile_memory: running sum of [memory] events",
        "max_abs_gap_jvp_vs_double_backward": gap,
    }
