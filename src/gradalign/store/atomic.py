"""Atomic file writes and strict JSON, for everything the library stores (records, run cache, checkpoints).

A write goes to a temporary file in the same folder, is flushed to disk, made readable (0644) and
renamed over the target, so a reader sees the old file or the new one, never half of one. Stored JSON
is strict: NaN and Infinity are not JSON, so writing one is an error naming where it is (before any
file is touched), and reading one is an error too. A digest of a document's canonical JSON lets a
reader tell when a stored file was edited.

Storage failures are one line (`StorageError`), never a traceback: a folder that cannot be written, a full
disk. A JSON document whose write fails is kept in a fallback file that the error names, so that a result
computed for an hour is not lost to a full disk. A temporary file carries its writer's process id, so that
`remove_stale_temporaries` can delete those of killed writers. A stored JSON object with a key twice is
refused on reading (which value was meant?).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

from gradalign.errors import GradalignError

FILE_MODE = 0o644


class NonFiniteValueError(GradalignError, ValueError):
    """A NaN or an infinity where stored JSON is written or read."""


class StoredJSONError(GradalignError, ValueError):
    """A stored JSON file cannot be read; the message is the reason, one line."""


class StorageError(GradalignError, OSError):
    """A file or folder could not be written (read-only, full disk, a file where a folder should be)."""


MIN_FREE_BYTES = 64 * 2**20  # room a run needs in each root it writes: records, run entries, checkpoints
STALE_AFTER_S = 60.0  # a temporary file of a dead writer, untouched this long, is removed
ORPHAN_AFTER_S = 24 * 3600.0  # a temporary file without a writer's pid (older format), untouched this long
# The names tempfile.mkstemp gives our temporary files (8 random characters): `<target>.<random>.pid<N>.tmp`
# (with the writer's pid), `.gradalign-probe.<random>.pid<N>.tmp` (check_writable) and, from before the pid was
# named, `<target><random>.tmp`, where a target is a .json or .pt file. Nothing else is ever removed.
_TEMPORARY_PID = re.compile(r"^(?:.+\.(?:json|pt)|\.gradalign-probe)\.[a-z0-9_]{8}\.pid(\d+)\.tmp$")
_TEMPORARY_OLD = re.compile(r"^.+\.(?:json|pt)[a-z0-9_]{8}\.tmp$")


def _why(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "the disk is full"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if err.errno in (errno.ENOTDIR, errno.EEXIST):
        return "a file stands where a folder should be"
    return " ".join(str(err.strerror or err).split())


def write_atomically(path: Path, write: Callable[[IO], None], binary: bool = False) -> Path:
    """Call `write(handle)` on a temporary file and rename it to `path`; nothing is left half-written.

    An OSError (full disk, read-only folder) becomes a one-line StorageError naming `path`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=f".pid{os.getpid()}.tmp")
    except OSError as err:
        raise StorageError(f"cannot write {path}: {_why(err)}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {_why(err)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(root: Path, what: str, min_free: int = MIN_FREE_BYTES) -> None:
    """Before any compute: `root` (created if missing) takes a file and has `min_free` bytes free, else a
    one-line StorageError saying which and what to do."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".gradalign-probe.", suffix=f".pid{os.getpid()}.tmp")
        os.close(fd)
        os.unlink(probe)
        free = shutil.disk_usage(root).free
    except OSError as err:
        raise StorageError(f"{what} {root} cannot be written ({_why(err)}); give another") from None
    if free < min_free:
        raise StorageError(
            f"{what} {root} has {free / 2**20:.0f} MiB free, less than the {min_free / 2**20:.0f} MiB a run may "
            "write; free some space or give another"
        )


def remove_stale_temporaries(root: Path, now: float | None = None) -> list[Path]:
    """Delete the temporary files under `root` that killed atomic writes left behind; the paths removed.

    A temporary file is stale when its writer (the pid in its name) is not alive here and it has not been
    touched for STALE_AFTER_S, or, without a pid, when untouched for ORPHAN_AFTER_S. Another process's write in
    progress is left alone."""
    root, now = Path(root), time.time() if now is None else now
    removed = []
    if not root.is_dir():
        return removed
    for path in root.rglob("*.tmp"):
        pid = _TEMPORARY_PID.match(path.name)
        if not pid and not _TEMPORARY_OLD.match(path.name):
            continue
        try:
            age = now - path.stat().st_mtime
        except OSError:
            continue
        stale = age > STALE_AFTER_S and not _alive(int(pid.group(1))) if pid else age > ORPHAN_AFTER_S
        if stale:
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # exists, another user's (or a number we cannot ask about): keep its file
    return True


def keep_in_fallback(path: Path, text: str) -> Path | None:
    """Write `text` (what could not be stored at `path`) to a fallback file; its path, or None if none worked."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    name = f"{path.stem}.{stamp}.pid{os.getpid()}{path.suffix}"
    for folder in (Path(tempfile.gettempdir()) / "gradalign-unsaved", Path.home() / "gradalign-unsaved"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / name
            target.write_text(text)
            return target
        except OSError:
            continue
    return None


def non_finite_path(value: Any, path: str = "") -> str | None:
    """The JSON path (`metrics.table.lga.test_loss`, `curves.loss[3]`) of the first NaN or infinity, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path or "the top level"
    if isinstance(value, dict):
        children = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        children = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    return next((found for child, item in children if (found := non_finite_path(item, child))), None)


def dumps_strict(value: Any, **kw) -> str:
    """json.dumps without NaN or Infinity: a non-finite number raises NonFiniteValueError naming its path. The path
    is looked for only when json.dumps refused a value (walking every value first took a quarter of a book build)."""
    try:
        return json.dumps(value, allow_nan=False, **kw)
    except ValueError as err:
        if "Out of range float" not in str(err):
            raise  # not a non-finite number (a circular reference)
        where = non_finite_path(value) or "a value json.dumps converted"
        raise NonFiniteValueError(f"cannot store a non-finite number at {where}: JSON has no NaN or Infinity") from None


def dump_json_strict(value: Any, handle: IO, **kw) -> None:
    """json.dump without NaN or Infinity; the check runs before anything is written to `handle`."""
    handle.write(dumps_strict(value, **kw))


def _reject_constant(name: str) -> None:
    raise NonFiniteValueError(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise NonFiniteValueError(text)
    return value


class DuplicateKeyError(GradalignError, ValueError):
    """A JSON object names a key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(f"has the key {key!r} twice in one object")
        seen[key] = value
    return seen


def loads_strict(text: str) -> Any:
    """json.loads that rejects NaN, Infinity, -Infinity and overflowing numbers (NonFiniteValueError naming where)
    and an object with a key twice (DuplicateKeyError)."""
    try:
        return json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except NonFiniteValueError as err:
        try:
            where = non_finite_path(json.loads(text))
        except json.JSONDecodeError:
            where = None
        raise NonFiniteValueError(f"holds {err} at {where or 'an unknown place'}, which JSON does not allow") from None


def write_json_atomically(path: Path, value: Any) -> Path:
    """Strict JSON (indent 1, sorted keys, trailing newline) written atomically; checked before any file opens.

    When the write fails (a StorageError), the text is kept in a fallback file and the error names it."""
    text = dumps_strict(value, indent=1, sort_keys=True) + "\n"
    try:
        return write_atomically(path, lambda handle: handle.write(text))
    except StorageError as err:
        kept = keep_in_fallback(path, text)
        where = f"what was computed is kept in {kept}" if kept else "and no fallback file could be written either"
        raise StorageError(f"{err}; {where} (copy it to {path} once there is room)") from None


def read_json_strict(path: Path) -> Any:
    """The strict JSON stored at `path`; StoredJSONError saying why when it is empty, binary, cut short or not JSON."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise StoredJSONError(f"is not UTF-8 text (binary garbage? {err})") from None
    except OSError as err:
        raise StoredJSONError(f"cannot be read ({type(err).__name__}: {err})") from None
    body = text.rstrip()
    if not body:
        raise StoredJSONError("is empty")
    try:
        return loads_strict(text)
    except (NonFiniteValueError, DuplicateKeyError) as err:
        raise StoredJSONError(str(err)) from None
    except json.JSONDecodeError as err:
        cut = not err.msg.startswith("Extra data") and (err.pos >= len(body) or not body.endswith(("}", "]")))
        raise StoredJSONError(f"is {'truncated' if cut else 'not valid JSON'} ({err})") from None


def content_digest(document: dict) -> str:
    """sha256 (hex) of the canonical strict JSON of `document` without its "digest" key."""
    body = json.loads(dumps_strict({key: value for key, value in document.items() if key != "digest"}))
    canonical = dumps_strict(body, sort_keys=True, separators=(",", ":"))  # keys and tuples as JSON stores them
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_digested(path: Path, document: dict) -> Path:
    """Write `document` atomically with its `content_digest`, so that an edit or a cut is found when read."""
    return write_json_atomically(path, {**document, "digest": content_digest(document)})


def read_digested(path: Path) -> dict | None:
    """The document `write_digested` stored at `path`, None when there is none; a StoredJSONError naming the path when
    it is cut short, not JSON, or edited (its digest no longer matches its content)."""
    if not path.exists():
        return None
    try:
        document = read_json_strict(path)
    except StoredJSONError as err:
        raise StoredJSONError(f"{path}: {err}") from None
    if not isinstance(document, dict) or document.get("digest") != content_digest(document):
        raise StoredJSONError(f"{path}: its digest does not match its content (edited?)")
    return document
