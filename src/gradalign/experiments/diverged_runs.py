"""Runs that diverged, kept as results of the study that trained them (`lga.tune`, `sgr.lamfull`).

A run that diverges (a NaN, or the accuracy back at chance) raises a DivergenceError and stores no run entry. In a
study that ranks its runs (a tuning's candidates, a choice on validation), such a run would stay "not trained", the
choice would never be made and whatever waits on it would never start. The study keeps each divergence here, at
`<results>/pilots/<study>/diverged.json` (with its commit, hardware and a digest: an edited or cut file is an error,
never read), ranks the run below every trained one, and never trains it again; its page shows it as "diverged".
`gradalign sweep` keeps a study's divergences the same way (`compute.sweep.compute_unit`) and submits them no more;
a GPU window reports them in its `window.json` with the commit and hardware they diverged on, and `gradalign import`
keeps them here (`compute.gpu_import`).
"""

from __future__ import annotations

from pathlib import Path

STUDIES = ("lga.tune", "sgr.lamfull", "sgr.tab4")  # the studies that keep their divergences (`gradalign sweep` too)
# sgr.tab4: its lr tuning on validation (shared with Figures 2-4), where a diverged candidate scores 0 and a diverged
# final run moves to the next rate (`sgr.bp_free.tune`, `_tuned_runs`): kept so that its reading at half the budget
# (`claim_budget.at_half_budget`) is assembled from committed runs and these, with nothing trained.


def _file(study: str) -> Path:
    return Path("pilots") / study / "diverged.json"


def diverged(study: str, root=None) -> dict[str, dict]:
    """Run key -> {"label", "why", "git_commit", "hardware"} of every run of `study` kept as diverged."""
    from gradalign.store.atomic import read_digested
    from gradalign.store.store_root import results_root

    return (read_digested((root or results_root()) / _file(study)) or {"runs": {}})["runs"]


def every_diverged(root=None) -> dict[str, dict]:
    """Run key -> what was kept, over every study's divergences: a run's divergence is a fact of its spec, whichever
    study kept it."""
    return {key: kept for study in STUDIES for key, kept in diverged(study, root).items()}


def keep_diverged(study: str, unit, why: str, device, root=None, made: dict | None = None) -> dict:
    """Keep `unit`'s divergence (`why`: the error's line) under `study` (in the results store `root`, default
    `results_root()`), with its provenance: this checkout's commit and `device`'s hardware, or `made`'s
    ({"git_commit", "hardware"}: where a GPU window trained it); returns what was kept. Inside a reading from
    committed runs (`run_unit.reading_only`) nothing is written: the divergence it passes on is kept already."""
    from gradalign.environment import git_commit, hardware
    from gradalign.store.atomic import write_digested
    from gradalign.store.store_root import results_root

    from gradalign.store.run_unit import reading_only
    from gradalign.store.runcache import cache_root, key_lock

    root = root or results_root()
    made = made or {"git_commit": git_commit(), "hardware": hardware(device)}
    kept = {"label": unit.label, "why": why, "git_commit": made["git_commit"], "hardware": made["hardware"]}
    if reading_only():  # a reading from committed runs (`claim_budget.at_half_budget`) passes a kept one on
        return every_diverged(root).get(unit.key, kept)
    # Read, add, write under one lock: two jobs of a sweep that diverge together would otherwise each write the
    # file as they read it, and the later write would drop the other's run. The lock sits in the run cache (that the
    # sweep's jobs share), never beside the committed file.
    with key_lock(cache_root() / "locks" / f"diverged-{study}.lock", f"{study}'s divergences"):
        runs = diverged(study, root)
        runs[unit.key] = kept
        write_digested(root / _file(study), {"runs": runs})
    return kept
