"""The book build's memo of stored reads: each record and committed run parsed and checked once while its file is
unchanged (`memoized_reads`), for the stretch of a build in which nothing writes to the store.

The memo swaps `ResultStore.load` and `run_unit.read_entry` for remembering wrappers inside the block and restores
them after it: the callers look those names up on their modules when they call. (Module names need no memo:
`fingerprint.library_closure` finds them in one walk of the package.)
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
from pathlib import Path


_active = False  # a block is open (blocks nest: the inner one adds nothing)


def _stat_key(path: Path) -> tuple | None:
    """What changes whenever a file is written or replaced (an atomic write is a new inode and a new ctime)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@contextlib.contextmanager
def memoized_reads():
    """Within this block a stored record (`ResultStore.load`) or committed run entry (`run_unit.read_entry`) that
    was read and checked once is not parsed and checked again while its file is unchanged.

    The generated pages read the same few hundred files thousands of times (each record's preconditions read its
    runs again; the report, the scoreboards and the compute page read every record again), and each read parses
    strict JSON and recomputes the content digest: most of an unchanged second build (47 of 58 s). The memo is
    keyed by the file's path, inode, size, mtime and ctime and by the arguments of the check, and gives each caller a
    fresh copy (pickled when first read): what a caller gets is what a fresh read gives. A read that fails is not
    remembered (it warns each time, as before). Only for a stretch in which nothing writes records or runs (the
    pages, after the notebooks ran): a record's checks also read its runs."""
    global _active
    if _active:  # inside another memo block (the build's, around a report): its memo serves
        yield
        return
    from gradalign.records.results import ResultStore
    from gradalign.store import run_unit

    memo: dict = {}
    load, read_entry = ResultStore.load, run_unit.read_entry

    def remembered(key, read):
        if key[0] is not None and key in memo:
            return pickle.loads(memo[key])
        value = read()
        if value is not None and key[0] is not None:
            memo[key] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return value

    def memo_load(self, element_id, preset, digest, version):
        key = (_stat_key(self.path(element_id, preset, digest)), "record", element_id, preset, digest, version)
        return remembered(key, lambda: load(self, element_id, preset, digest, version))

    def memo_read_entry(folder, unit):
        run_key = unit.key  # a property that hashes the spec: once
        try:
            spec = json.dumps(unit.spec, sort_keys=True)  # as the entry stores it: tuples become lists
        except (TypeError, ValueError):
            return read_entry(folder, unit)
        path = run_unit.entry_path(folder, unit.kind, run_key)
        key = (_stat_key(path), "run", unit.kind, run_key, repr(unit.version), spec)
        return remembered(key, lambda: read_entry(folder, unit))

    ResultStore.load, run_unit.read_entry = memo_load, memo_read_entry
    _active = True
    try:
        yield
    finally:
        _active = False
        ResultStore.load, run_unit.read_entry = load, read_entry


def reads_once(function):
    """`function` run inside `memoized_reads`: for a page that reads every stored record and its runs many times
    (the report, the compute page, the book's markers) and writes none."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with memoized_reads():
            return function(*args, **kwargs)

    return wrapper
