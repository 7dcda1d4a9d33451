"""Provenance by construction (issue 45, item 4): a run entry's hardware is the device its tensors lived on, noted by
the training loop from the run's parameters and its step's tensors, never the process's CPU when training ran on
CUDA, and never a device the run's value merely names."""

from __future__ import annotations

import functools

import pytest
import torch

from gradalign.store import run_unit
from gradalign.store.run_unit import Unit, committed_runs, note_device, read_entry, run_provenance
from gradalign.training import loop


class _TinyRun:
    """A one-layer regression trained for a few steps on the one loop."""

    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.x, self.y = torch.randn(16, 3), torch.randn(16, 1)

    def step(self, t):
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.detach()}

    def evaluate(self, t, sums, count, last):
        return {"train_loss": sums["loss"] / count}

    def state_dict(self):
        return {"model": self.model.state_dict()}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])


def _train_tiny(claimed_device, checkpoint) -> dict:
    run = _TinyRun()
    out = loop.train(run, 5, eval_at=loop.every(5, 5), name="tiny", model=run.model)
    # the value names a device it did not train on: the entry must follow the tensors, not this
    return {"loss": out.history["train_loss"][-1], **({"device": claimed_device} if claimed_device else {})}


def _unit(claimed_device=None, compute=None) -> Unit:
    spec = {"tiny": 1, "claimed": claimed_device or ""}
    return Unit("tiny", "lga.tiny", spec, 1, compute or functools.partial(_train_tiny, claimed_device))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    run_unit._PROVENANCE_SIDECAR.clear()
    return tmp_path / "runs"


@pytest.mark.parametrize("claimed", [None, "cuda"])
def test_a_unit_trained_on_the_cpu_says_cpu_whatever_its_value_names(isolated, claimed):
    unit = _unit(claimed)
    with committed_runs(isolated, write=True):
        unit.run()
    entry = read_entry(isolated, unit)
    assert entry["provenance"]["device"] == "cpu" and entry["provenance"]["hardware"].startswith("CPU: ")


def _fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Fake H100")
    monkeypatch.setattr(torch.version, "cuda", "13.0")


def test_a_unit_whose_tensors_lived_on_cuda_records_the_gpu(isolated, monkeypatch):
    """With a fake CUDA device noted as the loop notes it: the GPU's name, not this machine's CPU, even where the
    run's value says nothing of its device (the first window's LGA units)."""
    _fake_gpu(monkeypatch)

    def on_cuda(checkpoint):
        note_device(torch.device("cuda", 0))  # what `loop._note_devices` notes of a CUDA run's tensors
        return {"loss": 0.5}

    unit = _unit(compute=on_cuda)
    with committed_runs(isolated, write=True):
        unit.run()
    provenance = read_entry(isolated, unit)["provenance"]
    assert provenance["hardware"] == "NVIDIA Fake H100 (CUDA 13.0)" and provenance["device"] == "cuda:0"


def test_the_tensors_device_wins_over_the_value_and_an_accelerator_over_the_cpu(monkeypatch):
    _fake_gpu(monkeypatch)
    assert run_provenance({"device": "cpu"}, 1.0, 1, {"cpu", "cuda:0"})["hardware"].startswith("NVIDIA Fake H100")
    assert run_provenance({"device": "cuda"}, 1.0, 1, {"cpu"})["hardware"].startswith("CPU: ")
    assert run_provenance({"device": "cuda"}, 1.0)["hardware"].startswith("NVIDIA Fake H100")  # nothing noted
    assert run_provenance({}, 1.0)["hardware"].startswith("CPU: ")


def test_a_cpu_run_names_the_kind_of_cpu_it_ran_on_and_a_gpu_run_does_not(monkeypatch):
    """Seeded CPU training is bit-identical only on one kind of CPU: a CPU run's provenance names its kind."""
    import torch

    from gradalign.environment import machine_kind

    here = run_provenance({}, 1.0)
    assert here["cpu_kind"] == torch.backends.cpu.get_cpu_capability() != ""
    assert here["machine_kind"] == machine_kind() and here["machine_kind"].startswith(here["cpu_kind"])
    _fake_gpu(monkeypatch)
    assert not {"cpu_kind", "machine_kind"} & set(run_provenance({"device": "cuda"}, 1.0))


def test_the_loop_notes_the_device_of_the_runs_tensors():
    seen = set()
    token = run_unit._DEVICES.set(seen)
    try:
        run = _TinyRun()
        loop.train(run, 2, eval_at=loop.every(2, 2), name="tiny", model=run.model)
    finally:
        run_unit._DEVICES.reset(token)
    assert seen == {"cpu"}
    note_device(torch.device("cpu"))  # outside a unit: nothing to note, no error
