"""`gradalign bench <name>`: measure a benchmark (`benchmarks.registry`) and store it like an experiment record.

A record lives at `<results>/bench/<name>/<device kind>.json` (cpu, or cuda), written atomically with a digest
of its content and the provenance of the machine (hardware, torch, threads, commit); a stored file that was
edited or cut short is reported and never shown. A new measurement on the same kind of device replaces the
old one. The Performance page (`pages.performance_markdown`) shows every stored record beside its goals.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from gradalign.store.atomic import StoredJSONError, content_digest, read_json_strict, write_json_atomically
from gradalign.benchmarks.records import goal_rows
from gradalign.benchmarks.registry import BENCHMARKS
from gradalign.errors import ConfigError
from gradalign.records.results import ResultStore

SCHEMA = 1


class BenchStore:
    """`<root>/bench/<name>/<device kind>.json`; root = the results store's root."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(ResultStore(root).root) / "bench"

    def path(self, name: str, device_kind: str) -> Path:
        return self.root / name / f"{device_kind}.json"

    def save(self, record: dict) -> Path:
        return write_json_atomically(self.path(record["name"], record["device_kind"]), record)

    def load(self, name: str, device_kind: str) -> dict | None:
        """The stored record, or None when there is none; an unusable file is reported and treated as missing."""
        path = self.path(name, device_kind)
        return self._read(path, name, device_kind) if path.exists() else None

    def window_records(self, name: str) -> list[dict]:
        """The CUDA records GPU windows brought back for `name` (`<name>/gpu-<device>[-quick].json`, placed by
        `gradalign import`), newest first; unusable files are reported and left out."""
        found = [self._read(p, name, "cuda") for p in sorted((self.root / name).glob("gpu-*.json"))]
        return sorted((r for r in found if r is not None), key=lambda r: r["provenance"].get("date", ""), reverse=True)

    def _read(self, path: Path, name: str, device_kind: str) -> dict | None:
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


def run_benchmark(name: str, device: str = "auto", quick: bool = False, root: str | Path | None = None) -> dict:
    """Measure benchmark `name` on `device`, store the record (unless `quick`) and return it.

    `quick` runs tiny sizes to test the code path; its record is returned, never stored."""
    from gradalign.environment import provenance
    from gradalign.store.fingerprint import code_fingerprint
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
    provenance_ = {**provenance(dev, [0], wall), "quick": quick, "code": code_fingerprint(bench.measure.__module__)}
    document = {
        "schema": SCHEMA,
        "name": name,
        "device_kind": dev.type,
        "measurement": measurement,
        "goals": goal_rows(bench, measurement, dev.type),  # {"ratio", "goal", "measured", "met"} each
        "provenance": provenance_,
    }
    record = {**document, "digest": content_digest(document)}
    if not quick:
        BenchStore(root).save(record)
    return record
