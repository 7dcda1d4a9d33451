"""A unit: one run-cache entry an experiment stores, as the exact arguments of `runcache.cached_run` plus a label;
and the committed run entries that let a record be assembled from runs made on several machines.

Running a unit anywhere that sees the same run cache stores the entry the experiment would have stored itself;
`experiments.units` registers each experiment's units and `gradalign sweep` computes them as separate jobs.
`compute` must pickle (a job receives it through cloudpickle): a module-level function, or a functools.partial
of one over picklable values.

**Committed runs.** Inside `committed_runs(folder, write)` (what `gradalign run` and `sweep` open at the `cpu`,
`gpu` and `paper` presets, folder = `<results>/runs`) a unit reads its entry from `<folder>/<kind>/<key>.json`
first, then from the local run cache (which also holds the checkpoints of runs in progress), and a finished run
is written there too (`write`): the run-cache entry (settings, metrics, curves; never weights) plus the
`provenance` of the run (the hardware it ran on, torch, the date, its wall time: of every sitting, when it resumed
from a checkpoint, then with their number as `parts`), under a digest of it all.
Such entries are committed with the records, so a record can be assembled from runs made on different machines
in different sittings: `runs_read()` lists every entry an experiment read, with its hardware, for the record's
provenance. An entry that does not check (it does not parse, another schema, kind, key, version or spec, an
edited content) is reported with a `RunCacheWarning` and the run is taken from the local cache or recomputed,
and its entry written again. Within `force_recompute()` committed entries are ignored as cached ones are.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from gradalign.store.atomic import (
    StoredJSONError,
    content_digest,
    dumps_strict,
    read_json_strict,
    write_json_atomically,
)
from gradalign.store.runcache import SCHEMA, RunCacheWarning, cached_run, forcing, run_key

ENTRY_FIELDS = ("schema", "kind", "key", "version", "spec", "value", "provenance", "digest")


@dataclass
class _Committed:
    folder: Path
    write: bool
    missing: Callable[["Unit"], Any] | None = None  # called for a unit with no committed entry, instead of computing it
    read: dict[tuple[str, str], dict] = field(default_factory=dict)  # (kind, key) -> its provenance


_COMMITTED: contextvars.ContextVar[_Committed | None] = contextvars.ContextVar("gradalign_committed", default=None)


@contextlib.contextmanager
def committed_runs(folder: Path, write: bool, missing: Callable[["Unit"], Any] | None = None) -> Iterator[_Committed]:
    """Within this block units read committed entries from `folder` first and (`write`) store finished ones there.
    With `missing`, nothing is computed or read from the run cache: a unit without a committed entry is
    `missing(unit)` (which raises, or gives its value), so an experiment is assembled from committed runs only."""
    token = _COMMITTED.set(_Committed(Path(folder), write, missing))
    try:
        yield _COMMITTED.get()
    finally:
        _COMMITTED.reset(token)


def reading_only() -> bool:
    """Whether this is a `committed_runs(..., missing=...)` block, which reads committed runs and writes nothing."""
    committed = _COMMITTED.get()
    return committed is not None and committed.missing is not None


def runs_read() -> dict[tuple[str, str], dict]:
    """(kind, key) -> provenance of every unit read or computed so far in the current `committed_runs` block."""
    committed = _COMMITTED.get()
    return dict(committed.read) if committed else {}


@dataclass(frozen=True)
class Unit:
    label: str  # what a person reads in a sweep's report: "trial 3 (seed 3)"
    kind: str
    spec: dict
    version: int
    compute: Callable[[Path], object]  # checkpoint path -> value, as cached_run calls it

    @property
    def key(self) -> str:
        """The run-cache key of its entry (the spec as the entry stores it: tuples become lists)."""
        return run_key(self.kind, json.loads(dumps_strict(self.spec)), self.version)

    def run(self, root: Path | None = None) -> Any:
        """Its value: the committed entry when there is one (inside `committed_runs`), else the run cache's,
        else computed and stored (and, inside `committed_runs(..., write=True)`, committed)."""
        committed = _COMMITTED.get()
        reading_only = committed is not None and committed.missing is not None  # never computes, even with --force
        if committed is not None and (reading_only or not forcing()):  # --force: committed entries are recomputed
            entry = read_entry(committed.folder, self)
            if entry is not None:
                committed.read[(self.kind, self.key)] = entry["provenance"]
                return entry["value"]
            if reading_only:
                return committed.missing(self)
        made: dict = {}
        value = cached_run(self.kind, self.spec, self.version, functools.partial(_timed, self.compute, made), root)
        if committed is not None:
            provenance = made.get("provenance") or _stored_provenance(self, root)
            committed.read[(self.kind, self.key)] = provenance
            if committed.write:
                write_entry(committed.folder, self, value, provenance)
        return value


def _timed(compute: Callable[[Path], object], made: dict, checkpoint: Path) -> object:
    """`compute(checkpoint)`, noting in `made` the provenance of the run: its hardware is that of the device its
    tensors lived on (`note_device`, which the training loop calls with its step's tensors), else of the device its
    value names. Its wall time is the whole run's: this sitting's, plus the training time of the sittings before it
    that a resumed checkpoint carries (`note_resumed`; a kill, a time box, another machine's GPU window); `parts`
    counts them."""
    start, earlier, devices = time.perf_counter(), {"seconds": 0.0, "parts": 0}, set()
    token, device_token = _EARLIER.set(earlier), _DEVICES.set(devices)
    try:
        value = compute(checkpoint)
    finally:
        _EARLIER.reset(token)
        _DEVICES.reset(device_token)
    seconds = time.perf_counter() - start + earlier["seconds"]
    made["provenance"] = run_provenance(value, seconds, earlier["parts"] + 1, devices)
    _PROVENANCE_SIDECAR[str(checkpoint.with_suffix(".json"))] = made["provenance"]
    return value


_EARLIER: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gradalign_earlier_sittings", default=None)
_DEVICES: contextvars.ContextVar[set | None] = contextvars.ContextVar("gradalign_run_devices", default=None)


def note_device(device) -> None:
    """The unit being computed trained tensors on `device` (a `torch.device`, or a tensor's or module's device):
    its entry's hardware is this device's (`run_provenance`), by construction. Nothing outside a unit."""
    devices = _DEVICES.get()
    if devices is not None and device is not None:
        devices.add(str(device))


def note_resumed(seconds: float, parts: int) -> None:
    """The training loop resumed a run from a checkpoint that carries `seconds` of training in `parts` earlier
    sittings: counted into the wall time of the unit being computed (none outside one)."""
    earlier = _EARLIER.get()
    if earlier is not None:
        earlier["seconds"] += max(float(seconds), 0.0)
        earlier["parts"] = max(earlier["parts"], int(parts))


_PROVENANCE_SIDECAR: dict[str, dict] = {}  # this process's computations, by entry path


def _stored_provenance(unit: Unit, root: Path | None) -> dict:
    """The provenance of a run read from the local cache: known when this process computed it; otherwise the
    local cache does not say where it ran."""
    from gradalign.store.runcache import cache_root

    path = (root or cache_root()) / "runs" / unit.kind / f"{unit.key}.json"
    return _PROVENANCE_SIDECAR.get(str(path)) or {"hardware": "unknown (read from the local run cache)"}


def run_provenance(value: object, wall_time_s: float, parts: int = 1, devices=()) -> dict:
    """Where a run ran: the hardware of the device its tensors lived on (`devices`, noted by `note_device`; an
    accelerator before the CPU when a run used both), else of the device its value names (`device`), else of this
    machine's CPU; its wall time, over all its `parts` (sittings: a resumed run's, as a record's provenance counts
    them, only when > 1)."""
    import torch

    from gradalign.environment import hardware, provenance

    noted = sorted(devices, key=lambda name: (name.startswith("cpu"), name))
    device = noted[0] if noted else value.get("device") if isinstance(value, dict) else None
    try:
        device = torch.device(device) if isinstance(device, str) else torch.device("cpu")
        hardware(device)
    except (RuntimeError, AssertionError, ValueError):
        device = torch.device("cpu")
    full = provenance(device, [], wall_time_s)
    names = ["hardware", "device", "torch", "git_commit", "wall_time_s", "date"]
    if device.type == "cpu":  # seeded CPU training rounds differently on each kind of machine; a GPU run does not
        names += ["cpu_kind", "machine_kind"]
    return {**{name: full[name] for name in names}, **({"parts": parts} if parts > 1 else {})}


def entry_path(folder: Path, kind: str, key: str) -> Path:
    return Path(folder) / kind / f"{key}.json"


def write_entry(folder: Path, unit: Unit, value: object, provenance: dict) -> Path:
    """The committed entry of `unit` (atomically, strict JSON, with a digest of its content)."""
    document = {
        "schema": SCHEMA,
        "kind": unit.kind,
        "key": unit.key,
        "version": unit.version,
        "spec": json.loads(dumps_strict(unit.spec)),
        "value": value,
        "provenance": provenance,
    }
    return write_json_atomically(
        entry_path(folder, unit.kind, unit.key), {**document, "digest": content_digest(document)}
    )


def read_entry(folder: Path, unit: Unit) -> dict | None:
    """The committed entry of `unit` when it is there and checks; None when missing, and a RunCacheWarning (then
    None) when it does not check."""
    path = entry_path(folder, unit.kind, unit.key)
    if not path.exists():
        return None
    try:
        return check_entry(
            read_json_strict(path), unit.kind, unit.key, unit.version, json.loads(dumps_strict(unit.spec))
        )
    except StoredJSONError as err:
        warnings.warn(f"ignoring committed run {path}: {err}; it will be recomputed", RunCacheWarning, stacklevel=3)
        return None


def check_entry(document: object, kind: str | None = None, key: str | None = None, version=None, spec=None) -> dict:
    """`document` when it is a committed entry whose key, spec and digest agree (and, where given, of this kind,
    key, version and spec); else a StoredJSONError saying why."""
    if not isinstance(document, dict):
        raise StoredJSONError(f"is not a JSON object (a {type(document).__name__})")
    if sorted(document) != sorted(ENTRY_FIELDS):
        raise StoredJSONError(f"has the fields {', '.join(sorted(document))}, expected {', '.join(ENTRY_FIELDS)}")
    if document["schema"] != SCHEMA or not isinstance(document["provenance"], dict):
        raise StoredJSONError(f"has schema {document['schema']!r} (expected {SCHEMA}) or no provenance object")
    if not isinstance(document["kind"], str) or not isinstance(document["spec"], dict):
        raise StoredJSONError("has a kind that is not a string or a spec that is not an object")
    expected = {"kind": kind, "key": key, "version": version, "spec": spec}
    for name, value in expected.items():
        if value is not None and document[name] != value:
            raise StoredJSONError(f"has another {name} than the one asked for")
    if run_key(document["kind"], document["spec"], document["version"]) != document["key"]:
        raise StoredJSONError("has a spec that does not hash to its key")
    if document["digest"] != content_digest({k: v for k, v in document.items() if k != "digest"}):
        raise StoredJSONError("has a digest that does not match its content (edited after it was computed)")
    return document


def without_defaults(settings, values: dict, names: tuple[str, ...]) -> dict:
    """`values` (`settings.to_dict()`) without the fields `names` where they hold their defaults: fields added
    after runs or records were stored under keys that lack them, which keep those keys that way (a value other
    than the default is in the key, so it still changes the run)."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    return {k: v for k, v in values.items() if not (k in names and getattr(settings, k) == defaults[k])}
