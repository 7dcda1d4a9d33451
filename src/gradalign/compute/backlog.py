"""The GPU backlog as a window reads it: `gpu_window.BACKLOG` and the work that waits on a stored record.

Some work can only be named once a record exists: the rerun a study chose (Figure 7 at `lga.tune`'s settings), or
an element's runs at half its budget given the choice made at the full one (`sgr.lamfull`). `full_backlog` adds them
when a window starts (and when the compute page lists the backlog), never at import: reading records there would make
importing the package read the results store.
"""

from __future__ import annotations

from gradalign.compute.gpu_window import BACKLOG


def full_backlog() -> tuple[tuple[str, str, dict], ...]:
    """`BACKLOG` with the work that waits on a stored record, read when a window starts (never at import): Figure 7
    at the settings `lga.tune` chose (`lga_rerun.items`), right after the study; and an element's runs at half its
    budget where B/2 is given B's choice (`claim_budget.choice_half_item`: `sgr.lamfull`), right after it."""
    from gradalign.compute.lga_rerun import items
    from gradalign.experiments import EXPERIMENTS
    from gradalign.experiments.claim_budget import choice_half_item
    from gradalign.records.runner import stored_record

    out = list(BACKLOG)
    at = out.index(("lga.tune", "cpu", {})) + 1
    out[at:at] = items()
    for element_id in [e for e, exp in EXPERIMENTS.items() if exp.half_budget and (e, "cpu", {}) in out]:
        record = stored_record(element_id, "cpu")
        if record is not None:
            out.insert(out.index((element_id, "cpu", {})) + 1, choice_half_item(record))
    return tuple(out)
