"""How a record's seeds and compute time read on a page: one wording for captions, verdict rows and the Compute page."""

from __future__ import annotations

import re


def duration(seconds: float) -> str:
    """'12.3 s', '4.5 min' or '2.1 h'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def seeds_text(record: dict) -> str:
    """'seed 0' or 'seeds 0-2': the config's seed count where it has one (the provenance names the first seed)."""
    prov, cfg = record["provenance"], record.get("config", {})
    first = prov["seeds"][0]
    count = cfg.get("seeds") if isinstance(cfg.get("seeds"), int) else len(prov["seeds"])
    return f"seed {first}" if count == 1 else f"seeds {first}-{first + count - 1}"


def time_text(record: dict, assembled: bool = False) -> str:
    """The record's wall time; for a record assembled from stored runs, the training time of those runs
    (and, with `assembled`, how long the assembly took)."""
    wall = record["provenance"]["wall_time_s"]
    metrics = record.get("metrics")
    trained = metrics.get("train_seconds") if isinstance(metrics, dict) else None
    if isinstance(trained, (int, float)) and trained > wall:
        return f"{duration(trained)} training (stored runs)" + (f"; assembled in {duration(wall)}" if assembled else "")
    return duration(wall)


def where_computed(provenance: dict) -> str:
    """Where a record's numbers were computed: for a record assembled from stored runs, the hardware of those
    runs with their counts (runs of one record may come from several machines: a CPU sitting, a GPU window) and
    the machine that assembled it; otherwise the record's own hardware."""
    runs = provenance.get("runs") or {}
    if not runs:
        return hardware_text(provenance["hardware"])
    parts = [
        f"{len(keys)} run{'s' if len(keys) != 1 else ''} on {hardware_text(name)}"
        for name, keys in sorted(runs.items(), key=lambda item: (-len(item[1]), item[0]))
    ]
    return ", ".join(parts) + f"; assembled on {hardware_text(provenance['hardware'])}"


def hardware_text(text: str) -> str:
    """'CPU: Intel(R) Xeon(R) Processor, 2 threads of 2 cores' -> 'Intel Xeon, 2 threads'. The runs trained into
    the local run cache before run entries kept their hardware say so, instead of "unknown"."""
    if text.startswith("unknown (read from the local run cache)"):
        return "a machine not recorded (trained into the local run cache before run entries kept their hardware)"
    text = re.sub(r"\((R|TM)\)| CPU\b| Processor\b|^CPU: ", "", text)
    return re.sub(r"(\d+) threads? of \d+ cores", lambda m: f"{m[1]} thread{'s' if m[1] != '1' else ''}", text)
