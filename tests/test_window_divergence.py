"""A study's run that diverges in a GPU window is kept as the study's result when the window is imported, with the
commit and hardware it diverged on; another element's divergence is kept nowhere (the window's report has it)."""

from __future__ import annotations

from gradalign.compute.gpu_import import import_window
from gradalign.compute.window_pool import unit_row
from gradalign.experiments import get
from gradalign.experiments.diverged_runs import diverged
from gradalign.experiments.units import units_of
from gradalign.store.atomic import write_json_atomically

TINY_FIG2 = {"width": 0.0625, "n_train": 256, "n_test": 256, "protocol.epochs": 1, "lrs": []}


def _window(out, rows) -> None:
    write_json_atomically(out / "window.json", {"minutes": 5.0, "began": "2026-11-29T01:00:00+00:00", "units": rows})


def test_import_keeps_a_studys_divergence_with_the_windows_commit_and_hardware(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))  # the lock of the study's file
    study_unit = units_of("sgr.lamfull", get("sgr.lamfull").resolve("cpu"))[-1]
    other = units_of("sgr.fig2", get("sgr.fig2").resolve("cpu", TINY_FIG2))[0]
    made = {"git_commit": "0123abcd" * 5, "hardware": "NVIDIA H200 (CUDA 13.0)"}
    why = "sgr diverged at step 40: the loss is not finite"
    rows = [
        unit_row("sgr.lamfull", "cpu", study_unit, seconds=12.0, status=f"diverged: {why}", **made),
        unit_row("sgr.fig2", "cpu", other, seconds=3.0, status="diverged: x", **made),
        unit_row("sgr.lamfull", "cpu", study_unit, status="diverged in an earlier window"),
    ]
    _window(tmp_path / "out", rows)
    home = tmp_path / "home"
    imported = import_window(tmp_path / "out", home)
    assert not imported.refused
    kept = diverged("sgr.lamfull", home)
    assert kept == {study_unit.key: {"label": study_unit.label, "why": why, **made}}
    assert diverged("lga.tune", home) == {}
    assert imported.kept_diverged == [f"sgr.lamfull: {study_unit.label}"]
    assert any(line.startswith("  diverged, kept as the study's result: sgr.lamfull") for line in imported.lines())
    assert import_window(tmp_path / "out", home).kept_diverged == []  # kept once


def test_a_window_without_a_divergence_keeps_none(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    study_unit = units_of("sgr.lamfull", get("sgr.lamfull").resolve("cpu"))[0]
    _window(tmp_path / "out", [unit_row("sgr.lamfull", "cpu", study_unit, status="stopped by the time box")])
    assert import_window(tmp_path / "out", tmp_path / "home").kept_diverged == []
    assert diverged("sgr.lamfull", tmp_path / "home") == {}


def test_a_run_committed_here_is_not_replaced_by_a_windows_divergence(tmp_path, monkeypatch):
    """A CPU sitting committed the run; a window that saw it diverge is imported later: the committed run stays the
    study's result."""
    from gradalign.store.run_unit import entry_path

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    units = units_of("sgr.lamfull", get("sgr.lamfull").resolve("cpu"))
    unit = next(u for u in units if entry_path(_repo_runs(), u.kind, u.key).exists())  # a committed choice run
    home = tmp_path / "home"
    committed = entry_path(home / "runs", unit.kind, unit.key)
    committed.parent.mkdir(parents=True)
    committed.write_bytes(entry_path(_repo_runs(), unit.kind, unit.key).read_bytes())
    made = {"git_commit": "0" * 40, "hardware": "NVIDIA H200 (CUDA 13.0)"}
    _window(tmp_path / "out", [unit_row("sgr.lamfull", "cpu", unit, status="diverged: nan", **made)])
    assert import_window(tmp_path / "out", home).kept_diverged == [] and diverged("sgr.lamfull", home) == {}


def test_a_divergence_without_a_commit_in_its_shape_is_refused_and_the_label_is_the_studys(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    first, last = units_of("sgr.lamfull", get("sgr.lamfull").resolve("cpu"))[-2:]
    rows = [
        unit_row("sgr.lamfull", "cpu", first, status="diverged: x", git_commit="../../etc", hardware="H200"),
        {**unit_row("sgr.lamfull", "cpu", last, status="diverged: " + "y" * 2000), "label": "forged"},
    ]
    rows[1].update(git_commit="unknown", hardware="H200")
    _window(tmp_path / "out", rows)
    imported = import_window(tmp_path / "out", tmp_path / "home")
    assert imported.refused == [f"sgr.lamfull: {first.label} diverged, without the commit and hardware it ran on"]
    kept = diverged("sgr.lamfull", tmp_path / "home")
    assert list(kept) == [last.key] and kept[last.key]["label"] == last.label and len(kept[last.key]["why"]) == 500


def _repo_runs():
    from gradalign.environment import project_root

    return project_root() / "results" / "runs"


def _diverge(checkpoint):
    from gradalign.errors import DivergenceError

    raise DivergenceError("simulated: the loss became NaN at step 3")


def test_a_one_worker_window_skips_a_study_unit_kept_as_diverged_and_trains_the_rest(tmp_path, monkeypatch):
    """An earlier window saw one of the tuning's runs diverge, and another diverges in this one: a one-worker window
    trains the study's other runs (as the pool path does), reports each divergence once, on the unit's own row, and
    leaves the assembly to where the divergences are kept."""
    from dataclasses import replace

    from gradalign.compute.gpu_window import gpu_window
    from gradalign.experiments import units as units_module
    from gradalign.store.atomic import content_digest

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "gpu" / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "gpu" / "cache"))
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    units = units_of("lga.tune", get("lga.tune").resolve("smoke"))
    units[1] = replace(units[1], compute=_diverge)
    monkeypatch.setattr(units_module, "units_of", lambda element_id, cfg: list(units))
    report = {"began": "2026-11-29T00:00:00", "units": [unit_row("lga.tune", "smoke", units[0], status="diverged: x")]}
    write_json_atomically(
        tmp_path / "gpu" / "results" / "windows" / "w.json", {**report, "digest": content_digest(report)}
    )
    window = gpu_window(5, tmp_path / "out", (("lga.tune", "smoke", {}),), device="cpu", bench=False, echo=print)
    status = {u["key"]: u["status"] for u in window.units if "key" in u}
    assert status[units[0].key] == "diverged in an earlier window"
    assert status[units[1].key].startswith("diverged: simulated") and window.units[1]["git_commit"]
    assert sum(u["status"].startswith("diverged") for u in window.units) == 2  # each once, on its unit's row
    assert all(status[u.key] == "finished" for u in units[2:])
    assert window.left == ["lga.tune [smoke] (2 units diverged)"] and not window.records


def test_a_left_item_names_its_diverged_units_in_words():
    from gradalign.compute.window_pool import left_item

    assert left_item("sgr.fig2", "cpu") == "sgr.fig2 [cpu]"
    assert left_item("sgr.fig2", "cpu", 1) == "sgr.fig2 [cpu] (1 unit diverged)"
    assert left_item("sgr.fig2", "cpu", 3) == "sgr.fig2 [cpu] (3 units diverged)"
