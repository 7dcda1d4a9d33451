"""LGA part, §4: Figure 7 trained again at the settings `lga.tune` chose (our follow-on; notebook lga/04).

The tuning study (`experiments.lga.ssl_tuning`) chooses, per method, the candidate with the highest validation
accuracy at 4,000 labels, and its record stores Figure 7's overrides at those settings (`metrics["rerun"]`, built by
`ssl_tuning.rerun_overrides`). This module reads them from the study's committed `cpu` record, never from runs in
progress, so the rerun waits for a record that committed code assembled:

- `items()`: the work, Figure 7 at the `cpu` scale (its four methods, 3 seeds, 3 label counts) at the chosen settings,
  at the budget B and at B/2 (`ssl_tuning.rerun_items`: 36 runs each), and the mechanism's control (LGA's 18 runs
  with α_w = 0, `validity.control_for`); [] until the study's record is stored. A GPU window's backlog takes them
  right after the study (`backlog.full_backlog`).
- `record()`: Figure 7's record at the chosen settings, once assembled: the same rules and checks as the untuned
  Figure 7, the B/2 runs read by the claim-level budget rule.
- `status()`: where the rerun stands, in words, for the page.

On the command line it trains them here:

    python -m gradalign.compute.lga_rerun                 # its runs missing from results/runs: B, then B/2
    python -m gradalign.compute.lga_rerun --assemble      # then its record, from the committed runs
    python -m gradalign.compute.lga_rerun --parallel 1    # one job at a time (default: cores / GRADALIGN_THREADS)

The runs train as `gradalign sweep` trains them: one job per run, each pinned to GRADALIGN_THREADS threads, its
entry written to the checkout's `results/runs/` when it finishes (a stopped job resumes from its checkpoint in the
run cache). Nothing trains until the study's `cpu` record is stored: the command then says so in one line.
`--assemble` computes the record as `gradalign run` does, so it refuses a tree with uncommitted changes.
"""

from __future__ import annotations

import argparse

ELEMENT = "lga.fig7"


def overrides(store=None) -> dict | None:
    """Figure 7's overrides at the chosen settings, from `lga.tune`'s committed `cpu` record (None: no record, or a
    record whose study tuned fewer methods than the rerun needs)."""
    from gradalign.records.runner import stored_record

    study = stored_record("lga.tune", "cpu", store=store)
    rerun = study and study["metrics"].get("rerun")
    return rerun if isinstance(rerun, dict) and rerun.get("tuned") else None


def items(store=None) -> list[tuple[str, str, dict]]:
    """The rerun as backlog items (element, preset, overrides): B, B/2, then the mechanism's control at B (LGA's arms
    with α_w = 0 at the tuned settings, `validity.control_for`); [] until the study's record is stored."""
    from gradalign.experiments.lga.ssl_tuning import rerun_items
    from gradalign.experiments.lga.validity import control_for

    found = overrides(store)
    if not found:
        return []
    return [*rerun_items(found), (ELEMENT, "cpu", {**found, **control_for(found["tuned"])})]


def rerun_purpose(given: dict) -> str:
    """What one of `items()` trains, in words (the GPU backlog's table)."""
    if given.get("lga.alpha_w") == 0.0:
        return "Figure 7 at the settings lga.tune chose: the mechanism control, LGA's runs with α_w = 0"
    half = ", at half the steps" if "protocol.steps" in given else ""
    return f"Figure 7 at the settings lga.tune chose{half}"


def record(store=None) -> dict | None:
    """Figure 7's stored record at the chosen settings (at B), or None until it is assembled."""
    from gradalign.records.runner import stored_record

    found = overrides(store)
    return stored_record(ELEMENT, "cpu", found, store) if found else None


def committed(store=None) -> tuple[int, int]:
    """(runs committed, runs in all) of the rerun at both budgets, read from `<results>/runs` (never trained)."""
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of
    from gradalign.records.results import ResultStore
    from gradalign.store.run_unit import read_entry

    folder = (store or ResultStore()).root / "runs"
    units = {u.key: u for e, p, o in items(store) for u in units_of(e, get(e).resolve(p, o))}  # a run once
    return sum(read_entry(folder, u) is not None for u in units.values()), len(units)


def status(store=None) -> str:
    """Where the rerun stands, in words: waiting on the study, runs to train, or its record assembled."""
    if overrides(store) is None:
        return (
            "Figure 7 at the tuned settings waits on the study's record: it is trained once every candidate above "
            "is, from the settings that record stores."
        )
    if record(store) is not None:
        return "Figure 7 at the tuned settings: its record is below."
    done, total = committed(store)
    return (
        f"Figure 7 at the tuned settings: {done} of its {total} runs (3 seeds, at the full budget and at half of "
        "it, and LGA's with α_w = 0) are committed; its record is assembled once all are "
        "(`python -m gradalign.compute.lga_rerun` trains them, on this machine or in a GPU window)."
    )


def main(argv: list[str] | None = None) -> int:
    from gradalign.compute.sweep import sweep

    parser = argparse.ArgumentParser(prog="python -m gradalign.compute.lga_rerun", description=__doc__.split("\n")[0])
    parser.add_argument("--parallel", type=int, default=None, help="jobs at once (default: cores / threads)")
    parser.add_argument("--assemble", action="store_true", help="assemble the record once every run is committed")
    args = parser.parse_args(argv)
    if args.parallel is not None and args.parallel < 1:
        parser.error(f"--parallel must be >= 1; got {args.parallel}")
    todo = items()
    if not todo:
        parser.error("lga.tune has no stored cpu record yet: train its candidates and assemble it first")
    print(status())
    for element_id, preset, given in todo:
        summary = sweep(element_id, preset, overrides=given, parallel=args.parallel)
        for label, why in summary.failed.items():
            print(f"failed: {label}: {why}")
        if not summary.ok:
            return 1
    if args.assemble:
        from gradalign.records.runner import run

        found = run(ELEMENT, "cpu", todo[0][2])
        print(f"{ELEMENT} at the tuned settings [cpu]: {found['verdict']['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
