"""The CPU fast path per network: one training step in fp32 against the same step under bf16 autocast (with
channels-last for convolutional networks), for the network and batch of each `cpu` experiment.

A `cpu` preset switches the fast path on (`training.fast.FastPath`, a config field in its run keys) only where
this benchmark shows a step at least `PAYS` times faster (issue "Runs that accumulate", item 5): bf16 changes
the computation, so it must buy real time to be worth a result that differs from fp32 by rounding. Whether
the two agree within seed noise is tested at `smoke` (tests/test_fast_path_agreement.py).

A step: forward, cross entropy, backward, an SGD step with momentum, on random 28 × 28 images (time does not
depend on content). Each network's two variants are timed interleaved within each repeat, so that machine load
hits them alike; a variant's time is the median over `repeats` of `steps` steps, after `warmup` steps. The
machine's load average is recorded beside the ratios: measured while other processes compete for the cores, the
ratios move by tens of percent (small CNN 2.3 and 1.5 in two runs under a load of 4 on two cores), so the
adoption rule reads a measurement made on an otherwise idle machine.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from gradalign.benchmarks.timing import timed
from gradalign.training.fast import FastPath, autocast, prepare_model

PAYS = 1.5  # fp32 time / bf16 time at which a cpu preset uses the fast path (the threshold)


def _vgg11(width: float) -> nn.Module:
    from gradalign.models.vgg import VGG11

    backbone = VGG11(1, width)
    return nn.Sequential(backbone, nn.Linear(backbone.feature_dim, 10))


def networks() -> dict[str, tuple]:
    """name -> (model factory, batch, convolutional, the experiments whose cpu preset trains it)."""
    from gradalign.models.conv_large import ConvLarge
    from gradalign.models.plain_mlp import PlainMLP
    from gradalign.models.resnet_cifar import resnet32
    from gradalign.models.shake_shake import ShakeShake26
    from gradalign.models.small_cnn import SmallCNN

    return {
        "small_cnn_w16": (lambda: SmallCNN(10, 1, 16), 100, True, "lga.fig5-7, lga.tab1"),
        "small_cnn_w32": (lambda: SmallCNN(10, 1, 32), 50, True, "the supervised reference"),
        "conv_large_x0.125": (lambda: ConvLarge(10, 1, 0.125), 64, True, "metagrad.tab1, tab4, fig2, fig3"),
        "shake_shake26_x0.125": (lambda: ShakeShake26(10, 1, 0.125), 64, True, "metagrad.tab2"),
        "resnet32_x0.25": (lambda: resnet32(10, 1, 0.25), 128, True, "sgr.tab3, tab6, tab7, fig2-4"),
        "plainnet32_x0.25": (lambda: resnet32(10, 1, 0.25, plain=True), 128, True, "sgr.tab3, tab6"),
        "vgg11_x0.25": (lambda: _vgg11(0.25), 256, True, "isoloss.tab1"),
        "mlp_1024": (lambda: PlainMLP(4, 10, 784, 1.0), 128, False, "sgr.tab4"),
    }


def _step_fn(model: nn.Module, fast: FastPath, x: torch.Tensor, y: torch.Tensor, device: torch.device):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def steps(k: int) -> None:
        for _ in range(k):
            with autocast(fast, device):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return steps


def measure_fast_path(
    device="cpu", names: tuple[str, ...] | None = None, steps: int = 3, warmup: int = 2, repeats: int = 3, scale=1.0
) -> dict:
    """Seconds per step of each network in fp32 and on the fast path, their ratio, and whether it pays.
    `scale` multiplies every batch (quick runs)."""
    import os

    device = torch.device(device)
    load_before = os.getloadavg()[0]
    table = networks()
    out, ratios = {}, {}
    for name in names or tuple(table):
        factory, batch, conv, used_by = table[name]
        batch = max(2, int(batch * scale))
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(batch, 1, 28, 28, generator=generator).to(device)
        y = torch.randint(0, 10, (batch,), generator=generator).to(device)
        variants = {"fp32": FastPath(), "bf16": FastPath(bf16=True, channels_last=conv)}
        runners = {}
        for label, fast in variants.items():
            torch.manual_seed(0)
            model = prepare_model(factory().to(device).train(), fast)
            xi = x.contiguous(memory_format=torch.channels_last) if fast.channels_last else x
            runners[label] = _step_fn(model, fast, xi, y, device)
            timed(lambda r=runners[label]: r(warmup), device)
        seconds = {label: [] for label in runners}
        for _ in range(repeats):
            for label, run in runners.items():
                seconds[label].append(timed(lambda r=run: r(steps), device) / steps)
        per_step = {label: statistics.median(s) for label, s in seconds.items()}
        ratio = per_step["fp32"] / per_step["bf16"]
        ratios[f"{name}_fp32_over_bf16"] = ratio
        out[name] = {
            "batch": batch,
            "used_by": used_by,
            "fast_path": variants["bf16"].text(),
            "seconds_per_step": {k: round(v, 5) for k, v in per_step.items()},
            "fp32_over_bf16": round(ratio, 3),
            "pays": ratio >= PAYS,
        }
    return {
        "by_network": out,
        **ratios,
        "pays": sorted(name for name, row in out.items() if row["pays"]),
        "threshold": PAYS,
        "sizes": {"steps": steps, "warmup": warmup, "repeats": repeats, "image": 28, "scale": scale},
        # other work on the machine slows the two paths alike only roughly: a ratio measured under load is noisy
        "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }
