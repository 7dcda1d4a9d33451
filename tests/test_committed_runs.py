"""Committed runs (issue 26, item 1): finished runs under `<results>/runs/<kind>/<key>.json`, read before the local
cache, digest-checked, and a record assembled from runs made on two machines lists each run's hardware.

"Two machines" are two results folders and two run caches, with the hardware each reports patched; the runs are
lga.fig3's trials at the `cpu` preset shrunk by overrides (about a second each on two cores).
"""

from __future__ import annotations

import json
import shutil

import pytest

from gradalign import environment
from gradalign.records import runner
from gradalign.experiments import get
from gradalign.experiments.lga import shells
from gradalign.records.results import ResultStore
from gradalign.store.run_unit import check_entry, committed_runs, entry_path
from gradalign.store.runcache import RunCacheWarning

TINY = {
    "eps_arms": (),  # the trials alone (the further ε_norm arm has units of its own)
    "d": 5,
    "n": 100,
    "n_test": 100,
    "trials": 2,
    "trial.steps": 20,
    "trial.eval_every": 10,
    "trial.batch": 16,
    "trial.hessian_points": 50,
    "trial.lanczos_iters": 4,
}


def _on_machine(monkeypatch, tmp_path, name: str):
    """This process as machine `name`: its own run cache and results folder, and its hardware line."""
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / name / "cache"))
    monkeypatch.setattr(environment, "hardware", lambda device: f"machine {name}")
    return tmp_path / name / "results"


def _no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained, where the committed entries should have been read")

    monkeypatch.setattr("gradalign.training.shells.shells_trial", refuse)
    monkeypatch.setattr("gradalign.training.shells_batched.supervised_trials", refuse)


def test_a_record_is_assembled_from_runs_made_on_two_machines(tmp_path, monkeypatch):
    cfg = get("lga.fig3").resolve("cpu", TINY)
    units = [shells.trial_unit(cfg, k) for k in range(cfg.trials)]
    for name, unit in zip("AB", units):  # machine A trains trial 0, machine B trial 1
        results = _on_machine(monkeypatch, tmp_path, name)
        with committed_runs(results / "runs", write=True):
            unit.run()
    a, b = (tmp_path / name / "results" / "runs" for name in "AB")
    moved = entry_path(b, units[1].kind, units[1].key)
    target = entry_path(a, units[1].kind, units[1].key)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(moved, target)  # B's entry committed beside A's
    for unit, name in zip(units, "AB"):
        entry = check_entry(json.loads(entry_path(a, unit.kind, unit.key).read_text()))
        assert entry["provenance"]["hardware"] == f"machine {name}" and entry["provenance"]["wall_time_s"] >= 0
        assert "state_dict" not in json.dumps(entry)  # no weights

    results = _on_machine(monkeypatch, tmp_path, "C")  # a third machine, with an empty run cache
    _no_training(monkeypatch)
    record = runner.run("lga.fig3", "cpu", TINY, store=ResultStore(a.parent), device="cpu")
    assert record["provenance"]["runs"] == {
        "machine A": [f"lga.shells/{units[0].key}"],
        "machine B": [f"lga.shells/{units[1].key}"],
    }
    assert not (results / "runs").exists() and not any((tmp_path / "C" / "cache").glob("runs/*/*.json"))


def test_runs_of_a_cpu_record_are_committed_and_an_edited_entry_is_recomputed(tmp_path, monkeypatch):
    results = _on_machine(monkeypatch, tmp_path, "A")
    record = runner.run("lga.fig3", "cpu", TINY, store=ResultStore(results), device="cpu")
    cfg = get("lga.fig3").resolve("cpu", TINY)
    paths = [entry_path(results / "runs", "lga.shells", shells.trial_unit(cfg, k).key) for k in range(cfg.trials)]
    assert all(p.exists() for p in paths) and list(record["provenance"]["runs"]) == ["machine A"]
    original = json.loads(paths[0].read_text())
    edited = json.loads(paths[0].read_text())
    edited["value"]["lga"]["final_test_accuracy"] = [1.0]
    paths[0].write_text(json.dumps(edited))
    shutil.rmtree(tmp_path / "A" / "cache")  # nothing to fall back on: the run is recomputed
    with committed_runs(results / "runs", write=True), pytest.warns(RunCacheWarning, match="edited"):
        value = shells.trial_unit(cfg, 0).run()
    assert value == original["value"] and json.loads(paths[0].read_text())["value"] == original["value"]


def test_smoke_runs_are_not_committed(tmp_path, monkeypatch):
    results = _on_machine(monkeypatch, tmp_path, "A")
    runner.run("lga.fig3", "smoke", {k: v for k, v in TINY.items() if k != "trials"}, store=ResultStore(results))
    assert not (results / "runs").exists()


def test_a_sweep_commits_its_units_with_their_hardware_and_a_rerun_reads_them(tmp_path, monkeypatch):
    """At `cpu` each job commits its entry (with the hardware it ran on); a rerun with an empty run cache finds
    every unit committed and submits nothing."""
    from gradalign.compute.sweep import sweep

    results = tmp_path / "results"
    monkeypatch.setenv("GRADALIGN_RESULTS", str(results))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    summary = sweep("lga.fig3", "cpu", "local", tmp_path / "jobs", TINY, poll_s=0.5, echo=lambda _: None)
    assert summary.ok and len(summary.stored) == 2
    entries = [check_entry(json.loads(p.read_text())) for p in (results / "runs" / "lga.shells").glob("*.json")]
    assert len(entries) == 2 and all(e["provenance"]["hardware"].startswith("CPU") for e in entries)
    shutil.rmtree(tmp_path / "cache")
    again = sweep("lga.fig3", "cpu", "local", tmp_path / "jobs2", TINY, echo=lambda _: None)
    assert not again.submitted and again.ok
