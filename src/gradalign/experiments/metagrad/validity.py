"""Meta-gradient part: the preconditions of its benchmark elements and their claims re-derived from a record.

Preconditions (`experiments.rules`): at least 3 seeds per variant; the runs finished learning (validation error,
the selection metric: it fell by less than `TOLERANCE` points over the last 20 % of evaluations in 80 % of runs);
the labeled-only baseline fits its labels (eval-mode error on its own labeled training set at most `FIT_ERROR` %);
the mechanism acted (the pseudo-label update of the meta variants changed a share of the unlabeled predictions,
at least `CHANGED_SHARE`); the labeled-only baseline is near the book's supervised reference. A quantity the runs
did not record fails its precondition (`rules.not_recorded`).
"""

from __future__ import annotations

import math

from gradalign.experiments.base import check
from gradalign.experiments.rules import (
    enough_seeds,
    finished_learning,
    fits_labels,
    mechanism_active,
    not_recorded,
    per_column,
)

TOLERANCE = 0.5  # error points over the last 20 % of evaluations (our choice)
FIT_ERROR = 5.0  # % eval-mode error on the labeled training set (our choice)
CHANGED_SHARE = 0.01  # share of unlabeled predictions the pseudo-label update changes (our choice)


def _columns(record: dict) -> dict:
    m = record["metrics"]
    return m.get("table") or m.get("points") or {}


def _finished(record: dict) -> dict:
    curves = record["curves"]
    runs = {
        f"{key}/seed{i}": row
        for key, c in curves.items()
        if isinstance(c, dict) and "val_error" in c
        for i, row in enumerate(c["val_error"])
    }
    if not runs:
        return not_recorded("the runs finished learning", "the validation error at every evaluation")
    return finished_learning(runs, higher_is_better=False, tolerance=TOLERANCE, metric="validation error (%)")


def worst_run_bound(summary: dict) -> float:
    """An upper bound of the largest of n values from their mean and sample standard deviation s (n − 1 in its
    denominator): no value lies more than s·(n − 1)/√n above the mean (Samuelson's inequality). The records keep
    each column's labeled-set error as a summary only, and the rule asks it of every run."""
    n = summary["n"]
    return summary["mean"] + (summary.get("std") or 0.0) * (n - 1) / math.sqrt(n)


def _fits(record: dict) -> dict:
    summaries = {}
    for column, variants in _columns(record).items():
        error = variants.get("labeled_only", {}).get("labeled_error")
        summaries[column] = error if isinstance(error, dict) and "n" in error else None
    if not summaries or any(s is None for s in summaries.values()):
        return fits_labels({c: None for c in summaries}, FIT_ERROR)  # not recorded
    bounds = {column: worst_run_bound(s) for column, s in summaries.items()}
    return check(
        max(bounds.values()) <= FIT_ERROR,
        {
            "runs": sum(s["n"] for s in summaries.values()),
            "mean": {c: round(s["mean"], 2) for c, s in summaries.items()},
            "worst run at most": {c: round(b, 2) for c, b in bounds.items()},
        },
        f"eval-mode error on its own labeled training set <= {FIT_ERROR:g} % in every baseline run (the worst run "
        "bounded from each column's mean and standard deviation: mean + std·(n − 1)/√n)",
        "the baseline fits its labels",
    )


def _active(record: dict) -> dict:
    shares = {}
    for column, variants in _columns(record).items():
        for variant, row in variants.items():
            if variant.startswith("meta"):
                changed = row.get("pseudo_changed")
                shares[f"{column}/{variant}"] = changed.get("mean") if isinstance(changed, dict) else None
    if not shares or any(v is None for v in shares.values()):
        return not_recorded("the mechanism acted", "the share of unlabeled predictions the pseudo-label update changes")
    return mechanism_active(
        min(shares.values()) >= CHANGED_SHARE,
        {k: round(v, 4) for k, v in shares.items()},
        f"the pseudo-label update changes at least {CHANGED_SHARE:.0%} of the unlabeled predictions, in every meta "
        "variant",
        "the meta-gradient moved the pseudo labels",
    )


def benchmark(record: dict) -> dict:
    counts = {
        f"{column}/{variant}": row["best_test_error"]["n"]
        for column, variants in _columns(record).items()
        for variant, row in variants.items()
    }
    if not counts and "silhouette" in record["metrics"]:
        counts = {v: s["n"] for v, s in record["metrics"]["silhouette"].items()}
    return {
        "enough_seeds": enough_seeds(counts),
        "finished_learning": _finished(record),
        "fits_labels": _fits(record),
        "mechanism_active": _active(record),
        "near_reference": _near_reference(record),
    }


def _near_reference(record: dict) -> dict:
    """The labeled-only baseline's best test error at each (data set, labels) column against the book's
    reference (`gradalign.experiments.reference`); every column must pass."""
    from gradalign.experiments.reference import baseline_check

    columns = _columns(record)
    by_dataset: dict[str, dict[int, float | None]] = {}
    for dataset, labels in record["config"].get("columns", []):
        row = columns.get(f"{dataset}_{labels}", {}).get("labeled_only")
        if row is not None:
            by_dataset.setdefault(dataset, {})[int(labels)] = row["best_test_error"]["mean"]
    quantity = "best test error (%) over training, as the authors report it"
    checks = [baseline_check(d, b, quantity) for d, b in sorted(by_dataset.items())] or [
        baseline_check("", {}, quantity)
    ]
    failing = [c for c in checks if not c["passed"]]
    return (failing or checks)[0]


def _columns_claims(record: dict, checks_of) -> dict:
    return per_column(record["metrics"]["table"], checks_of, len(record["config"]["columns"]) > 1)


def tab4_claims(record: dict) -> dict:
    from gradalign.experiments.metagrad.benchmark import table4_checks

    return _columns_claims(record, table4_checks)


def tab1_claims(record: dict) -> dict:
    from gradalign.experiments.metagrad.benchmark import table1_checks

    return _columns_claims(record, table1_checks)


def fig2_claims(record: dict) -> dict:
    from gradalign.experiments.metagrad.benchmark import figure2_checks

    return figure2_checks(record["metrics"]["points"])


def fig3_claims(record: dict) -> dict:
    from gradalign.experiments.metagrad.benchmark import figure3_checks

    return figure3_checks(record["metrics"])


VALIDITY = {
    "metagrad.tab4": (benchmark, tab4_claims),
    "metagrad.tab1": (benchmark, tab1_claims),
    "metagrad.tab2": (benchmark, tab1_claims),
    "metagrad.fig2": (benchmark, fig2_claims),
    "metagrad.fig3": (benchmark, fig3_claims),
}
