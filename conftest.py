"""nbval over the notebooks (`make test` runs `pytest --nbval-lax notebooks tests`), and its executed copies.

With `--nbval` or `--nbval-lax`, each notebook's kernel starts with an isolated result store and run cache
(`GRADALIGN_RESULTS`, `GRADALIGN_CACHE` in a temporary folder, so the smoke runs never touch the checkout's
`results/` or the user's cache), at `GRADALIGN_PRESET` (default `smoke`), in batch mode (`GRADALIGN_BATCH=1`: no
live widgets) on one thread. nbval reads the notebooks and never writes them; the outputs it collects from
each cell are written, once every cell of a notebook passed, to an executed copy in that folder
(`nbval_run` below). The suite's book build (tests/conftest.py `built`) renders those copies instead of
executing every notebook a second time (`gradalign.book.build.build_book(executed=...)`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
_RUN: dict = {}  # dir, preset, failed (notebook paths), copies (entry -> executed copy)


def _nbval_on(config) -> bool:
    return bool(getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False))


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell")


def pytest_configure(config):
    if _nbval_on(config):
        folder = Path(tempfile.mkdtemp(prefix="gradalign-nbval-"))
        _RUN.update(dir=folder, preset=os.environ.get("GRADALIGN_PRESET") or "smoke", failed=set(), copies={})


def pytest_unconfigure(config):
    if _RUN.get("dir"):
        shutil.rmtree(_RUN["dir"], ignore_errors=True)
        _RUN.clear()


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
    if path in _RUN["failed"] or any(c.get("execution_count") is None for c in code):
        return
    entry = path.resolve().relative_to(ROOT).with_suffix("").as_posix()
    target = _RUN["dir"] / "executed" / f"{entry}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    from ipykernel.ipkernel import IPythonKernel  # the kernel nbval ran (--nbval-current-env): this interpreter's

    nb.metadata["language_info"] = dict(IPythonKernel.language_info)  # as papermill records the kernel's
    nb.metadata["gradalign"] = {"executed_by": "nbval", "parameters": {"preset": _RUN["preset"]}}
    nbformat.write(nb, target)
    _RUN["copies"][entry] = target


BOOK_FIXTURES = frozenset({"built", "book_html", "nbval_run"})
"""The fixtures that read the book built from nbval's executed copies (tests/conftest.py)."""

BOOK_FILES = frozenset(
    f"tests/test_{name}.py" for name in ("book", "book_browser", "book_pages", "book_wording", "notebooks")
)
"""The test files with a test that requests a `BOOK_FIXTURES` fixture (checked at collection)."""


def book_readers_outside(items) -> list[str]:
    """The node ids of the tests that request a `BOOK_FIXTURES` fixture (directly or through another fixture) and
    do not sit in a `BOOK_FILES` file."""
    return [
        item.nodeid
        for item in items
        if BOOK_FIXTURES & set(getattr(item, "fixturenames", ())) and item.nodeid.split("::")[0] not in BOOK_FILES
    ]


def pytest_collection_modifyitems(config, items):
    """A test that reads the book must sit in a `BOOK_FILES` file: the two-worker scheduler below runs those files
    after the notebooks, in the worker whose nbval made the executed copies the book is built from."""
    outside = book_readers_outside(items)
    if outside:
        raise pytest.UsageError(f"{outside[0]} reads the built book: add its file to conftest.py's BOOK_FILES")


def book_scope(nodeid: str) -> str:
    """A test's scope under pytest-xdist: "book" for the notebooks' cells and the `BOOK_FILES`, else its file."""
    path = nodeid.split("::", 1)[0]
    return "book" if path.startswith("notebooks/") or path in BOOK_FILES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two workers (`pytest -n 2`): each file's tests go to one worker (its module fixtures are
    built once), and the "book" scope (`book_scope`) goes whole to one worker, in collection order (`pytest
    notebooks tests`: the notebooks first), so that nbval's executed copies and the book built from them are in one
    process. The other worker runs the rest of the suite meanwhile."""
    from xdist.scheduler import LoadScopeScheduling

    class BookScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return book_scope(nodeid)

    return BookScheduling(config, log)


@pytest.fixture(scope="session")
def nbval_run() -> dict | None:
    """{'dir', 'preset', 'copies': {entry: executed copy}} when nbval ran the notebooks in this session, else None.
    Request it after the notebooks' items (the suite's tests run after them: `pytest notebooks tests`)."""
    return dict(_RUN) if _RUN else None
