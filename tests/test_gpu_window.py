"""`gradalign gpu-window` end to end on the CPU (issue 26, item 4): a window stopped by its time box writes what it
finished into at most 8 files, `gradalign import` checks and places them, and a second window, on a fresh machine
that has only the imported results, continues where the first stopped and assembles the record.

The backlog is sgr.fig2 at the `cpu` preset shrunk by overrides: 6 units (layer-wise and SGR, 3 seeds) of about
half a second each on two cores.
"""

from __future__ import annotations

import dataclasses

import json
import subprocess
import sys

import pytest

from gradalign.compute import gpu_window as window_module
from gradalign.cli import main
from gradalign.errors import ConfigError
from gradalign.compute.gpu_import import import_window
from gradalign.compute.gpu_window import gpu_window
from gradalign.compute.window_files import MAX_FILES
from gradalign.records.results import ResultStore

TINY = {
    "width": 0.0625,
    "n_train": 256,
    "n_test": 256,
    "seeds": 3,
    "protocol.epochs": 1,
    "protocol.batch_size": 64,
    "lrs": [],  # the figures' runs at protocol.lr, untuned
}
BACKLOG = (("sgr.fig2", "cpu", TINY),)


def _machine(monkeypatch, tmp_path, name: str):
    """A machine: its checkout's results folder and its run cache."""
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / name / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / name / "cache"))
    return tmp_path / name / "results"


