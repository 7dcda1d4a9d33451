"""Summaries over seeds that every part's comparisons share: mean, sample std and count; the difference of two
means with its standard error."""

from __future__ import annotations

import math


def stats(values: list[float]) -> dict:
    """Mean, sample std (0 for one value) and count."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "n": n}


def difference(a: dict, b: dict) -> dict:
    """mean(a) − mean(b) and its standard error sqrt(s_a²/n_a + s_b²/n_b), rounded for the page."""
    diff = a["mean"] - b["mean"]
    se = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
    return {"a": round(a["mean"], 2), "b": round(b["mean"], 2), "diff": round(diff, 3), "se": round(se, 3)}
