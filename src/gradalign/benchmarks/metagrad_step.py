"""What the meta pseudo-label step costs (Zhang et al. 2020, Algorithm 2): the code's finite difference (two
extra forward passes at θ ± εg) against its exact limit by forward mode (one pass with tangents), and the exact
meta-gradient of Algorithm 1 (a gradient through a gradient) against both; with each one's error against the
exact meta-gradient. Conv-Large in eval mode on fixed random batches, float32.

Each timed call produces the pseudo-label gradient of one step from scratch, labeled gradient included. Times:
median over `repeats` after one warm-up call, the three calls interleaved so that machine load drifts hit them
alike. The exact form is rescaled by B^u/α to the code's units ((f₊ − f₋)/ε ≈ 2 J_θf·g).
"""

from __future__ import annotations

import statistics

import torch

from gradalign.benchmarks.timing import timed
from gradalign.methods.metagrad import classifier, coded_pseudo_labels, exact_meta_gradient
from gradalign.models.conv_large import ConvLarge


def measure_meta_step(
    device="cpu", width: float = 0.25, batch: int = 32, size: int = 28, channels: int = 1, repeats: int = 5
) -> dict:
    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = ConvLarge(10, channels, width).to(device).eval()
    shape = (batch, channels, size, size)
    x_l, x_u = torch.randn(shape, generator=gen).to(device), torch.randn(shape, generator=gen).to(device)
    y_l = torch.nn.functional.one_hot(torch.randint(10, (batch,), generator=gen), 10).float().to(device)
    f = classifier(model)
    params = {k: v.detach() for k, v in model.named_parameters()}
    lr = 0.1
    calls = {
        "finite_difference": lambda: coded_pseudo_labels(f, params, x_l, y_l, x_u, lr, form="fd")[1],
        "jvp": lambda: coded_pseudo_labels(f, params, x_l, y_l, x_u, lr, form="jvp")[1],
        "exact": lambda: exact_meta_gradient(f, params, x_l, y_l, x_u, lr) * (batch / lr),
    }
    values = {name: call() for name, call in calls.items()}  # also the warm-up
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(timed(call, device))
    seconds = {name: statistics.median(t) for name, t in times.items()}
    exact = values["exact"]

    def error(v):
        return float((v - exact).norm() / exact.norm())

    return {
        "seconds": seconds,
        "jvp_over_fd": seconds["jvp"] / seconds["finite_difference"],
        "exact_over_fd": seconds["exact"] / seconds["finite_difference"],
        "error_fd": error(values["finite_difference"]),
        "error_jvp": error(values["jvp"]),
        "setting": {"model": f"Conv-Large x{width}", "batch": f"{batch} + {batch}", "input": list(shape[1:])},
        "repeats": repeats,
        "device": str(device),
    }