def test_a_window_stopped_by_its_box_is_imported_and_the_next_window_continues(tmp_path, monkeypatch):
    home = _machine(monkeypatch, tmp_path, "cpu")  # the CPU side's results (nothing yet)
    _machine(monkeypatch, tmp_path, "gpu1")
    opens = iter([True, True, True])  # the box closes after three units have begun
    monkeypatch.setattr(window_module, "_box_open", lambda: next(opens, False))
    first = gpu_window(5, tmp_path / "out1", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    monkeypatch.setattr(window_module, "_box_open", lambda: True)
    assert first.stopped.startswith("sgr.fig2 [cpu]") and first.left == ["sgr.fig2 [cpu]"]
    assert first.tests["outcome"] == "skipped: no CUDA device" and not first.records
    finished = [u for u in first.units if u["status"] == "finished"]
    assert len(finished) == 3 and all(u["seconds"] > 0 and u["hardware"].startswith("CPU") for u in finished)
    files = sorted(p.name for p in (tmp_path / "out1").iterdir())
    assert len(files) <= MAX_FILES and "window.json" in files and "runs-1.json" in files

    imported = import_window(tmp_path / "out1", home)
    assert len(imported.added_runs) == 3 and not imported.added_records and not imported.refused
    assert len(list((home / "runs").glob("*/*.json"))) == 3
    assert import_window(tmp_path / "out1", home).unchanged == 4  # importing again adds nothing (3 runs, 1 report)

    _machine(monkeypatch, tmp_path, "gpu2")  # a fresh machine whose checkout carries the imported results
    import shutil

    shutil.copytree(home, tmp_path / "gpu2" / "results")
    second = gpu_window(5, tmp_path / "out2", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    assert not second.stopped and second.records and second.records[0].startswith("sgr.fig2 [cpu]")
    statuses = [u["status"] for u in second.units]
    assert statuses == ["committed before"] * 3 + ["finished"] * 3  # the first three were read, not trained
    imported = import_window(tmp_path / "out2", home)
    assert len(imported.added_runs) == 3 and imported.added_records == ["sgr.fig2 [cpu]"] and not imported.refused
    monkeypatch.setenv("GRADALIGN_RESULTS", str(home))
    from gradalign.experiments import get

    exp = get("sgr.fig2")
    record = ResultStore(home).load("sgr.fig2", "cpu", exp.resolve("cpu", TINY).digest(exp.version), exp.version)
    assert record is not None and sum(len(keys) for keys in record["provenance"]["runs"].values()) == 6


def test_import_refuses_an_edited_entry_and_record(tmp_path, monkeypatch):
    _machine(monkeypatch, tmp_path, "gpu")
    gpu_window(5, tmp_path / "out", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    runs = json.loads((tmp_path / "out" / "runs-1.json").read_text())
    runs["runs"][0]["value"]["final_test_acc"] = 99.0
    (tmp_path / "out" / "runs-1.json").write_text(json.dumps(runs))
    records = json.loads((tmp_path / "out" / "records.json").read_text())
    records["records"][0]["metrics"]["edited"] = True
    (tmp_path / "out" / "records.json").write_text(json.dumps(records))
    imported = import_window(tmp_path / "out", tmp_path / "home")
    assert len(imported.added_runs) == 5 and not imported.added_records
    assert any("digest" in why for why in imported.refused) and any("sgr.fig2" in why for why in imported.refused)
    assert main(["import", str(tmp_path / "out"), "--results", str(tmp_path / "home2")]) == 1


def test_import_keeps_a_committed_run_over_a_later_windows_copy(tmp_path, monkeypatch):
    """A second window on the warm machine read its first's runs from the run cache and sent them back with
    hardware "unknown": the import keeps the committed entry (its H100 provenance), and refuses, naming it, a copy
    whose value differs."""
    from gradalign.store.atomic import content_digest

    _machine(monkeypatch, tmp_path, "gpu")
    gpu_window(5, tmp_path / "out", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    home = tmp_path / "home"
    assert len(import_window(tmp_path / "out", home).added_runs) == 6
    runs = json.loads((tmp_path / "out" / "runs-1.json").read_text())
    first, second = runs["runs"][0], runs["runs"][1]
    for entry in (first, second):
        entry.pop("digest")
        entry["provenance"] = {**entry["provenance"], "hardware": "unknown (read from the local run cache)"}
    second["value"]["final_test_acc"] = 99.0
    for entry in (first, second):
        entry["digest"] = content_digest(entry)
    (tmp_path / "out" / "runs-1.json").write_text(json.dumps(runs))
    imported = import_window(tmp_path / "out", home)
    assert not imported.added_runs and len(imported.refused) == 1 and second["key"] in imported.refused[0]
    for entry in (first, second):
        kept = json.loads((home / "runs" / entry["kind"] / f"{entry['key']}.json").read_text())
        assert kept["provenance"]["hardware"].startswith("CPU") and kept["value"]["final_test_acc"] != 99.0


def test_a_real_time_box_stops_the_window_and_keeps_the_unit_resumable(tmp_path, monkeypatch):
    """A real box of 3 s on runs of several seconds each: the window stops by it (before a unit begins, or in a
    run's loop at a checkpoint), and commits only the units that finished."""
    results = _machine(monkeypatch, tmp_path, "gpu")
    backlog = (("sgr.fig2", "cpu", {**TINY, "n_train": 4096, "protocol.epochs": 30}),)
    window = gpu_window(3 / 60, tmp_path / "out", backlog, device="cpu", bench=False, echo=lambda _: None)
    assert "time box" in window.stopped and not window.records and len(window.units) < 6
    committed = {p.stem for p in (results / "runs").glob("*/*.json")} if (results / "runs").exists() else set()
    assert committed == {u["key"] for u in window.units if u["status"] == "finished"}


def test_bad_window_arguments_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="time limit"):
        gpu_window(0, tmp_path / "out", BACKLOG)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        gpu_window(1, tmp_path / "file", BACKLOG)
    with pytest.raises(ConfigError, match="not the folder a gpu-window wrote"):
        import_window(tmp_path, tmp_path / "home")


def test_the_window_imports_without_the_book_toolchain():
    """The GPU machine has torch and no jupyter: the window's command line must not need papermill or jupyter."""
    blocked = ["papermill", "jupyter_book", "nbformat", "nbclient", "ipykernel", "IPython", "jupyter_core"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from gradalign.cli import main\n"
        "import gradalign.compute.gpu_window, gradalign.compute.gpu_import\n"
        "import gradalign.records.runner, gradalign.compute.bench\n"
        "sys.exit(main(['gpu-window', '--help']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--minutes" in done.stdout


def test_a_diverging_unit_is_reported_and_the_window_goes_on(tmp_path, monkeypatch):
    _machine(monkeypatch, tmp_path, "gpu")
    diverging = {**TINY, "protocol.lr": 1e6}
    backlog = (("sgr.fig2", "cpu", diverging), *BACKLOG)
    window = gpu_window(5, tmp_path / "out", backlog, device="cpu", bench=False, echo=lambda _: None)
    statuses = [u["status"] for u in window.units]
    assert statuses[0].startswith("diverged: ") and "step" in statuses[0]
    assert window.units[0]["key"] and window.units[0]["git_commit"] and window.units[0]["hardware"]  # the unit's row
    assert sum(s.startswith("diverged") for s in statuses) == 1  # reported once: not again on the element's row
    assert "sgr.fig2 [cpu] (1 unit diverged)" in window.left  # as the pool path leaves it
    assert window.records and window.records[0].startswith("sgr.fig2 [cpu]") and not window.stopped


def test_a_window_with_workers_trains_units_in_parallel_and_assembles_the_record(tmp_path, monkeypatch):
    """`--workers 2`: the units are trained by two spawned processes, each committed with its hardware and the
    worker that trained it; the record is assembled once all six are committed, and the import round-trips."""
    home = _machine(monkeypatch, tmp_path, "cpu")
    _machine(monkeypatch, tmp_path, "gpu")
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    window = gpu_window(5, tmp_path / "out", BACKLOG, device="cpu", bench=False, workers=2, echo=lambda _: None)
    assert window.workers == 2 and not window.stopped and window.records[0].startswith("sgr.fig2 [cpu]")
    finished = [u for u in window.units if u["status"] == "finished"]
    assert len(finished) == 6 and all(u["hardware"].startswith("CPU") for u in finished)
    assert all(isinstance(u["worker"], int) for u in finished)  # the process that trained it
    imported = import_window(tmp_path / "out", home)
    assert len(imported.added_runs) == 6 and imported.added_records == ["sgr.fig2 [cpu]"] and not imported.refused


def test_a_pool_window_closed_at_once_begins_no_unit(tmp_path, monkeypatch):
    """A deadline already past: every unit is reported as not begun, nothing is committed, no record."""
    from gradalign.compute.window_pool import train_in_pool

    _machine(monkeypatch, tmp_path, "gpu")
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    units = units_of("sgr.fig2", get("sgr.fig2").resolve("cpu", TINY))
    rows = list(train_in_pool([("sgr.fig2", "cpu", u) for u in units], tmp_path / "runs", 0.0, 2, 1, lambda: None))
    assert [r["status"] for r in rows] == ["not begun: the time box closed"] * 6
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ConfigError, match="--workers"):
        gpu_window(1, tmp_path / "out", BACKLOG, workers=0)


def test_the_window_keeps_the_names_of_the_cuda_tests_that_failed(monkeypatch):
    """The first GPU window said only '9 failed': the names of the failing tests come back in window.json."""
    from types import SimpleNamespace

    out = "....F\nFAILED tests/test_fast_path.py::test_x - TypeError: RNG state\n1 failed, 4 passed in 3.0s"
    from gradalign.compute import window_measure

    monkeypatch.setattr(window_measure.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=out, returncode=1))
    result = window_measure.cuda_tests(SimpleNamespace(type="cuda"), lambda: 300.0)
    assert result["outcome"] == "1 failed, 4 passed in 3.0s" and result["returncode"] == 1
    assert result["failures"] == ["FAILED tests/test_fast_path.py::test_x - TypeError: RNG state"]


def test_import_keeps_the_window_report_and_the_compute_page_shows_it(tmp_path, monkeypatch):
    """The report lands under results/windows/ with its digest; the compute page's section lists its units by
    experiment with their wall time; an edited report is named as such and not shown."""
    from gradalign.compute.window_report import stored_windows, windows_markdown

    _machine(monkeypatch, tmp_path, "gpu")
    gpu_window(5, tmp_path / "out", BACKLOG, device="cpu", bench=False, echo=lambda _: None)
    home = tmp_path / "home"
    imported = import_window(tmp_path / "out", home)
    assert len(imported.added_windows) == 1 and not imported.refused
    reports, bad = stored_windows(home)
    assert len(reports) == 1 and not bad and reports[0]["workers"] == 1
    page = windows_markdown(home)
    assert "`sgr.fig2` [cpu] 6:" in page and "skipped: no CUDA device" in page
    stored = next((home / "windows").glob("*.json"))
    stored.write_text(stored.read_text().replace('"workers": 1', '"workers": 9'))
    reports, bad = stored_windows(home)
    assert not reports and "digest" in bad[0] and "sgr.fig2" not in windows_markdown(home)
    window = json.loads((tmp_path / "out" / "window.json").read_text())
    window["minutes"] = 60
    (tmp_path / "out" / "window.json").write_text(json.dumps(window))
    assert any("window.json" in why for why in import_window(tmp_path / "out", tmp_path / "home2").refused)


def test_a_record_assembled_from_runs_on_two_machines_names_both():
    from gradalign.book.record_text import where_computed

    prov = {
        "hardware": "CPU: AMD EPYC, 2 threads of 2 cores",
        "runs": {"CPU: AMD EPYC, 1 thread of 2 cores": ["a", "b"], "NVIDIA H100 80GB HBM3 (CUDA 13.0)": ["c"]},
    }
    text = where_computed(prov)
    assert (
        text
        == "2 runs on AMD EPYC, 1 thread, 1 run on NVIDIA H100 80GB HBM3 (CUDA 13.0); assembled on AMD EPYC, 2 threads"
    )
    assert where_computed({"hardware": "CPU: AMD EPYC, 2 threads of 2 cores"}) == "AMD EPYC, 2 threads"


def test_a_unit_stopped_part_way_projects_its_full_time():
    """The box stops a run at a checkpoint; its message gives the steps it reached, and the report projects the
    full unit from them (a message without steps projects nothing)."""
    from gradalign.compute.window_pool import stopped_at
    from gradalign.compute.window_report import projected_times

    message = "time box: LGA (seed 0) stopped after step 1500 of 6000, checkpointed; run the same command again"
    assert stopped_at(message) == [1500, 6000] and stopped_at("the time box closed before x could begin") is None
    report = {"units": [{"element": "lga.fig7", "preset": "gpu", "seconds": 60.0, "progress": [1500, 6000]}]}
    assert projected_times(report) == {("lga.fig7", "gpu"): [240.0]}


def test_a_run_the_box_stopped_resumes_in_the_next_window_from_its_carried_checkpoint(tmp_path, monkeypatch):
    """Window 1 stops the first run after its first epoch (the box says another would overrun); its checkpoint
    travels in the window's files, import places it in the checkout's window-carry/, and window 2, on a fresh machine
    with that folder, resumes the run there: the result equals the run trained in one piece."""
    from gradalign.training import loop
    from gradalign.compute.window_carry import CARRY_FILE, CARRY_FOLDER

    backlog = (("sgr.fig2", "cpu", {**TINY, "seeds": 1, "protocol.epochs": 2}),)
    home = _machine(monkeypatch, tmp_path, "cpu")
    _machine(monkeypatch, tmp_path, "gpu1")
    monkeypatch.setattr(loop, "_time_is_up", lambda *_: True)  # every run stops at its first checkpoint
    first = gpu_window(5, tmp_path / "out1", backlog, device="cpu", bench=False, echo=lambda _: None)
    assert first.stopped and len(first.checkpoints) == 1 and (tmp_path / "out1" / CARRY_FILE).is_file()
    assert not (tmp_path / "out1" / "checkpoints-2.tar").exists()  # one small checkpoint: one file
    imported = import_window(tmp_path / "out1", home)
    assert imported.checkpoints == first.checkpoints and not imported.refused
    kind, key = first.checkpoints[0].split("/")
    assert (home.parent / CARRY_FOLDER / "runs" / kind / f"{key}.pt").is_file()

    monkeypatch.undo()  # the box behaves again; a fresh machine with the checkout's results and carried folder
    import shutil

    _machine(monkeypatch, tmp_path, "gpu2")
    shutil.copytree(home, tmp_path / "gpu2" / "results")
    shutil.copytree(home.parent / CARRY_FOLDER, tmp_path / "gpu2" / CARRY_FOLDER)
    loaded, load = [], loop.load_checkpoint
    monkeypatch.setattr(loop, "load_checkpoint", lambda *a, **k: loaded.append(load(*a, **k)) or loaded[-1])
    second = gpu_window(5, tmp_path / "out2", backlog, device="cpu", bench=False, echo=lambda _: None)
    assert second.carried == first.checkpoints and not second.stopped and not second.checkpoints
    assert [state["loop"]["step"] for state in loaded if state is not None] == [256 // 64]  # after epoch 1
    resumed = json.loads((tmp_path / "gpu2" / "results" / "runs" / kind / f"{key}.json").read_text())

    _machine(monkeypatch, tmp_path, "one-piece")
    gpu_window(5, tmp_path / "out3", backlog, device="cpu", bench=False, echo=lambda _: None)
    whole = json.loads((tmp_path / "one-piece" / "results" / "runs" / kind / f"{key}.json").read_text())
    assert resumed["value"]["history"] == whole["value"]["history"]
    imported = import_window(tmp_path / "out2", home)  # the run is committed now: its carried checkpoint goes
    assert not (home.parent / CARRY_FOLDER / "runs" / kind / f"{key}.pt").exists()


def test_import_refuses_a_carried_checkpoint_that_was_edited_or_misnamed(tmp_path):
    import io
    import tarfile

    from gradalign.training.checkpoint import save_checkpoint
    from gradalign.compute.window_carry import CARRY_FOLDER, place

    good = save_checkpoint(tmp_path / "c.pt", "0" * 16, {"step": 1})
    raw = good.read_bytes()
    tar_file = tmp_path / "checkpoints.tar"
    with tarfile.open(tar_file, "w") as tar:
        for name, data in (
            ("runs/sgr.local/" + "a" * 16 + ".pt", raw),
            ("runs/sgr.local/" + "b" * 16 + ".pt", raw[:-3] + b"xyz"),  # edited payload
            ("../outside.pt", raw),  # not a run checkpoint's name
            ("runs/sgr.local/" + "c" * 16 + ".pt.gz", raw),  # named compressed, but not gzip
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    placed, refused = place(tar_file, tmp_path / CARRY_FOLDER, tmp_path / "results" / "runs")
    assert placed == ["sgr.local/" + "a" * 16]
    assert len(refused) == 3 and "digest does not match" in refused[0] and "not a run checkpoint" in refused[1]
    assert "not readable gzip" in refused[2]
    assert not (tmp_path / "outside.pt").exists()


def test_checkpoints_travel_compressed_over_several_files_and_import_places_each(tmp_path):
    """A checkpoint over the per-file limit travels when it compresses under it (Table 7's VGG-57: 15.2 MiB, 13.9
    compressed); checkpoints that do not fit one file go to the next; what fits nowhere stays behind; import places
    every one from every file, byte for byte."""
    import os

    from gradalign.training.checkpoint import save_checkpoint
    from gradalign.compute.window_carry import CARRY_FOLDER, bundle, carry_files, checkpoint_path

    cache, limit = tmp_path / "cache", 400_000
    keys = [c * 16 for c in "abcd"]
    payloads = {
        keys[0]: {"w": bytes(600_000)},  # over the limit raw, a few KB compressed
        keys[1]: {"w": os.urandom(250_000)},  # random: does not compress
        keys[2]: {"w": os.urandom(250_000)},  # no room left beside the second: the next file
        keys[3]: {"w": os.urandom(500_000)},  # over the limit compressed too: stays behind
    }
    for key, state in payloads.items():
        save_checkpoint(checkpoint_path(cache, "sgr.local", key), "0" * 16, state)
    files = carry_files(tmp_path / "out")
    (tmp_path / "out").mkdir()
    carried, left = bundle([("sgr.local", k) for k in keys], cache, files, limit)
    assert carried == [f"sgr.local/{k}" for k in keys[:3]] and left == [f"sgr.local/{keys[3]}"]
    assert [f.is_file() for f in files] == [True, True, False] and all(f.stat().st_size <= limit for f in files[:2])
    from gradalign.compute.window_carry import place

    placed = []
    for f in files[:2]:
        placed += place(f, tmp_path / CARRY_FOLDER, tmp_path / "results" / "runs")[0]
    assert placed == carried
    for key in keys[:3]:
        there = checkpoint_path(tmp_path / CARRY_FOLDER, "sgr.local", key).read_bytes()
        assert there == checkpoint_path(cache, "sgr.local", key).read_bytes()


def test_the_compute_page_lists_the_backlog_with_what_is_committed(tmp_path):
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of
    from gradalign.store.run_unit import write_entry
    from gradalign.compute.backlog import full_backlog
    from gradalign.compute.lga_rerun import items
    from gradalign.compute.window_report import backlog_markdown

    element_id, preset, overrides = window_module.BACKLOG[0]
    units = units_of(element_id, get(element_id).resolve(preset, overrides))
    write_entry(tmp_path / "runs", units[0], {"history": {}}, {"hardware": "test", "wall_time_s": 1.0})
    text = backlog_markdown(tmp_path)
    first = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert f"`{element_id}`" in first and f"| 1 of {len(units)} |" in first
    # header, rule, one row per item: the backlog with the work that waits on a stored record (Figure 7 at the
    # settings lga.tune chose, once its record is committed)
    backlog = full_backlog()
    assert text.count("\n| ") == len(backlog) + 2
    assert len(items()) == 3 and all(item in backlog for item in items())  # lga.tune's choice


def test_two_backlog_items_that_share_runs_train_each_run_once(tmp_path, monkeypatch):
    """Table 4 and Figures 2-4 read the same runs: a window's pool trains a shared unit once, not once per item."""
    _machine(monkeypatch, tmp_path, "gpu")
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    window = gpu_window(5, tmp_path / "out", BACKLOG * 2, device="cpu", bench=False, workers=2, echo=lambda _: None)
    assert sum(u["status"] == "finished" for u in window.units) == 6
    assert sum(u["status"] == "trained for sgr.fig2" for u in window.units) == 6  # the second item's rows
    assert len(window.records) == 2 and not window.stopped


def test_skip_leaves_out_the_elements_another_machine_trains():
    from gradalign.compute.backlog import BACKLOG as REAL
    from gradalign.compute.window_cli import without

    kept = without(REAL, ["sgr.tab7"])
    assert {e for e, _, _ in REAL} - {e for e, _, _ in kept} == {"sgr.tab7"}
    # its rerun, its budget check (the pilot is closed) and VGG-57's seeds (`experiments.sgr.deep_seeds`)
    assert len(REAL) - len(kept) == sum(e == "sgr.tab7" for e, _, _ in REAL) == 3
    with pytest.raises(ConfigError, match="not in the GPU backlog"):
        without(REAL, ["sgr.tab3", "sgr.tab9"])


def test_a_unit_an_earlier_window_saw_diverge_is_not_trained_again(tmp_path, monkeypatch):
    """Window 1's diverged units come home in its report; window 2, on a machine with that checkout, lists them as
    diverged before, trains none of them and leaves the experiment, saying why; a one-worker window likewise."""
    _machine(monkeypatch, tmp_path, "gpu")
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    backlog = (("sgr.fig2", "cpu", {**TINY, "protocol.lr": 1e6}),)
    first = gpu_window(5, tmp_path / "out", backlog, device="cpu", bench=False, workers=2, echo=lambda _: None)
    assert sum(u["status"].startswith("diverged: ") for u in first.units) == 6
    assert all(u["git_commit"] and u["hardware"] for u in first.units if u["status"].startswith("diverged: "))
    home = tmp_path / "home"
    assert not import_window(tmp_path / "out", home).refused
    monkeypatch.setenv("GRADALIGN_RESULTS", str(home))
    second = gpu_window(5, tmp_path / "out2", backlog, device="cpu", bench=False, workers=2, echo=lambda _: None)
    statuses = [u["status"] for u in second.units]
    assert statuses.count("diverged in an earlier window") == 6 and not second.records
    assert second.left == ["sgr.fig2 [cpu] (6 units diverged)"]
    serial = gpu_window(5, tmp_path / "out3", backlog, device="cpu", bench=False, echo=lambda _: None)
    assert serial.units[0]["status"].endswith("diverged in an earlier window (not trained again)")
    assert not any(u["status"] == "finished" for u in serial.units)


def test_a_local_tables_unit_an_earlier_window_saw_diverge_is_trained_again():
    """Its divergence is now its result (`divergence_is_a_result`): Table 6's rerun unit is retried; Table 4's MLP
    runs (tuning moves to the next rate) and the λ pilot's (validation split) are not."""
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of
    from gradalign.compute.gpu_import import retried as _retried

    six = units_of("sgr.tab6", get("sgr.tab6").resolve("cpu"))
    assert all(_retried(u) for u in six)
    assert not any(_retried(u) for u in units_of("sgr.fig2", get("sgr.fig2").resolve("cpu", TINY)))
    pilot = six[0].spec | {"validation": 5000}  # the λ pilot's runs are read on held-out training images
    assert not _retried(dataclasses.replace(six[0], spec=pilot))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_window_trains_again_a_local_tables_unit_an_earlier_window_saw_diverge(tmp_path, monkeypatch, workers):
    """An earlier window's report says Table 3's SGR run diverged (under the old stop rule); its divergence is now
    its result, so this window trains it, on the one-worker and the pool path, and assembles the record."""
    from gradalign.store.atomic import content_digest, write_json_atomically
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    results = _machine(monkeypatch, tmp_path, "gpu")
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    tiny = {k: v for k, v in TINY.items() if k != "lrs"}  # Table 3 has no rate grid
    overrides = {**tiny, "seeds": 1, "networks": ["resnet32"], "methods": ["layerwise", "sgr"]}
    backlog = (("sgr.tab3", "cpu", overrides),)
    sgr = next(u for u in units_of("sgr.tab3", get("sgr.tab3").resolve("cpu", overrides)) if "SGR" in u.label)
    report = {"began": "2026-11-26T00:00:00", "units": [{"kind": sgr.kind, "key": sgr.key, "status": "diverged: x"}]}
    write_json_atomically(results / "windows" / "w.json", {**report, "digest": content_digest(report)})
    window = gpu_window(5, tmp_path / "out", backlog, device="cpu", bench=False, workers=workers, echo=lambda _: None)
    rows = [u for u in window.units if u.get("key") == sgr.key]
    assert [u["status"] for u in rows] == ["finished"] and window.records and not window.left


def test_the_compute_page_says_a_windows_cuda_tests_in_words():
    from gradalign.compute.window_report import tests_in_words

    outcome = "1 failed, 85 passed, 1 warning in 199.34s (0:03:19)"
    failures = ["FAILED tests/test_activation_memory.py::test_cuda_peak_memory_falls_with_more_modules"]
    words = tests_in_words({"outcome": outcome, "failures": failures})
    assert words == "85 passed, 1 failed (test_cuda_peak_memory_falls_with_more_modules), in 3.3 min"
    assert "did not keep" in tests_in_words({"outcome": "9 failed, 71 passed, 1 warning in 96.45s (0:01:36)"})
    assert tests_in_words({}) == "not run"
    assert "warning" not in tests_in_words({"outcome": outcome})
