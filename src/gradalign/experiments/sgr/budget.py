"""SGR part: the budget check of Tables 3, 6 and 7, their runs at half the epochs (`experiments.budget_rule`).

Every local-BP run decays its learning rate to zero on a cosine (App. E), so its own last epochs cannot show
whether it had finished learning. The budget check's runs are the table's runs with `protocol.epochs` halved and
nothing else changed (same data, seeds and settings): ordinary `sgr.local` runs, committed under `results/runs/`
like every run. `pairs` reads them and never trains: the precondition is measured from whichever half-budget runs
are committed when a record is assessed (`gradalign.records.rederive` updates a stored record's verdict when more are).

Train them: `python -m gradalign.compute.pilots --budget sgr.tab3` (two runs at a time, one thread each; a stopped run
resumes from its checkpoint); a GPU window trains them after the reruns (`pilots.BUDGET_CHECKS`).
"""

from __future__ import annotations


from gradalign.experiments.sgr.local_bp import ARMS
from gradalign.experiments.sgr.local_runs import half_budget


def final(spec) -> float | None:
    """The committed run's final test accuracy, or None when it is not committed or it diverged (its stored result,
    at chance, says nothing of its budget)."""
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root
    from gradalign.training.local import local_unit

    entry = read_entry(results_root() / "runs", local_unit(spec))
    if entry is None or entry["value"].get("diverged") is not None:
        return None
    return float(entry["value"]["final_test_acc"])


def pairs(record: dict) -> dict[str, tuple[list[float], list[float] | None]]:
    """For each arm of the record (its curve key): (the final test accuracies of its seeds at the record's budget,
    those at half of it, or None unless every seed has one that did not diverge). Arms with a full-budget run that
    is not committed or diverged, and records of other elements or of a config that no longer resolves to theirs,
    have no entry: their runs are judged on their own curves."""
    from gradalign.experiments.committed import resolved

    if record.get("id") not in ARMS:
        return {}  # not a stored record of a budget-checked table
    cfg = resolved(record)
    if cfg is None:  # a config that no longer resolves to the record's own
        return {}
    half = half_budget(cfg)
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    out = {}
    for key, job in ARMS[record["id"]](cfg).items():
        full = [final(cfg.spec(*job, s)) for s in seeds]
        if None in full:
            continue
        halves = [final(half.spec(*job, s)) for s in seeds]
        out[key] = (full, None if None in halves else halves)
    return out
