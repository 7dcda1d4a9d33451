"""What a GPU window measures (issue 45, items 1 and 2), on the CPU: the utilisation sampler against a fake
nvidia-smi and without one, each unit kind's throughput, the benchmark slot that runs alone before any worker, the
import's checks of the new report fields, and the CUDA benchmark records the import keeps."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from gradalign.compute import gpu_window as window_module
from gradalign.store.atomic import content_digest
from gradalign.compute.gpu_import import import_window
from gradalign.compute.gpu_sampler import MAX_SAMPLES, Sampler, parse_smi_line
from gradalign.compute.import_checks import window_problem
from gradalign.compute.window_measure import device_slug, gpu_bench_file, throughput_by_kind, unit_throughput

BACKLOG = (("sgr.fig2", "cpu", {"width": 0.0625, "n_train": 256, "n_test": 256, "seeds": 1, "lrs": []}),)


def _fake_smi(folder, lines: list[str], pause: float = 0.05):
    """An `nvidia-smi` on a PATH of its own that prints `lines` (one each `pause` s) and notes its arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    body = "".join(f"echo '{line}'; sleep {pause}\n" for line in lines)
    script.write_text(f'#!/bin/sh\necho "$@" > "{folder}/args"\n{body}sleep 30\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


def _wait_for(condition, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)


def test_the_sampler_reads_a_fake_nvidia_smi_and_summarises_each_phase(tmp_path, monkeypatch):
    folder = _fake_smi(tmp_path / "bin", ["10, 100", "[N/A], [N/A]", "20, 300", "90, 5000", "70, 4000"])
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    with Sampler() as sampler:
        sampler.mark("bench")
        _wait_for(lambda: len(sampler.samples) >= 2)
        sampler.mark("training")
        _wait_for(lambda: len(sampler.samples) >= 4)
    report = sampler.report()
    assert report["source"] == "nvidia-smi" and [s[1:] for s in report["samples"]] == [
        [10.0, 100.0],
        [20.0, 300.0],
        [90.0, 5000.0],
        [70.0, 4000.0],
    ]
    assert (
        "--query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 1000"
        in (folder / "args").read_text()
    )
    summary = report["summary"]
    assert summary["samples"] == 4 and summary["max_memory_mib"] == 5000.0 and summary["mean_utilisation"] == 47.5
    assert (
        set(summary["by_phase"]) <= {"bench", "training"}
        and sum(p["samples"] for p in summary["by_phase"].values()) == 4
    )
    assert window_problem({"minutes": 1, "units": [], "utilisation": report}) is None


def test_the_series_is_capped_and_says_so(tmp_path, monkeypatch):
    folder = _fake_smi(tmp_path / "bin", ["50, 10"] * 8, pause=0.01)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    sampler = Sampler(max_samples=3).start()
    _wait_for(lambda: sampler.truncated)
    sampler.stop()
    assert len(sampler.report()["samples"]) == 3 and sampler.report()["truncated"]


def test_without_nvidia_smi_or_cuda_the_report_says_not_sampled(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with Sampler() as sampler:
        sampler.mark("training")
    report = sampler.report()
    assert report["source"] == "" and report["samples"] == [] and report["summary"] == {"samples": 0}
    assert report["note"] == "not sampled: no nvidia-smi, no CUDA"


def test_nvidia_smi_lines_are_parsed_strictly():
    assert parse_smi_line("37, 1234\n") == (37.0, 1234.0)
    for line in ("utilization.gpu, memory.used", "[N/A], 12", "101, 5", "1, 2, 3", "NVIDIA-SMI has failed", ""):
        assert parse_smi_line(line) is None


def test_each_unit_kind_reports_its_throughput():
    ssl = {"protocol": {"steps": 100, "batch_labeled": 50, "batch_unlabeled": 50}}
    assert unit_throughput("lga.ssl", ssl, {"train_seconds": 10.0})["per_s"] == 1000.0
    assert unit_throughput("metagrad.ssl", ssl, {"train_seconds": 20.0})["per_s"] == 500.0
    local = {"protocol": {"batch_size": 128}}
    value = {"epochs_done": 2, "steps_per_epoch": 50, "train_seconds": 4.0}
    assert unit_throughput("sgr.local", local, value)["per_s"] == 3200.0
    assert unit_throughput("sgr.bpfree", local, value)["per_s"] == 3200.0
    assert unit_throughput("isoloss.siamese", {}, {"images_per_s": 280.21})["per_s"] == 280.2
    assert unit_throughput("lga.shells", {}, {"lga": {}}) is None  # the synthetic study records no training time
    assert unit_throughput("lga.ssl", ssl, {"train_seconds": 0}) is None
    assert unit_throughput("sgr.local", {}, value) is None
    row = {"element": "lga.fig5", "preset": "cpu", "kind": "lga.ssl", "seconds": 9.0}
    rows = [
        {**row, "status": "finished", "throughput": {"per_s": 100.0, "what": "x"}},
        {**row, "status": "finished", "throughput": {"per_s": 300.0, "what": "x"}},
        {**row, "status": "stopped by the time box"},
    ]
    summary = throughput_by_kind(rows)["lga.ssl"]
    assert (summary["units"], summary["median_per_s"], summary["least_per_s"], summary["most_per_s"]) == (
        2,
        200.0,
        100.0,
        300.0,
    )
    assert window_problem({"minutes": 1, "units": rows, "throughput": throughput_by_kind(rows)}) is None


@pytest.mark.parametrize(
    "utilisation, words",
    [
        ({"samples": [[0.0, 10.0, 1.0]] * (MAX_SAMPLES + 1)}, "at most"),
        ({"samples": [[0.0, 10.0]]}, "[seconds, utilisation %, memory MiB]"),
        ({"samples": [[0.0, "10", 1.0]]}, "[seconds, utilisation %, memory MiB]"),
        ({"samples": [[0.0, 150.0, 1.0]]}, "out of range"),
        ({"samples": "10, 20"}, "not a list"),
        ({"phases": [["bench"]]}, "[name, seconds]"),
        ({"phases": [["x", 1.0]] * 65}, "phases"),
        ({"note": "x" * 501}, "note"),
        ({"truncated": "no"}, "truncated"),
    ],
)
def test_import_refuses_a_malformed_utilisation_series(utilisation, words):
    problem = window_problem({"minutes": 1, "units": [], "utilisation": utilisation})
    assert problem is not None and words in problem


@pytest.mark.parametrize(
    "report, words",
    [
        ({"utilisation": [1, 2]}, "utilisation of type list"),
        ({"throughput": {"../x": {}}}, "unit kind"),
        ({"throughput": {"lga.ssl": {"median_per_s": "fast"}}}, "numbers"),
        ({"units": [{"status": "finished", "element": "e", "preset": "p", "seconds": 1, "throughput": 5}]}, "per_s"),
        ({"units": [{"throughput": {"per_s": 1.0, "what": "x", "more": [0] * 9}}]}, "more than its rate"),
    ],
)
def test_import_refuses_malformed_throughput(report, words):
    problem = window_problem({"minutes": 1, "units": [], **report})
    assert problem is not None and words in problem


def test_the_benchmark_slot_ends_before_the_first_worker_begins(tmp_path, monkeypatch):
    """`--workers 2`: bench --quick runs first and alone; the pool (faked) starts only once it has returned, and the
    CUDA tests run in the pool's `meanwhile`, after the slot."""
    from gradalign.compute import window_pool

    events = []
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))

    def slot(dev):
        events.append("bench began")
        time.sleep(0.05)
        events.append("bench ended")
        return {"lga_step": {"error": "faked"}}, {"alone": True, "seconds": 0.05}

    def pool(jobs, runs, deadline, workers, threads, meanwhile):
        events.append(f"{workers} workers began")
        meanwhile()
        return iter(())

    monkeypatch.setattr(window_module, "bench_slot", slot)
    monkeypatch.setattr(window_pool, "train_in_pool", pool)
    monkeypatch.setattr(window_module, "cuda_tests", lambda dev, left: events.append("tests") or {"outcome": "ok"})
    window = window_module.gpu_window(2, tmp_path / "out", BACKLOG, device="cpu", workers=2, echo=lambda _: None)
    assert events == ["bench began", "bench ended", "2 workers began", "tests"]
    assert window.bench_slot == {"alone": True, "seconds": 0.05}
    written = json.loads((tmp_path / "out" / "window.json").read_text())
    assert [name for name, _ in written["utilisation"]["phases"]] == ["bench", "training", "end"]
    assert written["bench_slot"]["alone"] and window_problem(written) is None
    events.clear()  # one worker: the slot, then the tests, then the backlog
    monkeypatch.setattr(window_module, "_backlog", lambda *a: events.append("backlog"))
    window_module.gpu_window(2, tmp_path / "out2", BACKLOG, device="cpu", echo=lambda _: None)
    assert events == ["bench began", "bench ended", "tests", "backlog"]


