"""The run cache: sub-runs that several experiments share (a training run, a trial), computed once and verified on read.

An entry is keyed by its kind, its spec (everything the computation depends on, as JSON) and a version
bumped by hand when the computation's meaning changes: key = the first 16 hex digits of the sha256 of
them. It lives at `<root>/runs/<kind>/<key>.json` with a digest of its content, written atomically as
strict JSON, and is read back only when it parses, has this schema, kind, key, version and spec, and
its digest matches; anything else is reported with a `RunCacheWarning` and recomputed. A computation
may keep its in-progress checkpoint at `<key>.pt` beside the entry (deleted once the entry is written).
root = `$GRADALIGN_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/gradalign`; an empty GRADALIGN_CACHE is refused.
Within `force_recompute()` (the CLI's --force) stored entries and checkpoints are ignored.

A run is computed under a lock of its key (`<key>.lock`, an flock released when its holder dies): a second
process asking for the same run waits for the first and then reads its entry instead of training again.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from gradalign.store.atomic import (
    StorageError,
    StoredJSONError,
    content_digest,
    dumps_strict,
    read_json_strict,
    write_json_atomically,
)
from gradalign.errors import ConfigError
from gradalign.store.store_root import env_folder

SCHEMA = 1
FIELDS = ("schema", "kind", "key", "version", "spec", "value", "digest")
_TYPES = (
    ("schema", int, "an integer"),
    ("kind", str, "a string"),
    ("key", str, "a string"),
    ("version", int, "an integer"),
    ("spec", dict, "an object"),
    ("digest", str, "a string"),
)

# Entries recomputed inside the current force_recompute() block (None outside one): read back, not redone.
_FORCED: contextvars.ContextVar[set[Path] | None] = contextvars.ContextVar("gradalign_force_recompute", default=None)


class RunCacheWarning(UserWarning):
    """A cached run was unusable and will be recomputed."""


warnings.simplefilter("always", RunCacheWarning)


def cache_root() -> Path:
    """$GRADALIGN_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/gradalign; ConfigError when that is not a folder."""
    if env_folder("GRADALIGN_CACHE", "the default (${XDG_CACHE_HOME:-~/.cache}/gradalign)"):
        root, source = Path(os.environ["GRADALIGN_CACHE"]).expanduser(), "GRADALIGN_CACHE"
    else:
        root, source = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gradalign", "XDG_CACHE_HOME"
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(f"run cache {root} cannot be a folder: {folder} is a file; set {source} to a folder")
            break
    return root


@contextlib.contextmanager
def force_recompute() -> Iterator[None]:
    """Within this block cached_run recomputes every entry once, ignoring stored entries and checkpoints."""
    token = _FORCED.set(set())
    try:
        yield
    finally:
        _FORCED.reset(token)


def forcing() -> bool:
    """Whether the caller is inside `force_recompute()` (stored entries are then recomputed)."""
    return _FORCED.get() is not None


def run_key(kind: str, spec: dict, version: int) -> str:
    """The entry's key: 16 hex digits of the sha256 of (kind, spec, version)."""
    payload = json.dumps({"kind": kind, "spec": spec, "version": version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def cached_run(
    kind: str,
    spec: dict,
    version: int,
    compute: Callable[[Path], object],
    root: Path | None = None,
    *,
    lock: bool = True,
) -> Any:
    """The stored value of this run, else `compute(checkpoint_path)` stored; the value as JSON reads it back.

    `lock`: compute under the key's lock, so that an identical run elsewhere waits and then reads this one's
    entry (False: only look, as `gradalign sweep` does to find what is missing)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", kind):
        raise ValueError(f"run kind must be a plain name (letters, digits, _ . -); got {kind!r}")
    spec = json.loads(dumps_strict(spec))  # tuples become lists, as the entry stores them
    key = run_key(kind, spec, version)
    folder = (root or cache_root()) / "runs" / kind
    entry, checkpoint = folder / f"{key}.json", folder / f"{key}.pt"
    expected = {"schema": SCHEMA, "kind": kind, "key": key, "version": version}
    forced = _FORCED.get()
    if forced is None or entry in forced:
        value = _usable(entry, expected, spec)
        if value is not _MISSING:
            return value
    if not lock:
        return _compute(entry, checkpoint, expected, spec, compute, forced)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StorageError(f"cannot write the run cache folder {folder}: {err.strerror or err}") from None
    with key_lock(folder / f"{key}.lock", f"{kind} run {key}"):
        if forced is None:  # another process may have stored it while this one waited
            value = _usable(entry, expected, spec, report=False)
            if value is not _MISSING:
                return value
        return _compute(entry, checkpoint, expected, spec, compute, forced)


_MISSING = object()


def _usable(entry: Path, expected: dict, spec: dict, report: bool = True) -> Any:
    """The entry's value, or _MISSING when there is none or it does not check (reported as a RunCacheWarning)."""
    if not entry.exists():
        return _MISSING
    try:
        return _read(entry, expected, spec)
    except StoredJSONError as err:
        if report:
            warnings.warn(f"ignoring cached run {entry}: {err}; it will be recomputed", RunCacheWarning, stacklevel=3)
        return _MISSING


def _compute(entry: Path, checkpoint: Path, expected: dict, spec: dict, compute, forced: set | None) -> Any:
    if entry.is_dir():  # found before the compute, not after it
        raise StorageError(f"run cache entry {entry} is a folder, where the run's file goes; move it away")
    if forced is not None and entry not in forced and not checkpoint.is_dir():
        checkpoint.unlink(missing_ok=True)
    entry.parent.mkdir(parents=True, exist_ok=True)
    value = json.loads(dumps_strict(compute(checkpoint)))
    document = {**expected, "spec": spec, "value": value}
    document = {name: document[name] for name in FIELDS if name != "digest"}
    write_json_atomically(entry, {**document, "digest": content_digest(document)})
    checkpoint.unlink(missing_ok=True)
    if forced is not None:
        forced.add(entry)
    return value


@contextlib.contextmanager
def key_lock(path: Path, what: str) -> Iterator[None]:
    """Hold the flock at `path`; when another process holds it, say so on stderr once and wait.

    Not under torchrun (WORLD_SIZE > 1): its ranks compute the same run together, each step waiting for the
    others, so a rank that waited for another's lock would deadlock the job."""
    import sys

    from filelock import FileLock, Timeout  # installed with torch (one of its own requirements)

    if os.environ.get("WORLD_SIZE", "").strip() not in ("", "1"):
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StorageError(f"cannot create the lock folder {path.parent}: {err.strerror or err}") from None
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"gradalign: waiting for another process computing the same {what} ({path})", file=sys.stderr)
        _acquire(lock, path)
    except OSError as err:
        raise StorageError(f"cannot lock {path}: {err.strerror or err}") from None
    try:
        yield
    finally:
        lock.release()


def _acquire(lock, path: Path) -> None:
    try:
        lock.acquire()
    except OSError as err:
        raise StorageError(f"cannot lock {path}: {err.strerror or err}") from None


def _read(entry: Path, expected: dict, spec: dict) -> Any:
    """The value stored in `entry`; StoredJSONError with the reason when anything does not check."""
    document = read_json_strict(entry)
    if not isinstance(document, dict):
        raise StoredJSONError(f"is not a JSON object (a {type(document).__name__})")
    missing = [name for name in FIELDS if name not in document]
    if missing:
        raise StoredJSONError(f"lacks {', '.join(missing)}")
    extra = sorted(set(document) - set(FIELDS))
    if extra:
        raise StoredJSONError(f"has fields an entry does not hold: {', '.join(extra)}")
    for name, types, words in _TYPES:
        if not isinstance(document[name], types) or isinstance(document[name], bool):
            raise StoredJSONError(f"has {name} of type {type(document[name]).__name__}, expected {words}")
    if not re.fullmatch(r"[0-9a-f]{64}", document["digest"]):
        raise StoredJSONError("has a digest that is not 64 hex digits")
    for name, value in expected.items():
        if document[name] != value:
            raise StoredJSONError(f"has {name} {document[name]!r}, expected {value!r}")
    if run_key(document["kind"], document["spec"], document["version"]) != document["key"]:
        raise StoredJSONError("has a spec that does not hash to its key")
    if document["spec"] != spec:
        raise StoredJSONError("has a spec other than the one asked for")
    if document["digest"] != content_digest(document):
        raise StoredJSONError("has a digest that does not match its content (edited after it was computed)")
    return document["value"]
