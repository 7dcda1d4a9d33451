"""A time box for one command: `gradalign run <id> --time-limit MINUTES`.

GPU time comes in short commands (DESIGN.md, presets: a `gpu` experiment runs in resumable chunks of at most
8 minutes). Inside a box, a long training run hands the seconds left to the one loop (`time_limit_s`), which
stops after the evaluation where another window would overrun, with its checkpoint written; the run then
raises `TimeBoxSpent`, so that nothing incomplete is cached or recorded. Runs already finished are in the run
cache. The same command, run again, resumes: finished runs load, the interrupted one continues from its
checkpoint (bitwise on CPU), and the record is written once the last run ends.

Runs that honour the box: the LGA benchmark's (`training.ssl`) and IsoLoss Table 1's (`experiments.isoloss.
deep_siamese`). Others resume from their last checkpoint when a command is killed (every evaluation writes one,
atomically); giving them the box means an edit to their module, which marks their records stale.
"""

from __future__ import annotations

import contextlib
import math
import time

from gradalign.errors import ConfigError, GradalignError

_deadline: float | None = None


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