def _bench_record(name: str, device_kind: str, hardware: str) -> dict:
    document = {
        "schema": 1,
        "name": name,
        "device_kind": device_kind,
        "measurement": {"lga_over_pseudo_label": 1.7},
        "goals": [],
        "provenance": {"hardware": hardware, "quick": True, "torch": "2.11.0+cu130", "date": "2026-12-01"},
    }
    return {**document, "digest": content_digest(document)}


def test_import_keeps_a_windows_cuda_benchmark_records_with_their_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "gpu" / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "gpu" / "cache"))
    gpu = _bench_record("lga_step", "cuda", "NVIDIA Fake H100 80GB HBM3 (CUDA 13.0)")
    edited = {**_bench_record("sgr_step", "cuda", "NVIDIA Fake H100 80GB HBM3 (CUDA 13.0)"), "name": "sgr_step"}
    edited["measurement"] = {"x": 9.0}  # its digest no longer matches
    records = {"lga_step": gpu, "sgr_step": edited, "fast_path": _bench_record("fast_path", "cpu", "CPU: x")}
    monkeypatch.setattr(window_module, "bench_slot", lambda dev: (records, {"alone": True, "seconds": 1.0}))
    monkeypatch.setattr(window_module, "_backlog", lambda *a: None)
    window_module.gpu_window(1, tmp_path / "out", BACKLOG, device="cpu", tests=False, echo=lambda _: None)
    home = tmp_path / "home" / "results"
    imported = import_window(tmp_path / "out", home)
    assert imported.added_bench == ["lga_step/gpu-nvidia-fake-h100-80gb-hbm3-quick.json"]
    stored = json.loads((home / "bench" / imported.added_bench[0]).read_text())
    assert stored == gpu and stored["provenance"]["hardware"].startswith("NVIDIA Fake H100")
    assert not (home / "bench" / "sgr_step").exists() and not (home / "bench" / "fast_path").exists()
    assert any("kept as bench/lga_step/gpu-nvidia" in line for line in imported.bench)
    assert device_slug("../../etc (CUDA 1)") == "etc" and device_slug(7) is None
    assert gpu_bench_file("../lga_step", gpu) is None


def test_a_windows_finished_units_carry_their_throughput_and_the_report_sums_it_by_kind(tmp_path, monkeypatch):
    """A real (tiny) backlog on the CPU: each finished unit's row has its images per second, the window's report
    its median per unit kind, and the compute page's section shows both the rates and why nothing was sampled."""
    from gradalign.compute.window_report import windows_markdown

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "gpu" / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "gpu" / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty") + os.pathsep + "/usr/bin" + os.pathsep + "/bin")
    window = window_module.gpu_window(5, tmp_path / "out", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    finished = [u for u in window.units if u["status"] == "finished"]
    assert finished and all(u["throughput"]["per_s"] > 0 for u in finished)
    kind = finished[0]["kind"]
    assert window.throughput[kind]["units"] == len(finished)
    home = tmp_path / "home" / "results"
    assert not import_window(tmp_path / "out", home).refused
    page = windows_markdown(home)
    assert f"`{kind}` {len(finished)}:" in page and "/s (" in page
    assert window.utilisation["note"].startswith("not sampled") or window.utilisation["source"]
