"""nbval over the notebooks (`make test` runs `pytest --nbval-lax notebooks tests`), and its executed copies.

With `--nbval` or `--nbval-lax`, each notebook's kernel starts with an isolated result store and run cache
(`GRADALIGN_RESULTS`, `GRADALIGN_CACHE` in a temporary folder, so the smoke runs never touch the checkout's
`results/` or the user's cache), at `GRADALIGN_PRESET` (default `smoke`), in batch mode (`GRADALIGN_BATCH=1`: no
live widgets) on one thread. nbval reads the notebooks and never writes them; the outputs it collects from
each cell are written, once every cell of a notebook passed, to an executed copy in that folder
(`nbval_run` below). The suite's book build (tests/conftest.py `built`) renders those copies instead of
executing every notebook a second time (`gradalign.book.build.build_book(executed=...)`).

Under pytest-xdist (`make test`: two workers) the folder is one for the whole session: the controller makes it
and hands it to each worker (`pytest_configure_node`). Each notebook is a scope of its own, so the notebooks run
on every worker at once; the tests that read the book wait in `nbval_run` until every collected notebook has its
copy, or a mark that it failed (`pytest_xdist_make_scheduler` says why that wait always ends).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
_RUN: dict = {}  # dir, owner (made it: removes it), preset, failed (notebook paths), expected (entries collected)
STOPPED = "stopped"  # in the folder: a worker stopped early or crashed; nobody waits for more copies
FOLDER_KEY = "gradalign_nbval_dir"  # the controller's folder, in each xdist worker's workerinput
WAIT_S = 1800.0  # how long the book's readers wait for the other workers' notebooks (our choice; a guard only)


def _nbval_on(config) -> bool:
    return bool(getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False))


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell")


def pytest_configure(config):
    if _nbval_on(config):
        given = getattr(config, "workerinput", {}).get(FOLDER_KEY)
        folder = Path(given) if given else Path(tempfile.mkdtemp(prefix="gradalign-nbval-"))
        preset = os.environ.get("GRADALIGN_PRESET") or "smoke"
        _RUN.update(dir=folder, owner=not given, worker=given is not None, preset=preset, failed=set(), expected=set())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on the controller: every worker's notebooks write to the controller's one folder."""
    if _RUN:
        node.workerinput[FOLDER_KEY] = str(_RUN["dir"])


def pytest_sessionfinish(session):
    """A worker that stops early (`-x`, `--maxfail`) leaves notebooks unrun: the book's readers stop waiting."""
    if _RUN.get("worker") and (session.shouldfail or session.shouldstop):
        (_RUN["dir"] / STOPPED).touch()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: a worker that crashed may leave notebooks unrun (as above)."""
    if _RUN and error:
        (_RUN["dir"] / STOPPED).touch()


def pytest_unconfigure(config):
    if _RUN.get("dir") and _RUN["owner"]:
        shutil.rmtree(_RUN["dir"], ignore_errors=True)
    _RUN.clear()


def entry_of(path: Path) -> str | None:
    """A notebook's toc entry ("notebooks/lga/01_linear_regression"); None outside the project (no page)."""
    resolved = Path(path).resolve()
    return resolved.relative_to(ROOT).with_suffix("").as_posix() if resolved.is_relative_to(ROOT) else None


def mark_failed(path: Path) -> None:
    """Mark a notebook as run without a copy: the book's readers waiting in `nbval_run` stop waiting for it."""
    entry = entry_of(path)
    if entry is not None:
        mark = _RUN["dir"] / "failed" / entry
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()


def pytest_collection_finish(session):
    """The notebooks this session runs (after any deselection): the ones the book's readers wait for."""
    if _RUN:
        _RUN["expected"] = {entry_of(item.parent.path) for item in session.items if _is_cell(item)} - {None}


def kernel_env() -> dict[str, str]:
    """The environment each notebook's kernel starts with."""
    folder = _RUN["dir"]
    return {
        "GRADALIGN_RESULTS": str(folder / "results"),
        "GRADALIGN_CACHE": str(folder / "cache"),
        "GRADALIGN_PRESET": _RUN["preset"],
        "GRADALIGN_BATCH": "1",
        "GRADALIGN_PROGRESS": "0",
        "GRADALIGN_THREADS": "1",  # smoke tensors are tiny; two OpenMP threads in a kernel ran slower on two cores
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """The notebook's kernel starts in its first cell's setup: with `kernel_env`, only for that start."""
    if not (_is_cell(item) and _RUN):
        yield
        return
    env = kernel_env()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each cell's outputs (nbval collects them, and compares none under --nbval-lax) on its cell."""
    outcome = yield
    if not (_is_cell(item) and _RUN) or call.when != "call":
        return
    import nbformat

    report = outcome.get_result()
    if not report.passed:
        _RUN["failed"].add(item.parent.path)
        mark_failed(item.parent.path)
        return
    item.cell.outputs = [nbformat.from_dict(dict(o)) for o in (item.test_outputs or [])]
    item.cell.execution_count = item.cell_num + 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a notebook's last cell: its executed copy, when every code cell ran and passed."""
    yield
    if not (_is_cell(item) and _RUN) or (nextitem is not None and nextitem.parent is item.parent):
        return
    import nbformat

    path, nb = item.parent.path, item.parent.nb
    code = [c for c in nb.cells if c.cell_type == "code"]
    if path in _RUN["failed"] or any(c.get("execution_count") is None for c in code) or entry_of(path) is None:
        mark_failed(path)  # no copy (a cell failed or was skipped): nothing to wait for
        return
    from gradalign.store.atomic import write_atomically
    from ipykernel.ipkernel import IPythonKernel  # the kernel nbval ran (--nbval-current-env): this interpreter's

    nb.metadata["language_info"] = dict(IPythonKernel.language_info)  # as papermill records the kernel's
    nb.metadata["gradalign"] = {"executed_by": "nbval", "parameters": {"preset": _RUN["preset"]}}
    target = _RUN["dir"] / "executed" / f"{entry_of(path)}.ipynb"
    write_atomically(target, lambda handle: nbformat.write(nb, handle))  # whole, for a reader in another worker


BOOK_FIXTURES = frozenset({"built", "book_html", "nbval_run"})
"""The fixtures that read the book built from nbval's executed copies (tests/conftest.py)."""

BOOK_FILES = frozenset(
    f"tests/test_{name}.py"
    for name in ("book", "book_browser", "book_pages", "book_wording", "notebooks", "live_jupyter")
)
"""The test files with a test that requests a `BOOK_FIXTURES` fixture (checked at collection). The live-Jupyter
test reads nbval's smoke records (`nbval_run`), not the book."""


def book_readers_outside(items) -> list[str]:
    """The node ids of the tests that request a `BOOK_FIXTURES` fixture (directly or through another fixture) and
    do not sit in a `BOOK_FILES` file."""
    return [
        item.nodeid
        for item in items
        if BOOK_FIXTURES & set(getattr(item, "fixturenames", ())) and item.nodeid.split("::")[0] not in BOOK_FILES
    ]


def pytest_collection_modifyitems(config, items):
    """A test that reads the book must sit in a `BOOK_FILES` file: the scheduler below hands those files out after
    every notebook, so that the book is built from every notebook's executed copy."""
    outside = book_readers_outside(items)
    if outside:
        raise pytest.UsageError(f"{outside[0]} reads the built book: add its file to conftest.py's BOOK_FILES")


def book_scope(nodeid: str) -> str:
    """A test's scope under pytest-xdist: "book" for the `BOOK_FILES`, else its file (each notebook is one)."""
    path = nodeid.split("::", 1)[0]
    return "book" if path in BOOK_FILES else path


SLOW_FIRST = ("notebooks/sgr/02_local_bp.ipynb", "notebooks/isoloss/02_toy_dynamics.ipynb")
"""The notebooks that take longest at smoke (81 and 37 s of 393 on 2026-11-29): started first, so that the last
notebook to finish, which the book's readers wait for, is a short one."""


SLOW_FILES = tuple(
    f"tests/test_{name}.py"
    for name in (
        "sweep",
        "imagenet_stream",
        "fast_path_agreement",
        "settings_take_effect",
        "gpu_window",
        "fast_path",
        "staleness",
        "stops",
        "isoloss",
        "rules_v4",
        "cli",
        "report",
    )
)
"""The test files that take longest (92 to 25 s each on a fresh clone, 2026-11-29), slowest first: handed out
before the other files, so that the suite ends on short ones. Handed out in pytest-xdist's order, the last was
`test_fast_path_agreement.py` (46 s), while the other worker had stood idle for 43 s."""


def scope_rank(scope: str) -> tuple[int, int]:
    """The order in which scopes are handed out: the notebooks (`SLOW_FIRST` first), then the book's readers, then
    the `SLOW_FILES`, then the other files (in pytest-xdist's order, most tests first)."""
    if scope.startswith("notebooks/"):
        return (0, SLOW_FIRST.index(scope) if scope in SLOW_FIRST else len(SLOW_FIRST))
    if scope == "book":
        return (1, 0)
    return (2, SLOW_FILES.index(scope)) if scope in SLOW_FILES else (3, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two workers (`pytest -n 2`). Each file's tests go to one worker (its module fixtures are
    built once), and so do the `BOOK_FILES` together (`book_scope`: they share the session's book build).

    Every notebook is handed out before the book's readers (`scope_rank`; again after a crashed worker's scopes
    are put back), and a worker runs what it was handed in order. So the worker that runs the readers ran its own
    notebooks before them, and the notebooks it waits for (`nbval_run`) are on other workers, which never wait: the
    wait ends. A worker holding the readers is never handed a notebook."""
    from xdist.scheduler import LoadScopeScheduling

    class BookScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return book_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first hand-out (the queue is complete), or after a crash put scopes back
                self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda kv: scope_rank(kv[0])))
                self.ordered = True
            book = self.assigned_work.get(node, {}).get("book", {})
            if not all(book.values()) and next(iter(self.workqueue)).startswith("notebooks/"):
                return  # it would wait for a notebook queued behind its own wait: another worker takes it
            super()._assign_work_unit(node)

        def remove_node(self, node):
            self.ordered = False  # the crashed worker's scopes go to the queue's end: sort it again
            return super().remove_node(node)

    return BookScheduling(config, log)


def executed_copies(run: dict, wait_s: float = WAIT_S, poll_s: float = 0.5) -> tuple[dict[str, Path], list[str]]:
    """({entry: executed copy}, [entries still running]) of the session's notebooks: once each notebook collected
    (`run['expected']`) has its copy or its failure mark, written by whichever worker ran it; or once a worker
    stopped early, or `wait_s` seconds passed, with the notebooks still running."""
    folder, deadline = run["dir"], time.monotonic() + wait_s
    while True:
        copies = {e: folder / "executed" / f"{e}.ipynb" for e in sorted(run["expected"])}
        copies = {e: path for e, path in copies.items() if path.exists()}
        waiting = sorted(e for e in run["expected"] if e not in copies and not (folder / "failed" / e).exists())
        if not waiting or time.monotonic() > deadline or (folder / STOPPED).exists():
            return copies, waiting
        time.sleep(poll_s)


@pytest.fixture(scope="session")
def nbval_run() -> dict | None:
    """{'dir', 'preset', 'copies': {entry: executed copy}} when nbval ran the notebooks in this session, else None.
    In an xdist worker it waits for the notebooks other workers run (`executed_copies`), and fails when one never
    finished. In one process it takes the copies there are: a notebook collected after the book's readers (`pytest
    tests notebooks`, or `--ff`) is executed again by the book build (papermill)."""
    if not _RUN:
        return None
    copies, waiting = executed_copies(_RUN, WAIT_S if _RUN["worker"] else 0.0)
    if waiting and _RUN["worker"]:
        pytest.fail(f"no executed copy of {', '.join(waiting)}: a worker stopped early, or it ran over {WAIT_S:.0f} s")
    return {**_RUN, "copies": copies}
