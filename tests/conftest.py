import os

import pytest

os.environ.setdefault("GRADALIGN_PROGRESS", "0")


@pytest.fixture(autouse=True)
def _deterministic_threads():
    import torch

    torch.set_num_threads(2)


@pytest.fixture
def store(tmp_path, monkeypatch):
    from gradalign.results import ResultStore

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    return ResultStore(tmp_path / "results")
