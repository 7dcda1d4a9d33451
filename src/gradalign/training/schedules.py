"""Schedules shared by the protocols: ramps, step decays, warm-up + cosine, the BYOL target rate."""

from __future__ import annotations

import math


def sigmoid_rampup(step: int, rampup_steps: int) -> float:
    """exp(-5 (1 - t/T)^2) for t < T, else 1 (Laine & Aila; Oliver et al.'s consistency ramp-up)."""
    if step >= rampup_steps:
        return 1.0
    return math.exp(-5.0 * (1.0 - step / rampup_steps) ** 2)


def step_decay(step: int, total_steps: int, at: float, factor: float) -> float:
    """`factor` once `step` passes the fraction `at` of the run, else 1 (Oliver et al.: x 0.2 after 80%)."""
    return factor if step > at * total_steps else 1.0


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, peak: float) -> float:
    """Linear warm-up to `peak` over `warmup_steps` (0-based step), then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * (1 + math.cos(math.pi * (step - warmup_steps) / (total_steps - warmup_steps))) / 2


def cosine_ema_rate(step: int, total_steps: int, base: float) -> float:
    """tau_k = 1 - (1 - base)(cos(pi k / K) + 1) / 2: `base` at k = 0, 1 at k = K (BYOL's target rate)."""
    return 1 - (1 - base) * (math.cos(math.pi * step / total_steps) + 1) / 2
