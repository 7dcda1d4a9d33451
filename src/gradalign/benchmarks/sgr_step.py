"""What SGR's second-order term costs in time (Yang et al. 2024, Eq. 5; App. D): one training step of SGR against
one layer-wise step (the same modules, heads, order and optimizers, without the term) and one global-BP step, on
ResNet-32 at the run's batch of random images.

Each timed call is a whole training step (forward, local losses, backward, optimizer step of every module).
Times: the median over `repeats` after one warm-up call each, the methods interleaved so that machine load
drifts hit them alike. Every method starts from the same initial weights; their values drift apart as they train
on the fixed batch, which does not change the cost of a step.
"""

from __future__ import annotations

import copy
import statistics

import torch
from torch import nn

from gradalign.benchmarks.timing import timed

METHODS = ("global_bp", "layerwise", "sgr")


def _setup(model, method: str, modules: int, classes: int, head: str):
    from gradalign.methods.local import LocalSettings
    from gradalign.models.local_heads import local_head
    from gradalign.models.resnet_cifar import module_channels, split_into_modules

    K = 1 if method == "global_bp" else modules
    model = copy.deepcopy(model)
    parts = list(split_into_modules(model, K))
    heads = [*(local_head(head, c, classes) for c in module_channels(model, K)[:-1]), model.head]
    heads = [h.to(next(model.parameters()).device) for h in heads]
    optimizers = [
        torch.optim.SGD([*p.parameters(), *h.parameters()], lr=0.01, momentum=0.9, weight_decay=5e-4)
        for p, h in zip(parts, heads)
    ]
    return parts, heads, optimizers, LocalSettings(method=method, modules=K)


def measure_sgr_step(
    device="cpu", modules: int = 16, batch: int = 128, size: int = 32, channels: int = 3, repeats: int = 5
) -> dict:
    from gradalign.methods.local import LOCAL_METHODS
    from gradalign.models.resnet_cifar import resnet32

    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model: nn.Module = resnet32(10, channels).to(device).train()
    x = torch.randn(batch, channels, size, size, generator=gen).to(device)
    y = torch.randint(10, (batch,), generator=gen).to(device)
    steps = {}
    for method in METHODS:
        parts, heads, optimizers, settings = _setup(model, method, modules, 10, "belilovsky")
        steps[method] = lambda f=LOCAL_METHODS[method], a=(parts, heads, optimizers, x, y, settings): f(*a)
    for call in steps.values():  # warm-up
        call()
    times = {method: [] for method in METHODS}
    for _ in range(repeats):
        for method, call in steps.items():
            times[method].append(timed(call, device))
    seconds = {method: statistics.median(t) for method, t in times.items()}
    return {
        "seconds": seconds,
        "sgr_over_layerwise": seconds["sgr"] / seconds["layerwise"],
        "layerwise_over_global_bp": seconds["layerwise"] / seconds["global_bp"],
        "setting": {"model": "ResNet-32", "K": modules, "batch": batch, "input": [channels, size, size]},
        "repeats": repeats,
        "device": str(device),
    }
