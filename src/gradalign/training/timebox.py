"""A time box for one command: `gradalign run <id> --time-limit MINUTES`.

GPU time comes in short commands (book/appendix/design.md, presets: a `gpu` experiment runs in resumable chunks of at
most 8 minutes). Inside a box, every training run on the one loop (`training.loop`) reads the seconds left: it does
not begin once the box has closed, and a checkpointed run stops after the evaluation (or checkpoint) where
another window would overrun, with its checkpoint written; the run then raises `TimeBoxSpent`, so that nothing
incomplete is cached or recorded. Runs already finished are in the run cache. The same command, run again,
resumes: finished runs load, the interrupted one continues from its checkpoint (bitwise on CPU), and the record
is written once the last run ends, with the wall time of every part (`runner`).

`TIME_BOXED` names the experiments whose long computations are such runs (the LGA benchmark's, `training.ssl`;
the meta-gradient runs, `training.semimeta`; IsoLoss Table 1's, `training.siamese`; SGR's local and BP-free
runs, `training.local`). Every other experiment computes in one piece (an analytic element, the synthetic
LGA study's batched trials, the ImageNet runs under torchrun): `gradalign run <id> --time-limit` refuses it
before any compute (`check_honoured`).
"""

from __future__ import annotations

import contextlib
import math
import time

from gradalign.errors import ConfigError, GradalignError

_deadline: float | None = None


TIME_BOXED = frozenset(
    {
        "lga.fig5",
        "lga.fig6",
        "lga.fig7",
        "lga.tab1",
        "metagrad.tab1",
        "metagrad.tab2",
        "metagrad.tab4",
        "metagrad.fig2",
        "metagrad.fig3",
        "isoloss.tab1",
        "sgr.tab3",
        "sgr.tab4",
        "sgr.tab6",
        "sgr.tab7",
        "sgr.fig2",
        "sgr.fig3",
        "sgr.fig4",
    }
)
"""The experiments that honour a command's time box: each trains its runs on the one loop, checkpointed and
cached one by one."""


class TimeBoxSpent(GradalignError):
    """The command's time box ran out; the work done is stored, and the same command resumes it."""


def seconds_left() -> float | None:
    """Seconds until the box closes (may be ≤ 0), or None outside a box."""
    return None if _deadline is None else _deadline - time.monotonic()


def raise_if_spent(what: str) -> None:
    """Before starting `what`: stop at once when the box has closed."""
    left = seconds_left()
    if left is not None and left <= 0:
        raise TimeBoxSpent(f"the time box closed before {what}; run the same command again to go on")


def check_minutes(minutes: float | None) -> None:
    """A time limit is None or a positive, finite number of minutes."""
    if minutes is None:
        return
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not math.isfinite(minutes) or minutes <= 0:
        raise ConfigError(f"the time limit must be a positive number of minutes; got {minutes!r}")


def check_honoured(element_id: str) -> None:
    """Inside a box, before any compute: ConfigError unless `element_id` honours the box (`TIME_BOXED`)."""
    if _deadline is not None and element_id not in TIME_BOXED:
        raise ConfigError(
            f"{element_id} computes in one piece and cannot stop at a time limit; run it without --time-limit "
            f"(experiments that honour it: {', '.join(sorted(TIME_BOXED))})"
        )


@contextlib.contextmanager
def time_box(minutes: float | None):
    """Within the block, runs stop cleanly after about `minutes` (None: no box)."""
    global _deadline
    check_minutes(minutes)
    if minutes is None:
        yield
        return
    saved, _deadline = _deadline, time.monotonic() + 60 * minutes
    try:
        yield
    finally:
        _deadline = saved
