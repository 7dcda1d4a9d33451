"""What a benchmark is: its measuring function, the ratios it reports, and the project's goals for them.

Each benchmark measures its ratios in one run (the calls interleaved, so that machine load hits them alike).
The goals are the project's (issue "speed and scale"), never claims of a paper: they are shown beside the
measurement on the Performance page, and never enter a verdict. `gradalign.compute.bench` measures and stores them.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

COMPARE = {"<=": operator.le, ">=": operator.ge, ">": operator.gt, "<": operator.lt}


@dataclass(frozen=True)
class Goal:
    """`ratio op value` on one kind of device (cpu or cuda); `ratio` names a number of the measurement."""

    ratio: str
    op: str
    value: float
    device: str  # "cpu" or "cuda"

    def met(self, measured: float) -> bool:
        return COMPARE[self.op](measured, self.value)

    def text(self) -> str:
        return f"{self.op} {self.value:g} on {'GPU' if self.device == 'cuda' else 'CPU'}"


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str  # what is compared with what
    measure: Callable[..., dict]  # (device, quick) -> the measurement (JSON-able)
    ratios: dict[str, str]  # ratio key of the measurement -> what it is
    goals: tuple[Goal, ...] = ()
    notes: str = ""
    used_by: str = ""  # the element whose page also shows it


def goal_rows(bench: Benchmark, measurement: dict, device_kind: str) -> list[dict]:
    """Each goal of this device kind against the measured ratio (a goal whose ratio is missing is not met)."""
    rows = []
    for goal in bench.goals:
        if goal.device != device_kind:
            continue
        measured = measurement.get(goal.ratio)
        met = isinstance(measured, (int, float)) and goal.met(measured)
        rows.append({"ratio": goal.ratio, "goal": goal.text(), "measured": measured, "met": bool(met)})
    return rows
