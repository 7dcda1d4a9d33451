"""`make test`'s two workers: the notebooks and the tests that read the built book share one (root conftest.py)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

_spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root)


def test_the_notebooks_and_the_book_files_share_one_scope_and_other_files_keep_their_own():
    assert root.book_scope("notebooks/lga/01_linear_regression.ipynb::Cell 3") == "book"
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
