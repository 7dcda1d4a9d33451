"""What Eq. 2's normalisation did in each LGA run of the tuning study (`lga.tune`, page lga/04), from committed runs.

Eq. 2 divides each squared residual by ε_norm + √EMA(v⁴). Where ε_norm exceeds √EMA(v⁴), the division is by
ε_norm alone and the normalisation is effectively off for that parameter; the paper takes ε_norm to have no
significant effect, which holds only where that share is small. Each LGA run records the share at every
evaluation (`methods.lga.eps_dominated_share`), and the mean cosine between the unlabeled gradient under the imputed
labels and the labeled one (`alignment`, which LGA is built to raise). This module reads both from the committed
runs (it never trains) so that the page can show the share for every candidate the search drew.
"""

from __future__ import annotations

import math

EMPTY = "not trained"
COLUMNS = {
    "eps_dominated_mean": "ε-dominated share, mean over training",
    "eps_dominated_last": "ε-dominated share, last evaluation",
    "alignment_mean": "gradient alignment, mean over training",  # cos(g_ℓ, g_u); the diagnostics table's name
    "val_acc": "validation accuracy (%)",
}


def _mean(values: list) -> float | None:
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _cell(value: float, key: str) -> str:
    """A share to 3 decimals, a cosine signed to 3 (never "-0.000"), an accuracy to 2."""
    if key == "val_acc":
        return f"{value:.2f}"
    value = round(value, 3) + 0.0  # -0.0004 rounds to -0.0, and + 0.0 makes it 0.0
    return f"{value:+.3f}" if key == "alignment_mean" else f"{value:.3f}"


def run_mechanism(value: dict) -> dict[str, float | None]:
    """One LGA run's Eq. 2 diagnostics from its committed value: the ε-dominated share averaged over its
    evaluations and at the last one, and cos(g_ℓ, g_u) averaged over training; None where the run lacks them."""
    history = value.get("history", {}) if isinstance(value, dict) else {}
    shares = history.get("eps_dominated") or []
    return {
        "eps_dominated_mean": _mean(shares),
        "eps_dominated_last": _mean(shares[-1:]),
        "alignment_mean": _mean(history.get("alignment") or []),
    }


def mechanism_table(root=None):
    """A DataFrame, one row per LGA candidate and label count: its ε_norm, the ε-dominated share (mean over
    evaluations, and at the last one), the mean alignment and the validation accuracy, each "not trained" where the
    candidate's run is not committed. `root`: the results folder (default: the project's)."""
    import pandas as pd

    from gradalign.experiments.diverged_runs import diverged
    from gradalign.experiments.lga.ssl_tuning import DIVERGED, candidate_config, candidate_unit, candidates, cpu_config
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    cfg, folder, rows = cpu_config(), (root or results_root()) / "runs", []
    stopped, current = diverged("lga.tune", root), candidate_config(cfg, ()).lga.eps_norm  # candidate 0's ε_norm
    if "lga" not in cfg.methods:
        return pd.DataFrame(rows)
    for i, changes in enumerate(candidates(cfg, "lga")):
        drawn = {name: v for _, name, v in changes}
        for n in cfg.labels:
            unit = candidate_unit(cfg, "lga", i, changes, n)
            entry = read_entry(folder, unit)
            row = {"candidate": i, "labels": f"{int(n):,}"}
            if entry is None:  # not trained, or diverged (kept as a result, no entry)
                eps = drawn.get("eps_norm", current)
                row["ε_norm"] = f"{eps:.2e}"
                row.update(dict.fromkeys(COLUMNS.values(), DIVERGED if unit.key in stopped else EMPTY))
                rows.append(row)
                continue
            value = entry["value"]
            row["ε_norm"] = f"{value['settings']['eps_norm']:.2e}"
            got = {**run_mechanism(value), "val_acc": None}
            if isinstance(value.get("best_val_error"), (int, float)):
                got["val_acc"] = 100 - value["best_val_error"]
            for key, column in COLUMNS.items():
                v = got[key]
                row[column] = "not recorded" if v is None else _cell(v, key)
            rows.append(row)
    return pd.DataFrame(rows)


def mechanism_reading(table, tuning) -> str:
    """A sentence on the table: the range of the mean ε-dominated share over the recorded candidates, and the share
    of the LGA candidate chosen at each label count (`tuning`: `ssl_tuning.tuning_view`'s frame, its "chosen at n"
    columns)."""
    from gradalign.experiments.lga.ssl_tuning import DIVERGED  # as the tuning table shows a diverged candidate

    column = COLUMNS["eps_dominated_mean"]
    recorded = table[~table[column].isin([EMPTY, DIVERGED, "not recorded"])] if len(table) else table
    if not len(recorded):
        return "No LGA candidate of the study has recorded the ε-dominated share yet."
    shares = recorded[column].astype(float)
    parts = []
    lga = tuning[tuning["method"] == "LGA"] if len(tuning) else tuning
    for name in [c for c in tuning.columns if c.startswith("chosen at ")]:
        labels = name.removeprefix("chosen at ")
        picked = lga[lga[name] == "yes"]["candidate"].tolist()
        row = recorded[(recorded["candidate"].isin(picked)) & (recorded["labels"] == labels)]
        if len(row):
            share = row.iloc[0][column]
            parts.append(f"at {labels} labels validation chose candidate {picked[0]}, with a share of {share}")
    chosen = f" ({'; '.join(parts)})" if parts else ""
    return (
        f"Over the {len(recorded)} LGA runs that recorded it, the mean ε-dominated share ranges from "
        f"{shares.min():.3f} to {shares.max():.3f}{chosen}: where it is near 1, Eq. 2's normalisation is effectively "
        "off for nearly every parameter."
    )
