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


def test_the_slowest_test_files_are_handed_out_before_the_others_and_after_the_book():
    scopes = ["tests/test_store.py", root.SLOW_FILES[1], "book", root.SLOW_FILES[0], "tests/test_layers.py"]
    ordered = sorted(scopes, key=root.scope_rank)
    assert ordered == ["book", *root.SLOW_FILES[:2], "tests/test_store.py", "tests/test_layers.py"]
    missing = [f for f in root.SLOW_FILES if not (root.ROOT / f).exists()]
    assert missing == [], "a slow file was renamed or removed: update conftest.py's SLOW_FILES"


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
    copies, waiting = root.executed_copies(run, wait_s=10, poll_s=0.05)
    assert sorted(copies) == ["notebooks/a/01", "notebooks/b/02"] and not waiting
    assert time.monotonic() - start >= 0.25


def test_a_failed_notebook_ends_the_wait_without_a_copy_and_the_wait_has_a_limit(tmp_path):
    run = _run(tmp_path, "notebooks/a/01", "notebooks/b/02")
    _write(tmp_path / "executed" / "notebooks/a/01.ipynb")
    start = time.monotonic()
    copies, waiting = root.executed_copies(run, wait_s=0.3, poll_s=0.05)  # 02 never came
    assert list(copies) == ["notebooks/a/01"] and waiting == ["notebooks/b/02"] and time.monotonic() - start >= 0.3
    _write(tmp_path / "failed" / "notebooks/b/02")
    start = time.monotonic()
    assert root.executed_copies(run, wait_s=10, poll_s=0.05) == (copies, [])
    assert time.monotonic() - start < 5


def test_a_worker_that_stopped_early_ends_the_wait_with_the_notebooks_it_left(tmp_path):
    run = _run(tmp_path, "notebooks/a/01")
    _write(tmp_path / root.STOPPED)
    start = time.monotonic()
    assert root.executed_copies(run, wait_s=10, poll_s=0.05) == ({}, ["notebooks/a/01"])
    assert time.monotonic() - start < 5


def test_every_worker_is_handed_the_controllers_folder_and_only_the_controller_removes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(root, "_RUN", {})
    controller = SimpleNamespace(option=SimpleNamespace(nbval_lax=True))
    root.pytest_configure(controller)
    folder = root._RUN["dir"]
    assert root._RUN["owner"] and not root._RUN["worker"]
    node = SimpleNamespace(workerinput={})
    root.pytest_configure_node(node)
    assert node.workerinput[root.FOLDER_KEY] == str(folder)
    saved = dict(root._RUN)
    root._RUN.clear()
    worker = SimpleNamespace(option=controller.option, workerinput=node.workerinput)
    root.pytest_configure(worker)
    assert root._RUN["dir"] == folder and root._RUN["worker"] and not root._RUN["owner"]
    root.pytest_unconfigure(worker)
    assert folder.is_dir()  # a worker leaves it
    root._RUN.update(saved)
    root.pytest_unconfigure(controller)
    assert not folder.exists()


class _Worker:
    """What the scheduler reads of a pytest-xdist worker."""

    def __init__(self, name):
        self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=name), False, []

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def _scheduler(nodeids, workers=2):
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"], option=SimpleNamespace(loadscopereorder=True))
    scheduler = root.pytest_xdist_make_scheduler(config, None)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, nodeids)
    scheduler.schedule()
    return scheduler, nodes


def _scopes(scheduler, node):
    return list(scheduler.assigned_work[node])


def test_the_scheduler_hands_out_every_notebook_before_the_book_and_never_a_notebook_to_the_books_worker():
    tests = [f"tests/test_store.py::test_{i}" for i in range(6)]  # most tests: xdist's own order puts it first
    book = [f"tests/test_book.py::test_{i}" for i in range(4)]
    notebooks = [f"notebooks/x/0{i}.ipynb::Cell 0" for i in range(3)]
    slow = [f"{root.SLOW_FIRST[0]}::Cell {i}" for i in range(2)]
    scheduler, (a, b) = _scheduler(tests + book + notebooks + slow)  # two scopes each to start with
    assert _scopes(scheduler, a) == [root.SLOW_FIRST[0], "notebooks/x/01.ipynb"]
    assert _scopes(scheduler, b) == ["notebooks/x/00.ipynb", "notebooks/x/02.ipynb"]
    assert list(scheduler.workqueue) == ["book", "tests/test_store.py"]
    scheduler._assign_work_unit(a)
    assert _scopes(scheduler, a)[-1] == "book"
    for scope, tests_of in scheduler.assigned_work[a].items():  # a ran its notebooks and all but one reader
        for nodeid in list(tests_of)[: None if scope != "book" else -1]:
            tests_of[nodeid] = True
    assert scheduler.remove_node(b) == "notebooks/x/00.ipynb::Cell 0"  # b crashed: its notebooks go back
    assert list(scheduler.workqueue)[:2] == ["notebooks/x/00.ipynb", "notebooks/x/02.ipynb"]  # sorted again
    assert _scopes(scheduler, a)[-1] == "book"  # asked for work (1 test left) and was handed no notebook
    c = _Worker("gw2")  # the worker started in b's place
    scheduler.add_node(c)
    scheduler.add_node_collection(c, tests + book + notebooks + slow)
    scheduler._assign_work_unit(c)
    assert _scopes(scheduler, c) == ["notebooks/x/00.ipynb"]


def test_a_worker_stopping_early_or_crashing_marks_the_folder_and_a_worker_finishing_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(root, "_RUN", {"dir": tmp_path, "worker": True})
    root.pytest_sessionfinish(SimpleNamespace(shouldfail=False, shouldstop=False))
    root.pytest_testnodedown(None, None)
    assert not (tmp_path / root.STOPPED).exists()
    root.pytest_sessionfinish(SimpleNamespace(shouldfail="stopping after 1 failures", shouldstop=False))
    assert (tmp_path / root.STOPPED).exists()
    (tmp_path / root.STOPPED).unlink()
    root.pytest_testnodedown(None, "worker 'gw1' crashed")
    assert (tmp_path / root.STOPPED).exists()
