import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADALIGN_PROGRESS", "0")


@pytest.fixture(autouse=True)
def _deterministic_threads():
    import torch

    torch.set_num_threads(2)


@pytest.fixture
def one_thread():
    """One CPU thread for the test (small tensors; the autouse fixture above restores 2 for the next test)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def store(tmp_path, monkeypatch):
    from gradalign.results import ResultStore

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    return ResultStore(tmp_path / "results")


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The book built twice at preset smoke against an empty result store: (out dir, first, second build).

    Session-scoped so that test_book.py and test_book_browser.py share one build (it takes minutes)."""
    from gradalign.book import build_book

    tmp = tmp_path_factory.mktemp("book")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADALIGN_RESULTS", str(tmp / "results"))
        mp.delenv("GRADALIGN_PRESET", raising=False)
        first = build_book("smoke", tmp / "_build")
        second = build_book("smoke", tmp / "_build")
    return tmp / "_build", first, second


@pytest.fixture(scope="session")
def book_html(request):
    """The built book's html folder: GRADALIGN_BOOK_HTML when set (to test an existing build), else `built`'s."""
    given = os.environ.get("GRADALIGN_BOOK_HTML")
    if given:
        assert Path(given, "index.html").exists(), f"GRADALIGN_BOOK_HTML={given} holds no built book"
        return Path(given)
    return request.getfixturevalue("built")[0] / "html"
