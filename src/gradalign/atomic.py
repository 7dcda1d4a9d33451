"""Atomic file writes: a temporary file in the same folder, flushed to disk, then renamed over the target."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Callable


def write_atomically(path: Path, write: Callable[[IO], None], binary: bool = False) -> Path:
    """Call `write(handle)` on a temporary file and rename it to `path`; nothing is left half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_torch(path: Path, state) -> Path:
    """torch.save `state` to `path` atomically (checkpoints)."""
    import torch

    return write_atomically(path, lambda handle: torch.save(state, handle), binary=True)


def json_cached(path: Path, compute: Callable[[], object]):
    """The JSON stored at `path`, else `compute()` stored there atomically; an unreadable file is recomputed."""
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            path.unlink()
    value = compute()
    write_atomically(path, lambda handle: json.dump(value, handle))
    return value
