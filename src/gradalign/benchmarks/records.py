"""Benchmarks as records: `gradalign bench <name>` measures, stores and shows the project's speed and memory goals.

Each benchmark measures its ratios in one run (the calls interleaved, so that machine load hits them alike)
and is stored like an experiment record: `<results>/bench/<name>/<device kind>.json` (cpu, or cuda), written
atomically with a digest of its content and the provenance of the machine (hardware, torch, threads, commit);
a stored file that was edited or cut short is reported and never shown. A new measurement on the same kind of
device replaces the old one. The goals are the project's (issue "speed and scale"), never claims of a paper:
they are shown beside the measurement on the Performance page, and never enter a verdict.
"""

from __future__ import annotations

import operator
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gradalign.atomic import StoredJSONError, content_digest, read_json_strict, write_json_atomically
from gradalign.errors import ConfigError

SCHEMA = 1
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


@dataclass
class BenchRecord:
    name: str
    device_kind: str
    measurement: dict
    provenance: dict
    goals: list[dict] = field(default_factory=list)  # {"ratio", "goal", "measured", "met"}

    def to_json(self) -> dict:
        document = {
            "schema": SCHEMA,
            "name": self.name,
            "device_kind": self.device_kind,
            "measurement": self.measurement,
            "goals": self.goals,
            "provenance": self.provenance,
        }
        return {**document, "digest": content_digest(document)}


class BenchStore:
    """`<root>/bench/<name>/<device kind>.json`; root = the results store's root."""

    def __init__(self, root: str | Path | None = None):
        from gradalign.results import ResultStore

        self.root = Path(ResultStore(root).root) / "bench"

    def path(self, name: str, device_kind: str) -> Path:
        return self.root / name / f"{device_kind}.json"

    def save(self, record: BenchRecord) -> Path:
        return write_json_atomically(self.path(record.name, record.device_kind), record.to_json())

    def load(self, name: str, device_kind: str) -> dict | None:
        """The stored record, or None when there is none; an unusable file is reported and treated as missing."""
        path = self.path(name, device_kind)
        if not path.exists():
            return None
        try:
            document = read_json_strict(path)
            if not isinstance(document, dict) or document.get("schema") != SCHEMA or "digest" not in document:
                raise StoredJSONError("is not a benchmark record of this schema")
            if (document.get("name"), document.get("device_kind")) != (name, device_kind):
                raise StoredJSONError("names another benchmark or device")
            if document["digest"] != content_digest(document):
                raise StoredJSONError("has a digest that does not match its content (edited after it was measured)")
        except StoredJSONError as err:
            warnings.warn(f"ignoring benchmark record {path}: {err}", UserWarning, stacklevel=2)
            return None
        return document


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


def run_benchmark(name: str, device: str = "auto", quick: bool = False, root: str | Path | None = None) -> dict:
    """Measure benchmark `name` on `device`, store the record (unless `quick`) and return it.

    `quick` runs tiny sizes to test the code path; its record is returned, never stored."""
    from gradalign.benchmarks.registry import BENCHMARKS
    from gradalign.environment import provenance
    from gradalign.fingerprint import code_fingerprint
    from gradalign.runtime import check_device, pin_threads, select_device

    if name not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}")
    check_device(device)
    bench = BENCHMARKS[name]
    dev = select_device(device)
    pin_threads()
    start = time.perf_counter()
    measurement = bench.measure(dev, quick)
    wall = time.perf_counter() - start
    kind = dev.type
    prov = {**provenance(dev, [0], wall), "quick": quick, "code": code_fingerprint(bench.measure.__module__)}
    record = BenchRecord(name, kind, measurement, prov, goal_rows(bench, measurement, kind))
    if not quick:
        BenchStore(root).save(record)
    return record.to_json()
