"""The backlog's unit sizes (`gpu_sizing`): measured where a window trained a unit's settings, else this CPU's time
over the CPU / GPU ratio measured on settings trained in both places; seeds aside, nothing else may differ."""

from __future__ import annotations

import json

import pytest

from gradalign.store.atomic import content_digest, write_json_atomically
from gradalign.experiments import get
from gradalign.experiments.units import units_of
from gradalign.compute.gpu_sizing import (
    committed_times,
    hardware_class,
    median_ratio,
    run_seconds,
    speedups,
    unit_minutes,
)
from gradalign.store.run_unit import entry_path, write_entry

CPU = "CPU: AMD EPYC, 1 thread of 2 cores"
GPU = "NVIDIA H100 80GB HBM3 (CUDA 13.0)"


@pytest.fixture(scope="module")
def units():
    """Table 3's rerun units: by method, seeds 0-2 (the same settings but for the seed)."""
    found = units_of("sgr.tab3", get("sgr.tab3").resolve("cpu"))  # the calibrated 60-epoch rerun
    return {m: [u for u in found if u.label.startswith(m) and "resnet32" in u.label] for m in ("Layer", "Refo", "SGR")}


def _write(folder, unit, hardware, seconds, value=None):
    return write_entry(folder, unit, value or {"history": {}}, {"hardware": hardware, "wall_time_s": seconds})


def test_measured_where_a_window_trained_the_settings_and_projected_elsewhere(tmp_path, units):
    layer, reforward, sgr = units["Layer"], units["Refo"], units["SGR"]
    _write(tmp_path, layer[0], CPU, 600.0)
    _write(tmp_path, layer[1], GPU, 150.0)  # another seed of the same settings: the ratio is 4
    _write(tmp_path, reforward[0], CPU, 1200.0)
    _write(tmp_path, sgr[0], "unknown (read from the local run cache)", 50.0)  # no hardware: not timed
    times = committed_times(tmp_path)
    assert [round(r["ratio"], 6) for r in speedups(times)] == [4.0] and median_ratio(times) == 4.0
    assert unit_minutes([layer[2]], times) == (2.5, 2.5, 2.5, "measured", 1)
    assert unit_minutes([reforward[1]], times) == (5.0, 5.0, 5.0, "projected", 1)
    assert unit_minutes([layer[2], reforward[1], sgr[1]], times) == (3.75, 2.5, 5.0, "measured and projected", 2)
    assert unit_minutes([sgr[1]], times) is None


def test_settings_that_differ_beyond_the_seed_are_not_paired(tmp_path, units):
    _write(tmp_path, units["Layer"][0], CPU, 600.0)
    _write(tmp_path, units["Refo"][1], GPU, 150.0)  # another method: not the same computation
    times = committed_times(tmp_path)
    assert speedups(times) == [] and median_ratio(times) is None
    assert unit_minutes([units["Layer"][1]], times) is None  # no ratio: a CPU time alone projects nothing


def test_an_edited_entry_is_not_timed(tmp_path, units):
    _write(tmp_path, units["Layer"][0], CPU, 600.0)
    path = _write(tmp_path, units["Layer"][1], GPU, 150.0)
    assert median_ratio(committed_times(tmp_path)) == 4.0
    document = json.loads(path.read_text())
    document["provenance"]["wall_time_s"] = 1.0  # a faster GPU, by hand
    path.write_text(json.dumps(document))
    assert path == entry_path(tmp_path, units["Layer"][1].kind, units["Layer"][1].key)
    assert median_ratio(committed_times(tmp_path)) is None


def test_a_resumed_run_counts_its_whole_training_not_its_last_sitting():
    entry = {"provenance": {"wall_time_s": 204.8}, "value": {"train_seconds": 1134.0, "epoch_seconds": [17.0] * 60}}
    assert run_seconds(entry) == 1134.0
    assert run_seconds({"provenance": {"wall_time_s": 90.0}, "value": {"epoch_seconds": [50.0, 60.0]}}) == 110.0
    assert run_seconds({"provenance": {"wall_time_s": 90.0}, "value": [1, 2]}) == 90.0


def test_only_one_thread_of_a_two_core_cpu_counts_as_this_cpu():
    assert hardware_class(CPU) == "cpu" and hardware_class(GPU) == "gpu"
    for other in ("CPU: AMD EPYC, 11 threads of 2 cores", "CPU: Intel Xeon, 1 thread of 16 cores", "CPU: x, 2 threads"):
        assert hardware_class(other) is None, other
    assert hardware_class("unknown (read from the local run cache)") is None and hardware_class("") is None


def test_the_backlog_page_sizes_units_from_committed_times(tmp_path, units):
    from gradalign.compute.window_report import backlog_markdown

    _write(tmp_path / "runs", units["Layer"][0], CPU, 600.0)
    _write(tmp_path / "runs", units["Layer"][1], GPU, 150.0)
    text = backlog_markdown(tmp_path)
    assert "**4.0×** (range 4.0–4.0×, sgr.local" in text
    row = next(line for line in text.splitlines() if "`sgr.tab3` | `gpu`" in line)  # layer-wise ResNet: seeds 2-4 left
    assert "| 2 of 30 | 2.5 (2.5–2.5; measured; 3 of 28 timed) |" in row
    sgr = units["SGR"][0]  # a window saw it diverge, but a local table's divergence is now its result: left to train
    lga = units_of("lga.fig7", get("lga.fig7").resolve("cpu", {"lga.alpha_w": 0.0}))[0]  # its divergence stops it
    report = {
        "began": "2026-11-26T00:00:00",
        "units": [{"kind": u.kind, "key": u.key, "status": "diverged: x"} for u in (sgr, lga)],
    }
    write_json_atomically(tmp_path / "windows" / "w.json", {**report, "digest": content_digest(report)})
    lines = backlog_markdown(tmp_path).splitlines()
    row = next(line for line in lines if "`sgr.tab3` | `gpu`" in line)
    assert "| 2 of 30 | 2.5 (2.5–2.5; measured; 3 of 28 timed) |" in row
    row = next(line for line in lines if "`lga.fig7` | `cpu`" in line)  # the first: its control at α_w = 0
    assert "(1 diverged in a window, not retried)" in row
    empty = backlog_markdown(tmp_path / "nothing")
    assert "not timed" in empty and "No run has been trained both" in empty
