"""What DirectPred's predictor costs: the running correlation, its eigendecomposition and W_P, per projector width."""

from __future__ import annotations

import time

import torch

from gradalign.methods.directpred import DirectPredictor


def directpred_cost(dims, step_seconds: float, device, repeats: int = 20) -> dict:
    """Seconds per DirectPred update (running correlation, eigendecomposition, W_P) at each projector
    width, and its ratio to one measured training step. Median of `repeats` after a warm-up."""
    out = {}
    for d in dims:
        pred = DirectPredictor(d, device=device)
        z = torch.randn(512, d, device=device)
        times = []
        for i in range(repeats + 3):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            pred.update(z)
            pred.matrix()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        sec = sorted(times[3:])[repeats // 2]
        out[str(d)] = {"seconds": sec, "ratio_to_step": sec / step_seconds}
    return out
