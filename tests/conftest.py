import dataclasses
import importlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADALIGN_PROGRESS", "0")


THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
"""Torch's threads in a test: 2 on two cores, 1 in each of `make test`'s two pytest-xdist workers."""


@pytest.fixture(autouse=True)
def _deterministic_threads():
    import torch

    torch.set_num_threads(THREADS)


@pytest.fixture
def one_thread():
    """One CPU thread for the test (small tensors; the autouse fixture above restores `THREADS` for the next one)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def store(tmp_path, monkeypatch):
    from gradalign.records.results import ResultStore

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    return ResultStore(tmp_path / "results")


@pytest.fixture(scope="session")
def built(tmp_path_factory, request):
    """The book built twice at preset smoke against an empty result store: (out dir, first, second build).

    Every notebook is executed once in the session. Under `pytest --nbval-lax notebooks tests` (`make test`) nbval
    executed them (the root conftest.py), against the store and run cache of its kernels, and the first build
    renders its executed copies (`first['adopted']`); otherwise the first build executes them with papermill
    (`first['executed']`). tests/test_notebooks.py checks what ran.

    Session-scoped so that test_book.py and test_book_browser.py share one build (it takes minutes)."""
    from gradalign.book.build import build_book

    nbval = request.getfixturevalue("nbval_run")
    copies = nbval and nbval["preset"] == "smoke" and nbval["copies"]
    tmp = nbval["dir"] if copies else tmp_path_factory.mktemp("book")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADALIGN_RESULTS", str(tmp / "results"))
        mp.setenv("GRADALIGN_CACHE", str(tmp / "cache"))  # smoke runs stay out of the user's run cache
        # one thread per kernel: smoke tensors are tiny, and two OpenMP threads in a Jupyter kernel ran the
        # meta-gradient benchmark page 3.5x slower than one on a busy two-core machine
        mp.setenv("GRADALIGN_THREADS", "1")
        mp.delenv("GRADALIGN_PRESET", raising=False)
        first = build_book("smoke", tmp / "_build", executed_copies=tmp / "executed" if copies else None)
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


# --- bad input: nothing may start before the input is checked (test_bad_input, test_hostile_input) ----------

LOADERS = [
    ("gradalign.data.image_sets", "load_image_set"),
    ("gradalign.data.fashion_mnist", "load_fashion_mnist"),
    ("gradalign.data.ssl_data", "load_image_set"),
]


def _forbidden(*args, **kwargs):
    raise AssertionError("compute, data loading or a submission started before the input was checked")


@pytest.fixture
def no_compute(store, tmp_path, monkeypatch):
    """Nothing may compute, load data or submit a job; the run cache is a fresh folder."""
    import gradalign.compute.sweep as sweep_module
    from gradalign.records import runner
    from gradalign.experiments import EXPERIMENTS

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runner, "run", _forbidden)
    for element_id, exp in list(EXPERIMENTS.items()):
        monkeypatch.setitem(EXPERIMENTS, element_id, dataclasses.replace(exp, run=_forbidden))
    for module, name in LOADERS:
        monkeypatch.setattr(importlib.import_module(module), name, _forbidden, raising=False)
    monkeypatch.setattr(sweep_module, "_submit_and_wait", _forbidden)
    monkeypatch.setattr(sweep_module, "make_executor", _forbidden)
    return store
