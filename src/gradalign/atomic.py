"""Atomic file writes and strict JSON, for everything the library stores (records, run cache, checkpoints).

A write goes to a temporary file in the same folder, is flushed to disk, made readable (0644) and
renamed over the target, so a reader sees the old file or the new one, never half of one. Stored JSON
is strict: NaN and Infinity are not JSON, so writing one is an error naming where it is (before any
file is touched), and reading one is an error too. A digest of a document's canonical JSON lets a
reader tell when a stored file was edited.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

from gradalign.errors import GradalignError

FILE_MODE = 0o644


class NonFiniteValueError(GradalignError, ValueError):
    """A NaN or an infinity where stored JSON is written or read."""


class StoredJSONError(GradalignError, ValueError):
    """A stored JSON file cannot be read; the message is the reason, one line."""


def write_atomically(path: Path, write: Callable[[IO], None], binary: bool = False) -> Path:
    """Call `write(handle)` on a temporary file and rename it to `path`; nothing is left half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
    """json.dumps without NaN or Infinity: a non-finite number raises NonFiniteValueError naming its path."""
    where = non_finite_path(value)
    if where is not None:
        raise NonFiniteValueError(f"cannot store a non-finite number at {where}: JSON has no NaN or Infinity")
    return json.dumps(value, allow_nan=False, **kw)


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


def loads_strict(text: str) -> Any:
    """json.loads that rejects NaN, Infinity, -Infinity and overflowing numbers (NonFiniteValueError naming where)."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except NonFiniteValueError as err:
        try:
            where = non_finite_path(json.loads(text))
        except json.JSONDecodeError:
            where = None
        raise NonFiniteValueError(f"holds {err} at {where or 'an unknown place'}, which JSON does not allow") from None


def write_json_atomically(path: Path, value: Any) -> Path:
    """Strict JSON (indent 1, sorted keys, trailing newline) written atomically; checked before any file opens."""
    text = dumps_strict(value, indent=1, sort_keys=True) + "\n"
    return write_atomically(path, lambda handle: handle.write(text))


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
    except NonFiniteValueError as err:
        raise StoredJSONError(str(err)) from None
    except json.JSONDecodeError as err:
        cut = not err.msg.startswith("Extra data") and (err.pos >= len(body) or not body.endswith(("}", "]")))
        raise StoredJSONError(f"is {'truncated' if cut else 'not valid JSON'} ({err})") from None


def content_digest(document: dict) -> str:
    """sha256 (hex) of the canonical strict JSON of `document` without its "digest" key."""
    body = json.loads(dumps_strict({key: value for key, value in document.items() if key != "digest"}))
    canonical = dumps_strict(body, sort_keys=True, separators=(",", ":"))  # keys and tuples as JSON stores them
    return hashlib.sha256(canonical.encode()).hexdigest()
