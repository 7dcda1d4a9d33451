"""How long a unit takes in a GPU window: measured where a window trained it, else projected from this CPU's time.

The project's only GPU timings are the committed run entries (`results/runs/`) that GPU windows trained: each
entry's provenance names its hardware and its wall time. Two entries of the same settings that differ only in their
seeds cost the same computation, so a group of them trained both on this CPU (one thread per run, two runs on two
cores) and in a window gives a measured CPU / GPU ratio (`speedups`). A backlog unit's minutes in a window
(`unit_minutes`) are then, in order of preference:

1. measured: the median wall time of its group's GPU entries;
2. projected: the median of its group's CPU entries divided by the median measured ratio (our rule: the ratios come
   from other networks, so the projection is an estimate and the page says so);
3. unknown: no entry of its group is committed.

A window's wall times are measured with its other workers training beside it on the same GPU (ten or twelve in the
windows so far), so the ratio is that of a shared GPU, not of one unit alone. The issue's target is a unit of at
most 3 minutes: a longer one is stopped by the window's box and its checkpoint carried to the next window
(`window_carry`).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from gradalign.store.atomic import StoredJSONError, read_json_strict
from gradalign.store.run_unit import check_entry

TARGET_MINUTES = 3.0  # the size of a `gpu` unit on one H100


def _without_seeds(value):
    """`value` (a run spec) without its seeds, at any depth: what makes two runs the same computation."""
    if isinstance(value, dict):
        return {k: _without_seeds(v) for k, v in value.items() if not (k == "seed" or k.endswith("_seed"))}
    if isinstance(value, list):
        return [_without_seeds(v) for v in value]
    return value


SAME_COST = {"sgr.local-heldout": ("sgr.local", "held_out")}  # kind -> (the kind it costs as, the field it adds)


def group_key(kind: str, spec: dict) -> str:
    """Runs of one computation: the kind and the spec without seeds (a run that only scores more images is timed
    with the run it extends, `SAME_COST`)."""
    if kind in SAME_COST:
        kind, extra = SAME_COST[kind]
        spec = {k: v for k, v in spec.items() if k != extra}
    return kind + ":" + json.dumps(_without_seeds(spec), sort_keys=True)


THIS_CPU = re.compile(r"^CPU: .*, 1 thread of 2 cores$")  # `environment.hardware` of a run on this machine's kind


def hardware_class(hardware: str) -> str | None:
    """'cpu' for one thread of a two-core CPU (this machine's kind, two runs at a time), 'gpu' for an accelerator,
    None for unknown hardware and any other CPU setting (more threads, or a GPU machine's CPU)."""
    if not hardware or hardware.startswith("unknown"):
        return None
    if hardware.startswith("CPU"):
        return "cpu" if THIS_CPU.match(hardware) else None
    return "gpu"


@dataclass(frozen=True)
class Timed:
    kind: str
    group: str
    hardware: str
    seconds: float


def run_seconds(entry: dict) -> float:
    """A run's training time: the larger of its entry's wall time and its value's own count (`train_seconds` or the
    sum of `epoch_seconds`). An entry written before 2026-11-28 of a run resumed from a checkpoint has a wall time of
    its last sitting only, while the values that count their time carry it over from the checkpoint; a newer entry's
    wall time counts every sitting (`run_unit`, with `parts`)."""
    value = entry["value"] if isinstance(entry.get("value"), dict) else {}
    counts = [entry.get("provenance", {}).get("wall_time_s"), value.get("train_seconds")]
    epochs = value.get("epoch_seconds")
    if isinstance(epochs, list) and all(isinstance(s, (int, float)) for s in epochs):
        counts.append(sum(epochs))
    return max([float(c) for c in counts if isinstance(c, (int, float)) and not isinstance(c, bool)], default=0.0)


def committed_times(runs: Path) -> list[Timed]:
    """Every committed entry under `runs` (`results/runs`) with a known hardware class and wall time."""
    out = []
    for path in sorted(Path(runs).glob("*/*.json")):
        try:
            entry = check_entry(read_json_strict(path))
        except StoredJSONError:
            continue  # an edited or cut entry is reported where it is read (`run_unit.read_entry`), not timed here
        provenance = entry["provenance"]
        seconds, hardware = run_seconds(entry), str(provenance.get("hardware", ""))
        if seconds > 0 and hardware_class(hardware):
            out.append(Timed(entry["kind"], group_key(entry["kind"], entry["spec"]), hardware, float(seconds)))
    return out


def _by_group(times: list[Timed]) -> dict[str, dict[str, list[float]]]:
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"cpu": [], "gpu": []})
    for t in times:
        groups[t.group][hardware_class(t.hardware)].append(t.seconds)
    return groups


def speedups(times: list[Timed]) -> list[dict]:
    """One row per group trained on both: {kind, cpu_s, gpu_s (medians), ratio, n_cpu, n_gpu}."""
    rows = []
    for group, by in _by_group(times).items():
        if by["cpu"] and by["gpu"]:
            cpu, gpu = statistics.median(by["cpu"]), statistics.median(by["gpu"])
            rows.append(
                {
                    "kind": group.split(":", 1)[0],
                    "cpu_s": cpu,
                    "gpu_s": gpu,
                    "ratio": cpu / gpu,
                    "n_cpu": len(by["cpu"]),
                    "n_gpu": len(by["gpu"]),
                }
            )
    return sorted(rows, key=lambda r: r["ratio"])


def median_ratio(times: list[Timed]) -> float | None:
    rows = speedups(times)
    return statistics.median(r["ratio"] for r in rows) if rows else None


class UnitMinutes(NamedTuple):
    median: float
    least: float
    most: float
    how: str  # 'measured', 'projected' or 'measured and projected'
    timed: int  # how many of the units asked about have a time


def unit_minutes(units: list, times: list[Timed]) -> UnitMinutes | None:
    """The median, least and most minutes of `units` in a GPU window, how they are known and how many of `units`
    are timed; None where none is.

    Measured where a window trained a unit of the group, else this CPU's median over the measured ratio."""
    groups, ratio = _by_group(times), median_ratio(times)
    measured, projected = [], []
    for unit in units:
        by = groups.get(group_key(unit.kind, unit.spec))
        if by and by["gpu"]:
            measured.append(statistics.median(by["gpu"]) / 60)
        elif by and by["cpu"] and ratio:
            projected.append(statistics.median(by["cpu"]) / ratio / 60)
    if not measured and not projected:
        return None
    how = "measured" if not projected else "projected" if not measured else "measured and projected"
    timed = measured + projected
    return UnitMinutes(statistics.median(timed), min(timed), max(timed), how, len(timed))
