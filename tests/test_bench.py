"""`gradalign bench`: benchmark records are measured, stored with their provenance, verified on read, judged
against the project's goals (a failing goal is reported as not met), and shown on the Performance page."""

from __future__ import annotations

import json

import pytest

from gradalign.compute.bench import BenchStore, run_benchmark
from gradalign.benchmarks.records import Goal, goal_rows
from gradalign.benchmarks.registry import BENCHMARKS
from gradalign.cli import main


def test_goals_are_judged_and_a_missed_goal_is_not_met():
    bench = BENCHMARKS["lga_step"]
    assert [(g["ratio"], g["met"]) for g in goal_rows(bench, {"lga_over_pseudo_label": 1.5}, "cpu")] == [
        ("lga_over_pseudo_label", True)
    ]
    assert not goal_rows(bench, {"lga_over_pseudo_label": 1.7}, "cpu")[0]["met"]
    assert goal_rows(bench, {}, "cpu")[0]["met"] is False  # a ratio that was not measured does not meet its goal
    assert Goal("x", ">", 1.0, "cpu").met(1.01) and not Goal("x", ">", 1.0, "cpu").met(1.0)
    assert all(g["goal"].endswith("on GPU") for g in goal_rows(bench, {}, "cuda"))


def test_every_ratio_with_a_goal_is_one_the_benchmark_reports():
    for bench in BENCHMARKS.values():
        assert {g.ratio for g in bench.goals} <= set(bench.ratios), bench.name
        assert all(g.device in ("cpu", "cuda") for g in bench.goals)


@pytest.fixture
def small_meta_step(monkeypatch):
    """The stored (non-`quick`) path of `metagrad_step`, measured at quick sizes: these tests check how a record
    is stored, read and shown, never a speed (speed is what `gradalign bench` measures, not a test)."""
    from gradalign.benchmarks import metagrad_step

    real = metagrad_step.measure_meta_step
    monkeypatch.setattr(
        metagrad_step, "measure_meta_step", lambda device, **_: real(device, width=0.125, batch=4, size=12, repeats=1)
    )


def test_a_measured_record_is_stored_verified_and_an_edit_is_caught(tmp_path, small_meta_step):
    record = run_benchmark("metagrad_step", "cpu", root=tmp_path)
    store = BenchStore(tmp_path)
    path = store.path("metagrad_step", "cpu")
    assert path.exists() and store.load("metagrad_step", "cpu") == record
    assert record["measurement"]["jvp_over_fd"] > 0
    assert record["provenance"]["hardware"] and record["provenance"]["torch"] and not record["provenance"]["quick"]
    edited = json.loads(path.read_text())
    edited["measurement"]["jvp_over_fd"] = 0.1
    path.write_text(json.dumps(edited))
    with pytest.warns(UserWarning, match="digest"):
        assert store.load("metagrad_step", "cpu") is None
    path.write_text(path.read_text()[:50])  # cut short
    with pytest.warns(UserWarning):
        assert store.load("metagrad_step", "cpu") is None


def test_quick_runs_every_benchmark_and_stores_nothing(tmp_path):
    for name in ("sgr_step", "metagrad_step", "lga_step", "batched_trials"):
        record = run_benchmark(name, "cpu", quick=True, root=tmp_path)
        assert record["provenance"]["quick"] and set(BENCHMARKS[name].ratios) & set(record["measurement"])
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "nope"], "unknown benchmark 'nope'"),
        (["bench", "sgr_step", "--device", "cuda:7"], "device"),
        (["bench", "sgr_step", "--device", "tpu"], "device"),
        (["bench", "sgr_memory"], "unknown benchmark 'sgr_memory'"),  # measured once: by sgr.mem
    ],
)
def test_bad_bench_input_is_one_line_before_any_compute(argv, message, capsys, tmp_path):
    assert main([*argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradalign: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "bench").exists()


def test_the_performance_page_shows_stored_ratios_with_their_goals(tmp_path, capsys, small_meta_step):
    from gradalign.book.pages import performance_markdown

    row = (
        "| `metagrad_step` | time of the JVP pseudo-label gradient / the finite difference | "
        "<= 1.05 on CPU; <= 1.05 on GPU |"
    )
    assert f"{row} not measured |" in performance_markdown(tmp_path)
    assert main(["bench", "metagrad_step", "--device", "cpu", "--results", str(tmp_path)]) == 0
    assert "goal jvp_over_fd <= 1.05 on CPU" in capsys.readouterr().out
    page = performance_markdown(tmp_path)
    value = BenchStore(tmp_path).load("metagrad_step", "cpu")["measurement"]["jvp_over_fd"]
    mark = "met" if value <= 1.05 else "**not met**"
    assert f"{row} {value:.3g} ({mark}) |" in page
    assert "No benchmark has run on a GPU yet" in page
    wrn = "| `wrn_throughput` | images per second, the fastest fast-path variant / the eager loop | >= 3 on GPU |"
    assert f"{wrn} not measured | not measured |" in page


def test_a_windows_quick_gpu_record_shows_in_the_gpu_column_labelled_and_an_edited_one_is_left_out(tmp_path):
    """`gradalign import` keeps a window's CUDA records as `<name>/gpu-<device>-quick.json`: without a full-size
    `cuda.json` the page shows the window's, at quick sizes; a file edited after it was measured is never shown."""
    from gradalign.book.pages import performance_markdown
    from gradalign.store.atomic import content_digest

    record = run_benchmark("metagrad_step", "cpu", quick=True, root=tmp_path)
    record = {**record, "device_kind": "cuda", "goals": goal_rows(BENCHMARKS["metagrad_step"], {}, "cuda")}
    record["measurement"] = {**record["measurement"], "jvp_over_fd": 0.987}
    record["goals"] = goal_rows(BENCHMARKS["metagrad_step"], record["measurement"], "cuda")
    record["provenance"] = {**record["provenance"], "hardware": "NVIDIA H100 80GB HBM3", "quick": True}
    record["digest"] = content_digest(record)
    path = tmp_path / "bench" / "metagrad_step" / "gpu-nvidia-h100-80gb-hbm3-quick.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    assert BenchStore(tmp_path).window_records("metagrad_step") == [record]
    page = performance_markdown(tmp_path)
    assert "| not measured | 0.987 (met at quick sizes) |" in page
    assert "quick sizes (a GPU window's benchmark slot)" in page and "No benchmark has run on a GPU yet" not in page
    path.write_text(json.dumps({**record, "measurement": {"jvp_over_fd": 0.5}}))
    with pytest.warns(UserWarning, match="digest"):
        assert BenchStore(tmp_path).window_records("metagrad_step") == []
