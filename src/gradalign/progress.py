"""Progress bars for long runs (tqdm on stderr; quiet when GRADALIGN_PROGRESS=0 or tqdm is not installed)."""

from __future__ import annotations

import os


class _Silent:
    """The part of tqdm's interface the library uses, doing nothing (for machines without tqdm)."""

    def __init__(self, iterable=None):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **values) -> None:
        pass


def progress(iterable, desc: str = "", total: int | None = None, disable: bool = False):
    try:
        from tqdm import tqdm
    except ImportError:  # `gradalign run` needs only torch and numpy
        return _Silent(iterable)
    quiet = disable or os.environ.get("GRADALIGN_PROGRESS", "1") == "0"
    return tqdm(iterable, desc=desc, total=total, disable=quiet, mininterval=1.0, leave=False)
