"""What the exact SGR elements share (notebook sgr/01): float64 on one thread, a seeded random problem, and
the helpers their measurements use. The elements: `theory` (Eq. 7, Eq. 5-6, Proposition 3.4), `two_layer`
(Proposition 3.5, Theorem 3.3) and `gradient_cost` (Eq. 35, Table 8).
"""

from __future__ import annotations

import torch

from gradalign.config import require
from gradalign.experiments.exact import (  # noqa: F401  (the part's modules import these from here)
    EXACT,
    EXACT_CHOICE,
    F64,
    log_slope,
    log_uniform,
    one_thread,
    rel_error,
)

NOTEBOOK = "notebooks/sgr/01_theory.ipynb"


def teacher_data(gen: torch.Generator, batch: int, features: int, classes: int):
    """Gaussian inputs labelled by a random linear teacher (our choice)."""
    x0 = torch.randn(batch, features, generator=gen, dtype=F64)
    return x0, (x0 @ torch.randn(features, classes, generator=gen, dtype=F64)).argmax(1)


def chain_rules(cfg, modules: int) -> None:
    ok = len(cfg.widths) >= modules + 1 and min(cfg.widths) >= 1
    require(cfg, "widths", ok, f"must list the input size and >= {modules} module widths, all >= 1")
    require(cfg, "classes", cfg.classes >= 2, "must be >= 2")
    require(cfg, "batch", cfg.batch >= 1, "must be >= 1")
