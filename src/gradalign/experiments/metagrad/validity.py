"""Meta-gradient part: the preconditions of its benchmark elements and their claims re-derived from a record.

Preconditions (`experiments.rules`): at least 3 seeds per variant; the runs finished learning (validation error,
the selection metric: it fell by less than `TOLERANCE` points over the last 20 % of evaluations in 80 % of runs);
every variant fits its labels (eval-mode error on its own labeled training set at most `FIT_ERROR` % in its worst
committed run; one-sided: the labeled-only baseline's blocks a win, the other variants' a loss);
the mechanism acted (the pseudo-label update of the meta variants changed a share of the unlabeled predictions,
at least `CHANGED_SHARE`); the labeled-only baseline is near the book's supervised reference. A quantity the runs
did not record fails its precondition (`rules.not_recorded`).
"""

from __future__ import annotations


from gradalign.experiments.rules import (
    enough_seeds,
    finished_learning,
    fits_labels,
    fits_labels_by_role,
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


def _fits(record: dict) -> dict[str, dict]:
    """Every run of every variant against its own labeled set, from the committed runs (`experiments.committed`):
    the labeled-only baseline's worst run (blocks a win of the method), and the worst run of the variants with the
    pseudo-label or mixup terms (the method and its ablations: blocks a loss). Rules version 4 reads the runs
    themselves; the bound from a mean and SD that rules version 3 used is gone."""
    from gradalign.experiments.committed import entries

    found = entries(record)
    if not found or any(entry is None for _, entry in found):
        return {"fits_labels": fits_labels({"labeled only": None}, FIT_ERROR)}  # not recorded
    errors, roles = {}, {}
    for unit, entry in found:
        spec = unit.spec
        name = f"{spec['dataset']}_{spec['n_labeled']}/{spec['method']['variant']}/seed {spec['seed']}"
        errors[name] = entry["value"].get("labeled_error")
        roles[name] = "baseline" if spec["method"]["variant"] == "labeled_only" else "method"
    return fits_labels_by_role(errors, roles, FIT_ERROR)


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
        **_fits(record),
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
