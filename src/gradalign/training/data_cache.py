"""The one data set kept in memory between runs (issue 26: one cache, not a module global per trainer).

Runs of an experiment share their data split (across seeds, variants and methods); holding the last one built
saves reloading and re-splitting it, and holding only one bounds the memory. The key names what was built
(the trainer's kind first, then every argument the split depends on, the device included).
"""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")
_SLOT: dict[tuple, object] = {}


def cached_data(key: tuple, build: Callable[[], T]) -> T:
    """The data set of `key`, built by `build()` unless it is the one held; it replaces the one held."""
    if key not in _SLOT:
        _SLOT.clear()
        _SLOT[key] = build()
    return _SLOT[key]  # type: ignore[return-value]


def clear() -> None:
    """Forget the data set held (tests; a caller that needs the memory back)."""
    _SLOT.clear()
