"""What the exact elements of every part share: float64 on one CPU thread, and the helpers their
measurements use (relative errors, log-log slopes, log-uniform draws)."""

from __future__ import annotations

import functools
import math

import torch

F64 = torch.float64
EXACT = 1e-12  # two float64 computations of one quantity agree to this (our choice)
EXACT_CHOICE = {"precision": "float64 on the CPU, one thread; two computations of one quantity agree to 1e-12"}


def log_uniform(gen: torch.Generator, low: float, high: float) -> float:
    return math.exp(math.log(low) + math.log(high / low) * float(torch.rand(1, generator=gen, dtype=F64)))


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def log_slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = torch.log(torch.tensor(x, dtype=F64)), torch.log(torch.tensor(y, dtype=F64))
    return float(((lx - lx.mean()) * (ly - ly.mean())).sum() / (lx - lx.mean()).square().sum())


def one_thread(fn):
    """Run `fn` on one intra-op thread, then restore the count (our choice: these problems have at most a few
    thousand entries per tensor, where threads only add synchronisation; on two busy cores two threads made the
    SGR Eq. 5-6 example 15 times slower)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapped
