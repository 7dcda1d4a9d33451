"""SGR part, theory (notebook sgr/01): the gradient of the SGR term for one ReLU block (Eq. 35) against
autograd, and its operation count against Table 8. Exact: float64, one thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu
from gradalign.experiments.sgr.exact import EXACT, EXACT_CHOICE, NOTEBOOK, one_thread


# --- Eq. 35 and Table 8 --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostConfig(Config):
    sizes: tuple[tuple[int, int], ...] = (
        (16, 8),
        (64, 32),
        (100, 300),
        (256, 128),
        (512, 1024),
    )  # (m, n) of W for the counts
    m: int = 12  # the block of the gradient comparisons (our choice)
    n: int = 9
    classes: int = 5
    draws: int = 20

    def validate(self) -> None:
        super().validate()
        ok = all(len(s) == 2 and min(s) >= 1 for s in self.sizes)
        require(self, "sizes", len(self.sizes) >= 2 and ok, "must be >= 2 (m, n) pairs of sizes >= 1")
        for name in ("m", "n", "draws"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")


def tab8_checks(m: dict) -> dict[str, dict]:
    return {
        "eq35_matches_autograd": check(
            max(m["linear_loss_error"], m["held_error"]) < EXACT,
            {"linear_loss": m["linear_loss_error"], "cross_entropy_dL_dy_detached": m["held_error"]},
            "relative error < 1e-12: autograd with a loss linear in y, and with dL/dy detached under CE",
            "Eq. 35 is the gradient of ½‖∂L/∂x − g‖² in W when ∂L/∂y does not depend on W",
        ),
        "library_uses_full_autograd": check(
            m["library_full_error"] < 1e-10 and m["library_vs_held"] > 1e-6,
            {"vs_full": m["library_full_error"], "vs_dL_dy_constant": m["library_vs_held"]},
            "module_step's SGR gradient = full torch.func (< 1e-10) and differs from the constant-dL/dy one (> 1e-6)",
            "the library differentiates through ∂L/∂y too (create_graph), not Eq. 35's constant ∂L/∂y",
        ),
        "table8_counts": check(
            m["counts_ok"],
            m["counts_ok"],
            "counted: A = m, B = (2m-1)n + n, A.B = mn, every size; A.B equals Eq. 35",
            "Table 8's operation count of each term",
        ),
        "cost_scales_as_3mn": check(
            abs(m["fit_mn"] - 3) < 1e-6 and abs(m["fit_m"] - 1) < 1e-6 and m["flop_counter_is_4mn"],
            {"fit_mn": m["fit_mn"], "fit_m": m["fit_m"], "flop_counter_4mn": m["flop_counter_is_4mn"]},
            "least squares of the total on (mn, m) gives (3, 1); FlopCounterMode (2 per multiply-add) gives 4mn",
            "the cost of the SGR gradient of a block is 3mn + m (Table 8): the scale of one linear layer",
        ),
    }


@one_thread
def eq35_cost(cfg: CostConfig, device) -> dict:
    from gradalign.analysis import sgr_gradient_cost as cost

    m = cost.eq35_against_autograd(cfg.m, cfg.n, cfg.classes, cfg.draws, torch.Generator().manual_seed(cfg.seed))
    differences = m.pop("ce_relative_difference")
    rows = [cost.count_table8(mm, n, cfg.seed) for mm, n in cfg.sizes]
    expected = [{"A": mm, "B": (2 * mm - 1) * n + n, "AB": mm * n} for mm, n in cfg.sizes]
    for r in rows:
        r["total"] = r["A"] + r["B"] + r["AB"]
    fit_mn, fit_m = cost.fit_cost(rows, "total")
    m |= {
        "counts_ok": all({k: r[k] for k in e} == e and r["gap_to_eq35"] < EXACT for r, e in zip(rows, expected)),
        "fit_mn": fit_mn,
        "fit_m": fit_m,
        "flop_counter_is_4mn": all(r["flop_counter"] == 4 * r["m"] * r["n"] for r in rows),
    }
    metrics = {
        **m,
        "sizes": rows,
        "ce_relative_difference": {"median": differences[len(differences) // 2], "max": differences[-1]},
    }
    return outcome(tab8_checks(m), metrics)


EXPERIMENTS = [
    Experiment(
        "sgr.tab8",
        eq35_cost,
        CostConfig,
        same_as_cpu({}, {"draws": 5, "sizes": ((16, 8), (64, 32), (100, 30))}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "counting": "one operation per multiply or add, as Table 8 counts; FlopCounterMode counts 2 per "
            "multiply-add and ignores elementwise operations",
            "gradient comparison": "W 12 x 9 scaled by 1/sqrt(n), a 5-class head scaled by 1/sqrt(m): O(1) logits",
        },
    ),
]
