"""Progress bars for long runs (tqdm on stderr; quiet when GRADALIGN_PROGRESS=0)."""

from __future__ import annotations

import os


def progress(iterable, desc: str = "", total: int | None = None, disable: bool = False):
    from tqdm import tqdm

    quiet = disable or os.environ.get("GRADALIGN_PROGRESS", "1") == "0"
    return tqdm(iterable, desc=desc, total=total, disable=quiet, mininterval=1.0, leave=False)
