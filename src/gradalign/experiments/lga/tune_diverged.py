"""LGA part: the `lga.tune` candidates whose run diverged, kept as results (notebook lga/04).

A drawn candidate can diverge (a NaN, or the accuracy back at chance: `training.ssl`); no run entry is then stored, so
without this file the candidate would stay "not trained", the choice (`ssl_tuning.choose`) would never be made and
Figure 7's rerun would never start. `tune` keeps each divergence here, at `<results>/pilots/lga.tune/diverged.json`
(with its commit, hardware and a digest: an edited or cut file is an error, never read), ranks the candidate below
every trained one, and never trains it again; the page shows it as "diverged".
"""

from __future__ import annotations

from pathlib import Path

FILE = Path("pilots") / "lga.tune" / "diverged.json"


def diverged(root=None) -> dict[str, dict]:
    """Run key -> {"label", "why", "git_commit", "hardware"} of every candidate run kept as diverged."""
    from gradalign.store.atomic import read_digested
    from gradalign.store.store_root import results_root

    return (read_digested((root or results_root()) / FILE) or {"runs": {}})["runs"]


def keep_diverged(unit, why: str, device) -> dict:
    """Keep `unit`'s divergence (`why`: the error's line) with its provenance; returns what was kept."""
    from gradalign.environment import git_commit, hardware
    from gradalign.store.atomic import write_digested
    from gradalign.store.store_root import results_root

    runs = diverged()  # read again: another process may have kept one
    runs[unit.key] = {"label": unit.label, "why": why, "git_commit": git_commit(), "hardware": hardware(device)}
    write_digested(results_root() / FILE, {"runs": runs})
    return runs[unit.key]
