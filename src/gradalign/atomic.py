"""Atomic file writes: a temporary file in the same folder, flushed to disk, then renamed over the target."""

from __future__ import annotations

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
