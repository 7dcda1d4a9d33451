"""The cost of LGA's tuning study (`lga.tune`) and of its follow-on (Figure 7 at the chosen settings), sized from the
wall times of the committed `lga.ssl` runs.

Every candidate trains the benchmark's `cpu` network for the same steps and batches as Figure 7's runs, and a
method's step costs the same whatever its settings, so a run's time is taken as the median wall time of that method's
committed runs at that scale (every label count and seed pooled: our rule), on this machine's kind of CPU (one thread
of two cores) and on a GPU window's accelerator (shared with its other workers) apart (`gpu_sizing.hardware_class`).
A run at half the steps is taken at half the time. Runs already committed cost nothing.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from gradalign.compute.gpu_sizing import hardware_class, run_seconds
from gradalign.experiments.lga.ssl_benchmark import CPU
from gradalign.experiments.lga.ssl_tuning import cpu_config, tune_units
from gradalign.store.atomic import StoredJSONError, read_json_strict
from gradalign.store.run_unit import check_entry, read_entry

FIGURE7_METHODS = ("supervised", "vat", "lga", "lga_vat")
FIGURE7_LABELS = (250, 1000, 4000)  # `ssl_runs.SSLBenchConfig`'s, which Figure 7's `cpu` preset keeps
FIGURE7_SEEDS = CPU["seeds"]


def stored_seconds(runs: Path) -> dict[str, dict[str, list[float]]]:
    """method -> {"cpu": [...], "gpu": [...]}: the wall times of the committed `lga.ssl` runs under `runs` at the
    `cpu` scale (its steps and width, the fast path on)."""
    out: dict[str, dict[str, list[float]]] = {}
    for path in sorted((Path(runs) / "lga.ssl").glob("*.json")):
        try:
            entry = check_entry(read_json_strict(path))
        except StoredJSONError:
            continue
        spec = entry["spec"]
        if spec["protocol"]["steps"] != CPU["protocol.steps"] or spec["width"] != CPU["width"] or "fast" not in spec:
            continue
        where = hardware_class(str(entry["provenance"].get("hardware", "")))
        if where:
            out.setdefault(spec["method"], {"cpu": [], "gpu": []})[where].append(run_seconds(entry))
    return out


def _hours(runs: list[tuple[str, float]], seconds: dict, where: str) -> float | None:
    """Hours of `runs` ((method, fraction of the full steps)) at the median stored time of each method; None where a
    method has no stored time on `where`."""
    total = 0.0
    for method, fraction in runs:
        times = seconds.get(method, {}).get(where)
        if not times:
            return None
        total += statistics.median(times) * fraction
    return round(total / 3600, 2)


def tune_cost(root: Path | None = None) -> dict:
    """{"search": ..., "rerun": ...}, each {"runs": to train, "cpu_hours" (one thread), "gpu_hours" (one unit at a
    time on a shared GPU)}: the study's candidates not committed under `root/runs`, and Figure 7's four methods at
    3 label counts and 3 seeds at B and at B/2 (none committed before the choice exists)."""
    from gradalign.store.store_root import results_root

    runs = (root or results_root()) / "runs"
    seconds = stored_seconds(runs)
    left = [(u.spec["method"], 1.0) for u in tune_units(cpu_config()) if read_entry(runs, u) is None]
    per_budget = [(m, 1.0) for m in FIGURE7_METHODS for _ in FIGURE7_LABELS for _ in range(FIGURE7_SEEDS)]
    rerun = per_budget + [(m, 0.5) for m, _ in per_budget]
    return {
        name: {
            "runs": len(items),
            "cpu_hours": _hours(items, seconds, "cpu"),
            "gpu_hours": _hours(items, seconds, "gpu"),
        }
        for name, items in (("search", left), ("rerun", rerun))
    }
