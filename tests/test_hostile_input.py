"""Issue 25, items 3-7: a fresh list of bad inputs, each exit status 2, one line on stderr and no compute.

Sizes beyond what the data or the machine allows, a repeated --set, presets of every subcommand, sweep options,
empty or unwritable storage. The `no_compute` fixture makes the runner, every experiment, the image loaders and
the sweep's submission fail the test if they are called, and each case checks that nothing was written.
"""

from __future__ import annotations

import errno
import tempfile
import time

import pytest
import torch

from gradalign.cli import main


def assert_one_line_error(capsys, argv: list[str], fragment: str, store=None) -> str:
    started = time.perf_counter()
    code = main(argv)
    took = time.perf_counter() - started
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gradalign: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert took < 20, f"{took:.1f} s: something ran before the refusal"
    if store is not None:
        assert not list(store.root.rglob("*.json")), "a record was written"
    return lines[0]


def _run(element_id: str, *sets: str, preset: str = "smoke") -> list[str]:
    argv = ["run", element_id, "--preset", preset]
    for item in sets:
        argv += ["--set", item]
    return argv


def _sweep(*options: str) -> list[str]:
    return ["sweep", "lga.fig3", "--preset", "smoke", *options]


CASES = {
    # --- item 3: sizes, refused before any compute (never capped) ------------------------------------------
    "steps 10**12": (_run("lga.fig1", f"steps={10**12}"), "LinearLGAConfig.steps must be <= 1,000,000,000"),
    "seed 10**23": (_run("lga.fig1", f"seed={10**23}"), "seed must be <= 2,147,483,647"),
    "seed 2**31": (_run("lga.fig1", f"seed={2**31}"), "seed must be <= 2,147,483,647"),
    "seed 2**40 sgr": (_run("sgr.tab3", f"seed={2**40}"), "Table3Config.seed must be <="),
    "seed 10**23 auto": (_run("lga.fig1", f"seed={10**23}", preset="auto"), "seed must be <="),
    "metagrad n_unlabeled 1e8": (_run("metagrad.tab4", "n_unlabeled=100000000"), "n_unlabeled must be <="),
    "metagrad n_unlabeled > split": (_run("metagrad.tab4", "n_unlabeled=59801"), "n_unlabeled must be <= 59,800"),
    "metagrad n_test 1e5": (_run("metagrad.tab4", "n_test=100000"), "n_test must be <= 10,000"),
    "metagrad n_validation 60000": (_run("metagrad.tab4", "n_validation=60000"), "n_validation must be <= 59,999"),
    "metagrad width 1e6": (_run("metagrad.tab4", "width=1000000"), "SemiMetaConfig.width must be <= 16"),
    "metagrad steps 10**12": (_run("metagrad.tab4", f"protocol.steps={10**12}"), "steps must be <="),
    "metagrad seeds 1e6": (_run("metagrad.tab4", "seeds=1000000"), "seeds must be <= 1,000"),
    "metagrad tab4 tsne_points 0": (_run("metagrad.tab4", "tsne_points=0"), "tsne_points must be >= 10"),
    "metagrad fig3 tsne_points 0": (_run("metagrad.fig3", "tsne_points=0"), "tsne_points must be >= 10"),
    "metagrad tsne_points 1e8": (_run("metagrad.tab4", "tsne_points=100000000"), "tsne_points must be <="),
    "metagrad svhn labels beyond the split": (
        _run("metagrad.tab4", 'columns=[["svhn", 80000]]'),
        "n_labeled must be <=",
    ),
    "sgr n_train 1e6": (_run("sgr.tab3", "n_train=1000000"), "Table3Config.n_train must be <= 60,000"),
    "sgr n_test 10001": (_run("sgr.tab3", "n_test=10001"), "Table3Config.n_test must be <= 10,000"),
    "sgr width 1e6": (_run("sgr.tab3", "width=1000000"), "width must be <= 16"),
    "sgr epochs 1e6": (_run("sgr.tab3", "protocol.epochs=1000000"), "epochs must be <= 10,000"),
    "sgr bp-free n_train": (_run("sgr.tab4", "n_train=70000"), "BPFreeConfig.n_train must be <= 60,000"),
    "sgr bp-free n_test": (_run("sgr.tab4", "n_test=20000"), "BPFreeConfig.n_test must be <= 10,000"),
    "sgr prop35 dims": (_run("sgr.prop35", f"dims=[8, {10**6}, 4]"), "dims must be <= 16,384"),
    "isoloss train_subset 1e8": (_run("isoloss.tab1", "train_subset=100000000"), "train_subset must be <="),
    "isoloss train_subset 60001": (_run("isoloss.tab1", "train_subset=60001"), "train_subset must be <= 60,000"),
    "isoloss test_subset 10001": (_run("isoloss.tab1", "test_subset=10001"), "test_subset must be <= 10,000"),
    "isoloss seeds 1e5": (_run("isoloss.tab1", "seeds=100000"), "seeds must be <= 1,000"),
    "isoloss epochs 1e5": (_run("isoloss.tab1", "epochs=[100000]"), "epochs must be <= 10,000"),
    "isoloss width 1e6": (_run("isoloss.tab1", "siamese.width=1000000"), "width must be <="),
    "isoloss toy N 1e6": (_run("isoloss.fig2", "N=1000000"), "N must be <= 16,384"),
    "isoloss ntk dims": (_run("isoloss.a1", f"dims=[{10**9}]"), "dims must be <= 16,384"),
    "lga fig5 n_pool": (_run("lga.fig5", "n_pool=60000"), "SSLBenchConfig.n_pool must be <= 59,800"),
    "lga fig5 n_test": (_run("lga.fig5", "n_test=10001"), "SSLBenchConfig.n_test must be <= 10,000"),
    "lga fig5 seeds": (_run("lga.fig5", "seeds=5000"), "seeds must be <= 1,000"),
    "lga fig5 steps 10**12": (_run("lga.fig5", f"protocol.steps={10**12}"), "steps must be <="),
    "lga fig5 width 1e5": (_run("lga.fig5", "width=100000"), "width must be <= 16,384"),
    "lga fig3 trials": (_run("lga.fig3", "trials=100000"), "trials must be <= 1,000"),
    "lga fig3 n 10**12": (_run("lga.fig3", f"n={10**12}"), "n must be <= 10,000,000"),
    "lga fig3 d 1e6": (_run("lga.fig3", "d=1000000"), "d must be <= 16,384"),
    "lga fig2 n 10**9": (_run("lga.fig2", f"n={10**9}"), "n must be <= 10,000,000"),
    "sgr depths 1e5": (_run("sgr.tab7", "depths=[11, 100000]"), "Table7Config.depths must be <= 1,000"),
    "sgr modules 1e4": (_run("sgr.tab3", "modules=10000"), "Table3Config.modules must be <= 1,000"),
    "metagrad alg2 draws": (_run("metagrad.alg2", f"lambda_draws={10**9}"), "lambda_draws must be <= 10,000,000"),
    # --- item 7: flags ---------------------------------------------------------------------------------------
    "repeated --set": (_run("lga.fig1", "steps=50", "steps=60"), "--set steps is given twice (50 and 60)"),
    "repeated dotted --set": (_run("lga.fig3", "trial.lr=0.1", "trial.lr=0.1"), "--set trial.lr is given twice"),
    "report preset turbo": (["report", "--preset", "turbo"], "unknown preset 'turbo'"),
    "report preset empty": (["report", "--preset", ""], "unknown preset ''"),
    "book preset turbo": (["book", "--preset", "turbo"], "unknown preset 'turbo'"),
    "sweep preset turbo": (_sweep("--preset", "turbo"), "unknown preset 'turbo'"),
    "sweep timeout 0": (_sweep("--timeout-min", "0"), "--timeout-min must be an integer in [1, 43200]; got 0"),
    "sweep timeout -5": (_sweep("--timeout-min", "-5"), "--timeout-min must be an integer in [1, 43200]; got -5"),
    "sweep timeout 10**9": (_sweep("--timeout-min", str(10**9)), "--timeout-min must be an integer"),
    "sweep cpus 0": (_sweep("--cpus-per-task", "0"), "--cpus-per-task must be an integer in [1, 1024]; got 0"),
    "sweep cpus -2": (_sweep("--cpus-per-task", "-2"), "--cpus-per-task must be an integer"),
    "sweep mem -5": (_sweep("--mem-gb", "-5"), "--mem-gb must be a number in [0, 65536]; got -5.0"),
    "sweep mem 0": (_sweep("--mem-gb", "0"), "--mem-gb must be > 0"),
    "sweep mem nan": (_sweep("--mem-gb", "nan"), "--mem-gb must be a number; got nan"),
    "sweep mem inf": (_sweep("--mem-gb", "inf"), "--mem-gb must be a number; got inf"),
    "sweep gpus -1": (_sweep("--gpus-per-node", "-1"), "--gpus-per-node must be an integer in [0, 64]"),
    "sweep parallel 0": (_sweep("--parallel", "0"), "--parallel must be an integer in [1, 100000]; got 0"),
    "sweep repeated --set": (_sweep("--set", "trials=2", "--set", "trials=3"), "--set trials is given twice"),
    "sweep repeated --param": (
        _sweep("--param", "slurm_qos=a", "--param", "slurm_qos=b"),
        "--param slurm_qos is given twice",
    ),
    "sweep size bound": (_sweep("--set", f"trial.steps={10**12}"), "steps must be <="),
    "sweep folder empty": (_sweep("--folder", ""), "--folder is empty"),
    # --- item 5: storage paths ---------------------------------------------------------------------------------
    "run --results empty": (["run", "lga.fig1", "--preset", "smoke", "--results", ""], "--results is empty"),
    "bench --results empty": (["bench", "--results", " "], "--results is empty"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_before_any_compute(name, no_compute, capsys):
    argv, fragment = CASES[name]
    assert_one_line_error(capsys, argv, fragment, store=no_compute)


def test_local_sweep_cannot_ask_for_gpus_the_machine_lacks(no_compute, capsys):
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    line = assert_one_line_error(capsys, _sweep("--gpus-per-node", str(present + 1)), "--gpus-per-node")
    assert f"has {present} GPU(s)" in line


ENV_CASES = {
    "empty GRADALIGN_RESULTS": ({"GRADALIGN_RESULTS": ""}, _run("lga.fig1"), "GRADALIGN_RESULTS is set but empty"),
    "blank GRADALIGN_RESULTS": ({"GRADALIGN_RESULTS": "  "}, _run("lga.fig1"), "GRADALIGN_RESULTS is set but empty"),
    "empty GRADALIGN_CACHE": ({"GRADALIGN_CACHE": ""}, _run("lga.fig1"), "GRADALIGN_CACHE is set but empty"),
    "empty GRADALIGN_RESULTS, report": ({"GRADALIGN_RESULTS": ""}, ["report"], "GRADALIGN_RESULTS is set but empty"),
    "empty GRADALIGN_RESULTS, bench": ({"GRADALIGN_RESULTS": ""}, ["bench"], "GRADALIGN_RESULTS is set but empty"),
    "empty GRADALIGN_CACHE, sweep": ({"GRADALIGN_CACHE": ""}, _sweep(), "GRADALIGN_CACHE is set but empty"),
}


@pytest.mark.parametrize("name", ENV_CASES)
def test_empty_storage_variables_are_refused(name, no_compute, capsys, monkeypatch):
    env, argv, fragment = ENV_CASES[name]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert_one_line_error(capsys, argv, fragment, store=no_compute)


def test_cache_root_that_is_a_file(no_compute, capsys, monkeypatch, tmp_path):
    (tmp_path / "cache-file").write_text("")
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache-file"))
    assert_one_line_error(capsys, _run("lga.fig1"), "is a file", store=no_compute)


def test_report_out_that_is_a_folder(no_compute, capsys, tmp_path):
    assert_one_line_error(capsys, ["report", "--out", str(tmp_path)], "is a folder")
    assert_one_line_error(capsys, ["report", "--out", str(tmp_path / "no" / "r.md")], "does not exist")
    assert_one_line_error(capsys, ["report", "--out", ""], "--out is empty")


def _refuse_writes_under(monkeypatch, root, code=errno.EACCES):
    """mkstemp under `root` fails as on a read-only folder (tests run as root, where chmod does not stop writes)."""
    original = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir).startswith(str(root)):
            raise OSError(code, "refused by the test")
        return original(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def test_read_only_cache_is_refused_before_compute(no_compute, capsys, tmp_path, monkeypatch):
    _refuse_writes_under(monkeypatch, tmp_path / "cache", errno.EROFS)
    line = assert_one_line_error(capsys, _run("lga.fig1"), "run cache (GRADALIGN_CACHE)", store=no_compute)
    assert "read-only" in line


def test_unwritable_results_root_is_refused_before_compute(no_compute, capsys, tmp_path, monkeypatch):
    _refuse_writes_under(monkeypatch, no_compute.root)
    line = assert_one_line_error(capsys, _run("lga.fig1"), "results root", store=no_compute)
    assert "permission denied" in line


def test_a_disk_without_room_is_refused_before_compute(no_compute, capsys, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 2**20, 2**20))
    assert_one_line_error(capsys, _run("lga.fig1"), "MiB free, less than the 64 MiB", store=no_compute)


def test_at_least_sixty_cases():
    assert len(CASES) + len(ENV_CASES) + 8 >= 60  # + the 8 single tests above


def test_sweep_into_a_read_only_cache_is_refused_before_submission(no_compute, capsys, tmp_path, monkeypatch):
    import gradalign.compute.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "make_executor", lambda *args: object())  # options valid; nothing submits
    _refuse_writes_under(monkeypatch, tmp_path / "cache", errno.EROFS)
    line = assert_one_line_error(capsys, _sweep(), "run cache (GRADALIGN_CACHE)")
    assert "read-only" in line
