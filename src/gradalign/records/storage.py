"""The storage checks of the command line, before any compute: where records and runs go, and that they can.

`result_store` refuses an empty --results or GRADALIGN_RESULTS (it would mean the checkout's committed
records); `check_results_root` a root that is a file; `prepare_storage` checks that the results root and the
run cache take files and have room (one-line StorageError) and removes the temporary files that killed writes
left there; `record_lock` serialises identical runs (the second waits, then loads the first one's record);
`check_output_file` an --out that cannot be written. Every other command checks its folders the same way
(`check_folder`: empty, a file, not creatable, not writable, no room), reads a results root only when it is a
folder (`check_results_exist`), refuses an empty GRADALIGN_DATA as the other paths are (`check_data_env`),
writes its files atomically (`write_text`), and the command line turns any storage error left into one line
(`os_error_line`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gradalign.errors import ConfigError
from gradalign.store.store_root import env_folder


@contextlib.contextmanager
def reported_already(path: Path):
    """Within: no second RecordWarning about the record at `path` (reported once, before the lock)."""
    import re
    import warnings

    from gradalign.records.results import RecordWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", f"ignoring stored record {re.escape(str(path))}:", RecordWarning)
        yield


def result_store(given: str | None):
    """The results store of --results, else $GRADALIGN_RESULTS, else the checkout's results/; an empty path
    (`--results ""`, `GRADALIGN_RESULTS=`) is refused rather than read as "the checkout's committed records"."""
    from gradalign.records.results import ResultStore

    if given is not None and not given.strip():
        raise ConfigError("--results is empty; give a folder, or leave it out for $GRADALIGN_RESULTS or ./results")
    if given is None:
        env_folder("GRADALIGN_RESULTS", "./results")
    return ResultStore(given) if given else ResultStore()


def run_cache_root() -> Path:
    """The run cache root (ConfigError when GRADALIGN_CACHE is empty or names a file)."""
    from gradalign.store.runcache import cache_root

    return cache_root()


def prepare_storage(results: Path, cache: Path) -> None:
    """Before compute: both roots take files and have room (StorageError otherwise); the temporary files that
    killed writes left in them are removed."""
    from gradalign.store.atomic import check_writable, remove_stale_temporaries

    check_writable(results, "results root")
    check_writable(cache, "run cache (GRADALIGN_CACHE)")
    for root in (results, cache):
        remove_stale_temporaries(root)


@contextlib.contextmanager
def record_lock(cache: Path, element_id: str, preset: str, config_hash: str):
    """One `gradalign run` per record key at a time: a second identical run waits here, then loads the first
    one's record instead of computing it again."""
    from gradalign.store.runcache import key_lock

    with key_lock(cache / "locks" / f"{element_id}-{preset}-{config_hash}.lock", f"record {element_id} [{preset}]"):
        yield


def check_results_root(root: Path) -> None:
    """The results root must be a folder, or a path whose nearest existing parent is a folder."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"results root {str(root)!r} is a file; give a folder (it is created if missing)")
    ancestor = nearest_existing(root)
    if not ancestor.is_dir():
        raise ConfigError(f"results root {str(root)!r} cannot be created: {str(ancestor)!r} is a file, not a folder")


def check_results_writable(root: Path) -> None:
    """Before computing: the record's folder must be creatable and writable."""
    ancestor = nearest_existing(root)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(
            f"results root {str(root)!r} is not writable ({str(ancestor)!r} is read-only); "
            "give another with --results or GRADALIGN_RESULTS"
        )


def nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def check_output_file(text: str) -> None:
    """An --out file must be writable: not empty, not a folder, its folder existing."""
    if not text.strip():
        raise ConfigError("--out is empty; give a file name")
    path = Path(text)
    if path.is_dir():
        raise ConfigError(f"--out {str(path)!r} is a folder; give a file name")
    if not path.absolute().parent.is_dir():
        raise ConfigError(f"--out {str(path)!r}: its folder {str(path.absolute().parent)!r} does not exist")


def check_folder(path: Path | str, what: str, min_free: int | None = None) -> Path:
    """A folder a command writes into, checked as `run` checks its results root: not empty, not a file, creatable
    (its nearest existing parent a folder), then created, taking a file and with room (`atomic.check_writable`);
    a one-line ConfigError or StorageError otherwise."""
    from gradalign.store.atomic import MIN_FREE_BYTES, check_writable

    if not str(path).strip():
        raise ConfigError(f"{what} is empty; give a folder")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file; give a folder")
    ancestor = nearest_existing(path)
    if not ancestor.is_dir():
        raise ConfigError(f"{what} {str(path)!r} cannot be created: {str(ancestor)!r} is a file, not a folder")
    check_writable(path, what, MIN_FREE_BYTES if min_free is None else min_free)
    return path


def check_results_exist(root: Path) -> None:
    """A results root that is read (`report`, `rederive`) must be a folder that exists."""
    if not root.exists():
        raise ConfigError(
            f"results root {str(root)!r} does not exist; give the folder that holds the records "
            "(--results or GRADALIGN_RESULTS)"
        )
    if not root.is_dir():
        raise ConfigError(f"results root {str(root)!r} is a file; give the folder that holds the records")


def check_data_env() -> None:
    """An empty GRADALIGN_DATA is refused, as an empty GRADALIGN_RESULTS or GRADALIGN_CACHE is (the data loaders
    refuse it too, through the same rule: `store_root.env_folder`)."""
    env_folder("GRADALIGN_DATA", "./data")


def write_text(path: Path, text: str) -> Path:
    """`text` written atomically at `path`: a failed write (full disk, read-only) is a one-line StorageError and
    leaves no partial file."""
    from gradalign.store.atomic import write_atomically

    return write_atomically(Path(path), lambda handle: handle.write(text))


def os_error_line(err: OSError) -> str:
    """One line for a storage error no command caught (a permission, a file where a folder goes, a full disk)."""
    from gradalign.store.atomic import _why

    where = " -> ".join(str(name) for name in (err.filename, err.filename2) if name is not None)
    return f"cannot {'use ' + where if where else 'read or write a file'}: {_why(err)}"


def check_clean_tree(preset: str, root: Path, allow_dirty: bool) -> None:
    """A `cpu`, `gpu` or `paper` record (and the runs it commits) comes from a committed tree: its provenance names
    the commit it ran, which a `+dirty` one does not pin down. `--allow-dirty` stores one anyway, only in a results
    store away from the checkout's own results/ (a scratch store, never committed)."""
    from gradalign.environment import git_commit, project_root
    from gradalign.records.runner import COMMITTED_PRESETS

    if preset not in COMMITTED_PRESETS:
        return
    commit = git_commit()
    if not commit.endswith("+dirty"):
        return
    home = (project_root() / "results").resolve()
    if allow_dirty and root.resolve() != home:
        return
    if allow_dirty:
        raise ConfigError(
            f"--allow-dirty stores a {preset} record only away from the checkout's results/ ({home}); give --results "
            "or GRADALIGN_RESULTS another folder, or commit or stash the changes"
        )
    raise ConfigError(
        f"the working tree has uncommitted changes ({commit}); a {preset} record must come from a committed tree: "
        "commit or stash them (or give --allow-dirty with --results away from the checkout's results/)"
    )
