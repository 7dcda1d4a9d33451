"""The forward signal and the gradient of a Table 7 VGG at initialisation, by the size of the maps its convs see.

He et al. (2015)'s fan-in init, Var(w) = 2 / (9 c_in) for a 3×3 conv, keeps E[x²] through conv → ReLU because
each output sums 9 c_in inputs: E[y²] = 9 c_in · Var(w) · E[x²] = 2 E[x²], and the ReLU halves it. A zero-padded
3×3 conv on a 1×1 map sums only its centre tap, c_in inputs: E[y²] = (2/9) E[x²], so each conv → ReLU unit
multiplies the signal's RMS by √(1/9) = 1/3 (`ONE_BY_ONE_GAIN`, in expectation). On 2×2 and 3×3 maps a part of
the taps read the padding, and the gain lies between (measured here, not derived). The gradient reaching each
conv shrinks with the signal above it. Where `models.vgg_deep`'s max-pools bring 28×28 Fashion-MNIST images to
14, 7, 3, 1 and 1, the last stage's (d − 2)/5 convs run on 1×1 maps; CIFAR's 32×32 images end on 2×2 maps instead
(a stage at 2×2, one max-pool to 1×1 after it). So the same VGG depth loses far more of its signal at
initialisation on the substitute data set than on the paper's: an explanation of a deep VGG left at chance
without BatchNorm (`sgr.tab7nobn`) that is not the depth the claim is about.

`signal_at_init` measures it on standard-normal images (the inputs are normalised to unit variance): the RMS of the
activations after every conv unit, grouped by the size of the map the unit's conv saw, and each conv weight's
gradient norm over its norm after one cross-entropy backward pass, which is the fraction of its norm an SGD step
at rate 1 moves it (before momentum). Nothing is trained.
"""

from __future__ import annotations

import math

import torch

ONE_BY_ONE_GAIN = 1 / 3  # RMS gain of conv3×3 (zero padding, fan-in He init) → ReLU on a 1×1 map: √(2/9 · 1/2)


def signal_at_init(
    depth: int,
    image_size: int,
    width: float,
    init: str = "fan_in",
    batch_norm: bool = False,
    seed: int = 0,
    batch: int = 16,
    in_channels: int = 1,
    classes: int = 10,
) -> dict:
    """{"gain_by_map": {map size: geometric-mean RMS gain of the units whose conv saw that size}, "units_by_map":
    {size: count}, "final_rms": the RMS entering the classifier, "grad_ratio": {"min", "median", "max"} of ‖∇w‖/‖w‖
    over the convs}, for one seeded VGG-`depth` (`models.vgg_deep`) in train mode (BN, where there is one, uses the
    batch's statistics, as in training) on `batch` standard-normal images of `image_size` pixels."""
    from gradalign.models.vgg_deep import vgg_deep

    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = vgg_deep(depth, classes, in_channels, width, batch_norm, init).train()
    x = torch.randn(batch, in_channels, image_size, image_size, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    rms = lambda t: float(t.detach().square().mean().sqrt())  # noqa: E731
    gains: dict[int, list[float]] = {}
    h = x
    for unit in model.layers:
        seen, before = h.shape[-1], rms(h)
        h = unit(h)
        gains.setdefault(seen, []).append(rms(h) / before if before > 0 else 0.0)
    torch.nn.functional.cross_entropy(model.head(h), y).backward()
    ratios = sorted(
        float(m.weight.grad.norm() / m.weight.detach().norm())
        for m in model.modules()
        if isinstance(m, torch.nn.Conv2d)
    )
    geometric = lambda v: math.exp(sum(math.log(g) for g in v) / len(v)) if all(g > 0 for g in v) else 0.0  # noqa: E731
    return {
        "gain_by_map": {size: geometric(v) for size, v in gains.items()},
        "units_by_map": {size: len(v) for size, v in gains.items()},
        "final_rms": rms(h),
        "grad_ratio": {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]},
    }
