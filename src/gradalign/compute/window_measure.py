"""What a GPU window measures besides its runs (issue 45, items 1 and 2): the clean benchmark slot, each unit's
throughput, and the CUDA tests.

**The benchmark slot.** `bench --quick` (every benchmark at its tiny sizes) runs first and alone: before any worker
starts and before the CUDA tests, so that nothing else shares the GPU while it is timed (`bench_slot`). Its records
come back in `bench.json` as produced (digested, with their provenance: the GPU's name, torch, the commit, `quick`),
and `gradalign import` keeps each CUDA one as `results/bench/<name>/gpu-<device>-quick.json` (`gpu_bench_file`);
quick sizes test the code path and time launch-bound steps, so they never replace a full-size `cuda.json`.

**Throughput.** Each unit's images (or samples) per second of training, read from the value the run returns
(`unit_throughput`; what each kind records is in `THROUGHPUT`), kept in its row of `window.json`; the window
summarises them per unit kind (`throughput_by_kind`).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time

CUDA_TESTS = ("tests/test_fast_path.py", "tests/test_fast_path_agreement.py", "tests/test_activation_memory.py")

THROUGHPUT = {  # unit kind -> what its rate counts, from what the run returns
    "lga.ssl": "images (labeled + unlabeled batches) per second of train_seconds",
    "metagrad.ssl": "images (labeled + unlabeled batches) per second of train_seconds",
    "sgr.local": "training images per second of train_seconds (epochs × steps × batch)",
    "sgr.local-heldout": "training images per second of train_seconds (epochs × steps × batch)",
    "sgr.bpfree": "training images per second of train_seconds (epochs × steps × batch)",
    "isoloss.siamese": "pairs of views per second of training (the run's images_per_s)",
}
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,59}")


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def unit_throughput(kind: str, spec: dict, value: object) -> dict | None:
    """{"per_s", "what"} of a unit's run, from its value and spec (`THROUGHPUT`); None for a kind that records no
    training time (the synthetic LGA shells) or a value that lacks it."""
    if kind not in THROUGHPUT or not isinstance(value, dict) or not isinstance(spec, dict):
        return None
    protocol = spec.get("protocol") if isinstance(spec.get("protocol"), dict) else {}
    seconds = _number(value.get("train_seconds"))
    per_s = None
    try:
        if kind in ("lga.ssl", "metagrad.ssl") and seconds:
            per_s = protocol["steps"] * (protocol["batch_labeled"] + protocol["batch_unlabeled"]) / seconds
        elif kind in ("sgr.local", "sgr.local-heldout", "sgr.bpfree") and seconds:
            per_s = value["epochs_done"] * value["steps_per_epoch"] * protocol["batch_size"] / seconds
        elif kind == "isoloss.siamese":
            per_s = value.get("images_per_s")
    except (KeyError, TypeError):
        return None
    per_s = _number(per_s)
    return {"per_s": round(per_s, 1), "what": THROUGHPUT[kind]} if per_s else None


def throughput_by_kind(units: list[dict]) -> dict[str, dict]:
    """kind -> {units, median, least, most (per second), what} over the finished units that report a rate."""
    rates: dict[str, list[float]] = {}
    for unit in units:
        rate = unit.get("throughput")
        if unit.get("status") == "finished" and isinstance(rate, dict) and _number(rate.get("per_s")):
            rates.setdefault(str(unit.get("kind", "")), []).append(float(rate["per_s"]))
    return {
        kind: {
            "units": len(values),
            "median_per_s": round(statistics.median(values), 1),
            "least_per_s": round(min(values), 1),
            "most_per_s": round(max(values), 1),
            "what": THROUGHPUT.get(kind, ""),
        }
        for kind, values in sorted(rates.items())
    }


def bench_slot(dev) -> tuple[dict, dict]:
    """Every benchmark at its quick sizes on `dev`, alone (the window calls it before any worker or test starts):
    (name -> its record or {"error"}, the slot's {"alone", "seconds"})."""
    from gradalign.compute.bench import run_benchmark
    from gradalign.benchmarks.registry import BENCHMARKS

    records, start = {}, time.monotonic()
    for name in BENCHMARKS:
        try:
            records[name] = run_benchmark(name, str(dev), quick=True)
        except Exception as err:  # noqa: BLE001 (a failed benchmark is reported; the window goes on)
            records[name] = {"error": f"{type(err).__name__}: {err}"}
    return records, {"alone": True, "seconds": round(time.monotonic() - start, 1)}


def device_slug(hardware: object) -> str | None:
    """ "nvidia-h100-80gb-hbm3" of "NVIDIA H100 80GB HBM3 (CUDA 13.0)": the GPU's name as a file name part."""
    if not isinstance(hardware, str):
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", hardware.split(" (")[0].lower()).strip("-")[:60].strip("-")
    return slug if _SLUG.fullmatch(slug) else None


def gpu_bench_file(name: str, record: object) -> str | None:
    """`<name>/gpu-<device>[-quick].json` where `gradalign import` keeps a window's CUDA benchmark record; None for
    a record of another device, an error, or one whose benchmark or device does not make a clean name."""
    from gradalign.benchmarks.registry import BENCHMARKS

    if name not in BENCHMARKS or not isinstance(record, dict) or record.get("device_kind") != "cuda":
        return None
    provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    slug = device_slug(provenance.get("hardware"))
    if slug is None or record.get("name") != name:
        return None
    return f"{name}/gpu-{slug}{'-quick' if provenance.get('quick') else ''}.json"


def cuda_tests(dev, seconds_left) -> dict:
    """The CUDA tests at smoke, in a subprocess, within the box; skipped without CUDA or pytest."""
    import importlib.util

    from gradalign.environment import project_root

    if dev.type != "cuda":
        return {"outcome": "skipped: no CUDA device"}
    files = [f for f in CUDA_TESTS if (project_root() / f).exists()]
    if importlib.util.find_spec("pytest") is None or not files:
        return {"outcome": "skipped: pytest or the tests are not here"}
    timeout = max(10.0, min(300.0, (seconds_left() or 300.0) - 30))
    env = {**os.environ, "GRADALIGN_PRESET": "smoke"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=project_root(), env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"outcome": f"stopped after {timeout:.0f} s", "seconds": timeout}
    lines = done.stdout.strip().splitlines() or [""]
    failures = [line[:300] for line in lines if line.startswith(("FAILED", "ERROR"))]  # pytest's -ra summary
    return {
        "outcome": lines[-1],
        "returncode": done.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "failures": failures,
    }
