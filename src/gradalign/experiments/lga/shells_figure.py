"""LGA part, §3.2, Figure 2: the shells data set at d = 2, and the radial structure Eq. 14 prescribes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu

NOTEBOOK = "notebooks/lga/03_synthetic_shells.ipynb"


@dataclass(frozen=True)
class ShellsPlotConfig(Config):
    d: int = 2
    n: int = 2500

    def validate(self) -> None:
        super().validate()
        require(self, "d", self.d >= 1, "must be >= 1")
        require(self, "n", self.n >= 5, "must be >= 5")


def shells_figure_checks(
    outside: int, counts: list[int], n: int, both: list[bool], mixed: list[int]
) -> dict[str, dict]:
    """Figure 2's checks: points outside their class's radii, points per class (of n), whether both neighbouring
    classes lie within 0.25 of each boundary r = 1, 2, ... and how many points do."""
    return {
        "radii_follow_eq14": check(
            outside == 0,
            outside,
            "points outside their class's radii = 0",
            "each class c lies at the radii Eq. 14 gives it",
        ),
        "classes_balanced": check(
            min(counts) > 0.8 * n / len(counts), counts, "every class > 80% of n/5", "c ~ Discrete(1, ..., 5)"
        ),
        "boundaries_in_dense_regions": check(
            all(both),
            mixed,
            "both neighbours present within 0.25 of r = 1, 2, 3, 4",
            "the optimal decision boundaries pass through regions of high density",
        ),
    }


def shells_figure(cfg: ShellsPlotConfig, device) -> dict:
    """Figure 2: the data set at d = 2, and the radial structure Eq. 14 prescribes."""
    from gradalign.data.shells import N_CLASSES, sample_shells

    x, y = sample_shells(cfg.n, cfg.d, torch.Generator().manual_seed(cfg.seed))
    r = x.norm(dim=1)
    allowed = torch.zeros(len(r), dtype=torch.bool)
    for c in range(N_CLASSES):
        lo, hi = float(c), float(c + 1)
        inner = (r >= lo) & (r <= lo + 0.25)
        outer = (r >= hi - 0.25) & (r <= hi)
        ok = outer if c == 0 else inner if c == N_CLASSES - 1 else inner | outer
        allowed |= (y == c) & ok
    counts = torch.bincount(y, minlength=N_CLASSES).tolist()
    # each boundary r = 1..4 has both neighbouring classes within 0.25 of it: the boundary crosses dense regions
    mixed = [int(((r - k).abs() <= 0.25).sum()) for k in range(1, N_CLASSES)]
    both = [
        bool(((y == k - 1) & ((r - k).abs() <= 0.25)).any() and ((y == k) & ((r - k).abs() <= 0.25)).any())
        for k in range(1, N_CLASSES)
    ]
    checks = shells_figure_checks(int((~allowed).sum()), counts, cfg.n, both, mixed)
    curves = {"x": x[:, :2].tolist(), "y": y.tolist()}
    return outcome(checks, {"class_counts": counts, "points_near_boundaries": mixed}, curves)


EXPERIMENTS = [Experiment("lga.fig2", shells_figure, ShellsPlotConfig, same_as_cpu({}, {"n": 500}), 1, NOTEBOOK)]
