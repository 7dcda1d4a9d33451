"""The synthetic "shells" data set of LGA §3.2 (Eq. 14).

A point is x = v·s with v uniform on the unit sphere of R^d, a class c ~ Discrete(1..5) and

    s ~ c − 1 + Unif[0.75, 1]                  if c = 1
                Unif[0, 0.25]                  if c = 5
                Unif([0, 0.25] ∪ [0.75, 1])    if c ∈ {2, 3, 4}   (each half with probability 1/2)

so the classes are concentric shells whose boundaries at radii 1..4 pass through dense regions.
Labels are returned as c − 1 ∈ {0, …, 4}. The paper uses d = 50, n = 5000 labeled, 5n unlabeled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.errors import ConfigError

N_CLASSES = 5


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {value!r}")


def sample_shells(
    n: int, d: int, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw n points of Eq. 14 on the CPU: (x (n, d), labels (n,) int64 in 0..4, i.e. c − 1)."""
    _check_positive("n", n, minimum=0)
    _check_positive("d", d)
    v = torch.randn(n, d, generator=generator, dtype=torch.float64)
    v = v / v.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    labels = torch.randint(0, N_CLASSES, (n,), generator=generator)
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    outer_half = torch.rand(n, generator=generator, dtype=torch.float64) < 0.5
    outer_half = torch.where(labels == 0, True, torch.where(labels == N_CLASSES - 1, False, outer_half))
    s = labels.to(torch.float64) + 0.25 * u + 0.75 * outer_half.to(torch.float64)
    return (v * s[:, None]).to(dtype), labels


@dataclass(frozen=True)
class ShellsData:
    x_labeled: torch.Tensor
    y_labeled: torch.Tensor
    x_unlabeled: torch.Tensor
    y_unlabeled: torch.Tensor  # true labels, for diagnostics only
    x_test: torch.Tensor
    y_test: torch.Tensor
    # a validation split drawn like the others (after them, so the earlier splits do not move): for tuning and
    # early stopping, as the paper tuned its methods (§4); empty unless asked for
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None


def make_shells(
    d: int,
    n_labeled: int,
    n_unlabeled: int,
    n_test: int,
    seed: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    n_val: int = 0,
) -> ShellsData:
    """Labeled, unlabeled, test and validation splits drawn in that order from one CPU generator seeded with
    `seed` (the validation split last, so asking for it leaves the others as they were)."""
    _check_positive("d", d)
    _check_positive("n_labeled", n_labeled)
    _check_positive("n_unlabeled", n_unlabeled, minimum=0)
    _check_positive("n_test", n_test)
    _check_positive("n_val", n_val, minimum=0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"seed must be an integer; got {seed!r}")
    gen = torch.Generator().manual_seed(seed)
    splits = [sample_shells(n, d, gen, dtype) for n in (n_labeled, n_unlabeled, n_test, n_val)]
    (xl, yl), (xu, yu), (xt, yt), (xv, yv) = [(x.to(device), y.to(device)) for x, y in splits]
    return ShellsData(xl, yl, xu, yu, xt, yt, xv, yv)
