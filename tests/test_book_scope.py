"""`make test`'s workers (root conftest.py): each notebook is a scope of its own and is handed out before the tests
that read the built book, which share one scope and wait for every notebook's executed copy."""

import importlib.util
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

_spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root)


def test_the_book_files_share_one_scope_and_every_notebook_and_other_file_keeps_its_own():
    nb = "notebooks/lga/01_linear_regression.ipynb"
    assert root.book_scope(f"{nb}::Cell 3") == nb
    assert root.book_scope("tests/test_book_browser.py::test_no_dead_internal_links") == "book"
    assert root.book_scope("tests/test_store.py::test_save_is_atomic_and_loads_back") == "tests/test_store.py"
    assert root.book_scope("tests/test_x.py::test_y[a::b]") == "tests/test_x.py"


def test_a_test_that_reads_the_book_outside_the_book_files_is_named():
    inside = SimpleNamespace(nodeid="tests/test_book.py::test_a", fixturenames=["built", "tmp_path"])
    elsewhere = SimpleNamespace(nodeid="tests/test_store.py::test_b", fixturenames=["store", "book_html"])
    plain = SimpleNamespace(nodeid="tests/test_store.py::test_c", fixturenames=["store"])
    assert root.book_readers_outside([inside, elsewhere, plain]) == ["tests/test_store.py::test_b"]
    with pytest.raises(pytest.UsageError, match="test_b reads the built book: add its file"):
        root.pytest_collection_modifyitems(None, [inside, elsewhere, plain])
    root.pytest_collection_modifyitems(None, [inside, plain])  # nothing outside: no error


def test_every_notebook_is_handed_out_before_the_book_readers_the_slowest_first():
    scopes = ["tests/test_store.py", "book", "notebooks/lga/01_linear_regression.ipynb", *root.SLOW_FIRST[::-1]]
    ordered = sorted(scopes, key=root.scope_rank)
    assert ordered[: len(root.SLOW_FIRST)] == list(root.SLOW_FIRST)
    assert ordered[-2:] == ["book", "tests/test_store.py"]


def _run(tmp_path, *entries):
    return {"dir": tmp_path, "expected": set(entries)}


def _write(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


def test_the_book_waits_for_a_notebook_another_worker_is_still_running(tmp_path):
    run = _run(tmp_path, "notebooks/a/01", "notebooks/b/02")
    _write(tmp_path / "executed" / "notebooks/a/01.ipynb")
    later = threading.Timer(0.3, _write, [tmp_path / "executed" / "notebooks/b/02.ipynb"])
    later.start()
    start = time.monotonic()
    copies = root.executed_copies(run, wait_s=10, poll_s=0.05)
    assert sorted(copies) == ["notebooks/a/01", "notebooks/b/02"] and time.monotonic() - start >= 0.25


def test_a_failed_notebook_ends_the_wait_without_a_copy_and_the_wait_has_a_limit(tmp_path):
    run = _run(tmp_path, "notebooks/a/01", "notebooks/b/02")
    _write(tmp_path / "executed" / "notebooks/a/01.ipynb")
    start = time.monotonic()
    assert list(root.executed_copies(run, wait_s=0.3, poll_s=0.05)) == ["notebooks/a/01"]  # 02 never came
    assert time.monotonic() - start >= 0.3
    _write(tmp_path / "failed" / "notebooks/b/02")
    start = time.monotonic()
    assert list(root.executed_copies(run, wait_s=10, poll_s=0.05)) == ["notebooks/a/01"]
    assert time.monotonic() - start < 5


def test_every_worker_is_handed_the_controllers_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(root, "_RUN", {"dir": tmp_path})
    node = SimpleNamespace(workerinput={})
    root.pytest_configure_node(node)
    assert node.workerinput[root.FOLDER_KEY] == str(tmp_path)
