"""`gradalign sweep`: an experiment's units computed as submitit jobs, then its record assembled from the run cache.

The sweeps here use submitit's local executor (a subprocess per job) on lga.fig3 at smoke, shrunk further by
overrides so that a unit trains in about a second; the Slurm path is checked up to its sbatch parameters.
"""

import argparse
import functools
import os
import shlex
import stat
import sys
from dataclasses import replace

import cloudpickle
import pytest

from gradalign import cli
from gradalign.records import runner
from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.experiments.lga.shells import trial_unit
from gradalign.experiments.units import UNITS, units_of
from gradalign.records.results import ResultStore
from gradalign.compute.sweep import add_sweep_parser, make_executor, missing_units, sweep

TINY = {  # lga.fig3 smoke, smaller: ~1 s per trial on two cores
    "d": 5,
    "n": 100,
    "n_test": 100,
    "trial.steps": 20,
    "trial.eval_every": 10,
    "trial.batch": 16,
    "trial.hessian_points": 50,
    "trial.lanczos_iters": 4,
}
SET = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]

# Keys the experiments stored before their units were factored out (computed with runcache.run_key then):
# stored entries keep their keys, so no run is trained again.
KEY_SHELLS_CPU_TRIAL0 = "e438d0ac3e6d5e9f"  # shells study version 3 (validation split, tuned settings)
KEYS_SHELLS_SMOKE = ["2561ab06002bc0bb", "55b0a7d89121ee9c"]
KEY_FIG5_CPU_FIRST_RUN = "05a06aedaa8b8d57"  # committed: results/runs/lga.ssl
KEYS_TAB1_CPU_FIRST_RUNS = ["ab332863cee3a006", "2157785650a3f04c"]

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # a job unpickles _fail_once without this file


def _cfg(element_id="lga.fig3", preset="smoke", overrides=None):
    return get(element_id).resolve(preset, overrides)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh run cache; jobs pin one thread (two jobs at once on two cores)."""
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    return tmp_path / "cache"


def test_units_keep_the_keys_of_the_stored_runs():
    assert trial_unit(_cfg(preset="cpu"), 0).key == KEY_SHELLS_CPU_TRIAL0
    for element_id in ("lga.fig3", "lga.fig4"):
        units = units_of(element_id, _cfg(element_id))
        trials = [u for u in units if u.kind == "lga.shells"]
        assert [u.key for u in trials] == KEYS_SHELLS_SMOKE and trials[1].label == "trial 1 (seed 1)"
    fig4 = units_of("lga.fig4", _cfg("lga.fig4"))  # Figure 4 also shows the tuning, so its runs are units too
    assert {u.kind for u in fig4[2:]} == {"lga.shells-tuning"} and len(fig4) > 2
    assert units_of("lga.fig5", _cfg("lga.fig5", "cpu"))[0].key == KEY_FIG5_CPU_FIRST_RUN
    assert [u.key for u in units_of("lga.tab1", _cfg("lga.tab1", "cpu"))[:2]] == KEYS_TAB1_CPU_FIRST_RUNS
    assert {"lga.fig3", "lga.fig4", "lga.fig5", "lga.fig6", "lga.fig7", "lga.tab1"} <= set(UNITS)


SMALLER = {  # smoke's runs made smaller where their size decides nothing here (isoloss.tab1: 13 s -> 3 s)
    "isoloss.tab1": {"epochs": (2,), "seeds": 1, "train_subset": 256, "siamese.probe_iterations": 20},
}


@pytest.mark.parametrize("element_id", ["metagrad.tab1", "sgr.fig2", "sgr.tab4", "isoloss.tab1"])
def test_every_part_stores_exactly_its_units(element_id, tmp_path, monkeypatch, one_thread):
    """Run at smoke in a fresh cache, an experiment of each part with training runs stores exactly the entries its
    units name (issue 26, item 3): `sweep` covers metagrad's and SGR's runs as it covers LGA's."""
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import run
    from gradalign.compute.sweep import missing_units

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    overrides = SMALLER.get(element_id)
    units = units_of(element_id, get(element_id).resolve("smoke", overrides))
    assert missing_units(units) == units and len(units) >= 2
    run(element_id, "smoke", overrides, store=ResultStore(tmp_path / "results"), device="cpu")
    stored = {(p.parent.name, p.stem) for p in (tmp_path / "cache" / "runs").glob("*/*.json")}
    if element_id in ("sgr.tab4", "sgr.fig2"):  # every run it may read: the final runs at each rate of a grid
        assert stored <= {(u.kind, u.key) for u in units} and len(stored) < len(units)
        return
    assert stored == {(u.kind, u.key) for u in units} and missing_units(units) == []


def test_units_are_the_runs_the_experiment_reads(cache, one_thread):
    """Computed in-process by the experiment's own `_trial`, the entries are the units' keys, and then no unit
    is missing: what `gradalign run` stores, a sweep counts as done."""
    from gradalign.experiments.lga.shells import _trial

    cfg = _cfg(overrides=TINY)
    units = units_of("lga.fig3", cfg)
    assert missing_units(units) == units
    values = [_trial(cfg, k) for k in range(cfg.trials)]
    assert sorted(p.stem for p in (cache / "runs" / "lga.shells").glob("*.json")) == sorted(u.key for u in units)
    assert missing_units(units) == [] and [u.run() for u in units] == values
    assert [u.key for u in units_of("lga.fig4", cfg)][: len(units)] == [u.key for u in units]


def test_sweep_then_run_assembles_the_record_computed_directly(tmp_path, monkeypatch):
    """Two units in two local jobs; `runner.run` then reads them (training is made impossible) into the record
    that a direct run computes in another, fresh cache."""
    from gradalign.experiments.lga import shells

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "swept"))
    monkeypatch.setenv("GRADALIGN_THREADS", "1")  # in the jobs and in runner.run alike
    printed = []
    summary = sweep("lga.fig3", "smoke", "local", tmp_path / "jobs", TINY, parallel=2, poll_s=0.2, echo=printed.append)
    units = units_of("lga.fig3", _cfg(overrides=TINY))
    assert summary.ok and summary.submitted == summary.stored == [u.label for u in units]
    assert len(set(summary.jobs.values())) == 2 and str(os.getpid()) not in summary.jobs.values()
    assert printed[0] == "lga.fig3 [smoke]: 0 of 2 unit(s) stored, submitting 2 as jobs"
    assert printed[-1] == "  2 of 2 job(s) finished, 0 failed"
    for unit in units:
        assert (tmp_path / "swept" / "runs" / "lga.shells" / f"{unit.key}.json").exists()

    def no_training(*args):
        raise AssertionError("the record must be assembled from the run cache")

    train = shells._train
    monkeypatch.setattr(shells, "_train", no_training)
    swept = runner.run("lga.fig3", "smoke", TINY, store=ResultStore(tmp_path / "results-swept"))
    monkeypatch.setattr(shells, "_train", train)
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "direct"))
    direct = runner.run("lga.fig3", "smoke", TINY, store=ResultStore(tmp_path / "results-direct"))
    # A job trains its trial's supervised arm alone; the direct run trains the arms as one batch
    # (`training.shells_batched`): the same numbers to float rounding, and the same verdict.
    for part in ("metrics", "curves"):
        assert_close_nested(swept[part], direct[part], part)
    assert {k: c["passed"] for k, c in swept["checks"].items()} == {k: c["passed"] for k, c in direct["checks"].items()}
    for part in ("verdict", "config_hash"):
        assert swept[part] == direct[part], part


def assert_close_nested(a, b, where: str, rtol: float = 1e-6) -> None:
    """Equal structure, numbers equal to `rtol`, everything else equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_close_nested(a[key], b[key], f"{where}.{key}", rtol)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_nested(x, y, f"{where}[{i}]", rtol)
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=rtol, abs=1e-12), where
    else:
        assert a == b, where


def test_a_local_sweep_runs_past_its_first_batch(cache, tmp_path):
    """One slot, two units: the second batch is submitted after the first finished (issue 48, item 6: the loop over
    finished jobs overwrote the function to submit, and every unit after the first batch failed with
    "'LocalJob' object is not callable")."""
    printed = []
    summary = sweep("lga.fig3", "smoke", "local", tmp_path / "jobs", TINY, parallel=1, poll_s=0.2, echo=printed.append)
    assert summary.ok and summary.failed == {} and len(summary.stored) == 2, summary.lines()
    assert len(set(summary.jobs.values())) == 2
    assert printed[-2:] == ["  1 of 2 job(s) finished, 0 failed", "  2 of 2 job(s) finished, 0 failed"]
    assert missing_units(units_of("lga.fig3", _cfg(overrides=TINY))) == []


def test_every_batch_submits_the_same_function():
    """`_submit_and_wait` with a stand-in submitter: three units through one slot are three batches, each submitting
    the function it was given (never a job handle of an earlier batch)."""
    import contextlib
    from types import SimpleNamespace

    from gradalign.compute.sweep import _submit_and_wait

    submitted = []

    class Handle(SimpleNamespace):
        def done(self):
            return True

        def exception(self):
            return None

    def submit(fn, unit):
        submitted.append(fn)
        return Handle(job_id=str(len(submitted)), paths=SimpleNamespace(stderr="log"))

    submitter = SimpleNamespace(batch=contextlib.nullcontext, submit=submit)
    units = [SimpleNamespace(label=f"unit {n}") for n in range(3)]
    ids, failed = _submit_and_wait(submitter, units, len, 1, 0.01, lambda line: None)
    assert submitted == [len, len, len] and failed == {} and ids == {"unit 0": "1", "unit 1": "2", "unit 2": "3"}


def test_the_nested_comparison_fails_beyond_its_tolerance():
    assert_close_nested({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-9]}, "x")
    with pytest.raises(AssertionError):
        assert_close_nested({"a": [1.0, 2.0]}, {"a": [1.0, 2.001]}, "x")
    with pytest.raises(AssertionError):
        assert_close_nested({"a": "sgd"}, {"a": "adam"}, "x")


def test_rerun_with_every_unit_stored_submits_nothing(cache, tmp_path, one_thread):
    for unit in units_of("lga.fig3", _cfg(overrides=TINY)):
        unit.run()  # as `gradalign run` would have stored them
    summary = sweep("lga.fig3", "smoke", "local", tmp_path / "jobs", TINY, echo=pytest.fail)
    assert summary.ok and summary.submitted == [] and summary.jobs == {}
    assert summary.lines() == [
        "lga.fig3 [smoke]: 2 unit(s), all stored; nothing to submit (gradalign run lga.fig3 --preset smoke "
        + " ".join(SET)
        + " assembles the record)"
    ]
    assert not list((tmp_path / "jobs").glob("*_submitted.pkl"))


def _fail_once(marker, compute, checkpoint):
    """A unit's computation that fails the first time (it leaves `marker`), then computes."""
    if not marker.exists():
        marker.touch()
        raise RuntimeError("simulated failure of this unit")
    return compute(checkpoint)


def _main(argv, monkeypatch) -> int:
    """`gradalign <argv>` with the sweep subcommand registered (once cli.py registers it, as it is)."""
    parser = cli.parser

    def with_sweep():
        p = parser()
        subparsers = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        if "sweep" not in subparsers.choices:
            add_sweep_parser(subparsers)
        return p

    monkeypatch.setattr(cli, "parser", with_sweep)
    return cli.main(argv)


def test_a_failed_unit_is_reported_and_the_rerun_submits_only_it(cache, tmp_path, monkeypatch, capsys):
    import gradalign.compute.sweep as sweep_module

    units = units_of("lga.fig3", _cfg(overrides=TINY))
    flaky = replace(units[1], compute=functools.partial(_fail_once, tmp_path / "failed-once", units[1].compute))
    monkeypatch.setattr(sweep_module, "units_of", lambda element_id, cfg: [units[0], flaky])
    argv = ["sweep", "lga.fig3", "--preset", "smoke", "--folder", str(tmp_path / "jobs"), "--parallel", "2", *SET]

    assert _main(argv, monkeypatch) == 1
    out = capsys.readouterr().out
    assert "1 of 2 submitted stored, 1 failed" in out
    failed = [line for line in out.splitlines() if line.startswith("  failed: ")]
    assert len(failed) == 1
    assert failed[0].startswith("  failed: trial 1 (seed 1): RuntimeError: simulated failure of this unit (log: ")
    assert missing_units(units) == [units[1]]  # the other unit's entry is stored

    assert _main(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    assert "1 of 2 unit(s) stored, submitting 1 as jobs" in out and "1 of 1 submitted stored, 0 failed" in out
    assert missing_units(units) == []


def _diverge(compute, checkpoint):
    """A unit's computation that diverges (as a run stopped by the divergence check raises)."""
    from gradalign.errors import DivergenceError

    raise DivergenceError("simulated: the loss became NaN at step 3")


def _diverging_sweep(element_id, cache, tmp_path, monkeypatch):
    """`element_id`'s sweep at smoke over two tiny units, the second of which diverges."""
    import gradalign.compute.sweep as sweep_module

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    units = units_of("lga.fig3", _cfg(overrides=TINY))
    bad = replace(units[1], compute=functools.partial(_diverge, units[1].compute))
    monkeypatch.setattr(sweep_module, "units_of", lambda element_id, cfg: [units[0], bad])
    run = functools.partial(sweep, element_id, "smoke", folder=tmp_path / "jobs", parallel=2, echo=lambda line: None)
    return run, units[0], bad


def test_a_study_keeps_a_diverged_unit_as_its_result_and_never_submits_it_again(cache, tmp_path, monkeypatch):
    from gradalign.experiments.diverged_runs import diverged

    run, good, bad = _diverging_sweep("lga.tune", cache, tmp_path, monkeypatch)
    summary = run()
    assert summary.ok and summary.stored == [good.label] and summary.diverged == [bad.label]
    kept = diverged("lga.tune", tmp_path / "results")
    assert list(kept) == [bad.key] and kept[bad.key]["why"] == "simulated: the loss became NaN at step 3"
    assert "  diverged, kept as the study's result: " + bad.label in summary.lines()
    assert run().submitted == []  # kept: the study ranks it, no job trains it again


def test_a_kept_divergence_lands_in_the_store_that_holds_the_committed_runs(cache, tmp_path, monkeypatch):
    from gradalign.compute.sweep import compute_unit
    from gradalign.experiments.diverged_runs import diverged

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "elsewhere"))
    unit = units_of("lga.fig3", _cfg(overrides=TINY))[0]
    bad = replace(unit, compute=functools.partial(_diverge, unit.compute))
    assert compute_unit(bad, str(cache), 1, str(tmp_path / "store" / "runs"), study="sgr.lamfull") == bad.key
    assert list(diverged("sgr.lamfull", tmp_path / "store")) == [bad.key] and diverged("sgr.lamfull") == {}


def test_a_divergence_outside_a_study_fails_its_job_and_is_kept_nowhere(cache, tmp_path, monkeypatch):
    from gradalign.experiments.diverged_runs import diverged

    run, good, bad = _diverging_sweep("lga.fig3", cache, tmp_path, monkeypatch)
    summary = run()
    assert not summary.ok and summary.diverged == [] and summary.stored == [good.label]
    assert "DivergenceError: simulated: the loss became NaN" in summary.failed[bad.label]
    assert diverged("lga.tune", tmp_path / "results") == {} and run().submitted == [bad.label]


def test_two_divergences_kept_at_once_are_both_kept(cache, tmp_path, monkeypatch):
    """Two jobs that diverge together: each reads the file, adds its run and writes it back. The read is slowed so
    that, without the lock, both read the empty file and the later write drops the earlier run."""
    import threading
    import time

    from gradalign.experiments import diverged_runs

    read = diverged_runs.diverged

    def slow_read(study, root=None):
        runs = read(study, root)
        time.sleep(0.3)
        return runs

    monkeypatch.setattr(diverged_runs, "diverged", slow_read)
    units = units_of("lga.fig3", _cfg(overrides=TINY))[:2]
    store = tmp_path / "store"
    threads = [
        threading.Thread(target=diverged_runs.keep_diverged, args=("sgr.lamfull", u, "simulated", "cpu", store))
        for u in units
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(read("sgr.lamfull", store)) == sorted(u.key for u in units)


BAD_INPUT = {  # argv after `sweep`: the start of the one-line error
    "unknown id": (["lga.nope"], "unknown element id 'lga.nope'"),
    "id without units": (["lga.fig1"], "lga.fig1 has no units to sweep"),
    "bad executor": (["lga.fig3", "--executor", "pbs"], "unknown executor 'pbs'; choose one of: local, slurm"),
    "bad preset": (["lga.fig3", "--preset", "huge"], "unknown preset 'huge'"),
    "bad override": (["lga.fig3", "--set", "trials=0"], "ShellsStudyConfig.trials must be >= 1"),
    "bad executor parameter": (["lga.fig3", "--param", "bogus=1"], "bad local executor parameter"),
    "bad parallel": (["lga.fig3", "--parallel", "0"], "--parallel must be an integer in [1, 100000]; got 0"),
}


@pytest.mark.parametrize("name", BAD_INPUT)
def test_bad_input_is_one_line_before_any_submission(name, cache, tmp_path, monkeypatch, capsys):
    import gradalign.compute.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_submit_and_wait", lambda *args: pytest.fail("submitted"))
    args, error = BAD_INPUT[name]
    argv = ["sweep", args[0], "--preset", "smoke", "--folder", str(tmp_path / "jobs"), *args[1:]]
    assert _main(argv, monkeypatch) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"gradalign: error: {error}") and captured.err.count("\n") == 1
    assert captured.out == "" and not (cache / "runs").exists()


def test_slurm_needs_srun_here(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun on it
    with pytest.raises(ConfigError, match="executor 'slurm' cannot submit from this machine: Could not detect"):
        sweep("lga.fig3", "smoke", "slurm", tmp_path / "jobs", TINY)


def test_local_jobs_run_this_python(tmp_path):
    assert make_executor("local", tmp_path, {})._executor.python == shlex.quote(sys.executable)


def test_slurm_jobs_get_the_options_as_sbatch_parameters(cache, tmp_path, monkeypatch, one_thread):
    """With an `srun` on the PATH (a stub), the Slurm executor is built; the jobs are captured, not submitted."""
    import gradalign.compute.sweep as sweep_module

    monkeypatch.setenv("GRADALIGN_THREADS", "3")  # a job's cores: the threads it pins

    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    seen = {}

    def capture(submitter, units, job, slots, poll_s, echo):
        seen.update(parameters=submitter._executor.parameters, units=len(units), slots=slots)
        seen.update(cache=job.keywords["cache"], threads=job.keywords["threads"], committed=job.keywords["committed"])
        for unit in units:
            unit.run()  # as the jobs would
        return {}, {}

    monkeypatch.setattr(sweep_module, "_submit_and_wait", capture)
    options = dict(partition="gpu", gpus_per_node=1, timeout_min=30, mem_gb=8, parallel=4)
    summary = sweep("lga.fig3", "smoke", "slurm", tmp_path / "jobs", TINY, **options, parameters={"slurm_qos": "high"})
    assert summary.ok and len(summary.stored) == 2
    assert seen["units"] == seen["slots"] == 2 and seen["cache"] == str(cache) and seen["threads"] == 3
    assert seen["committed"] is None  # smoke runs are never committed
    assert seen["parameters"] == {
        "job_name": "gradalign-lga.fig3",
        "time": 30,
        "cpus_per_task": 3,
        "gpus_per_node": 1,
        "mem": "8GB",
        "partition": "gpu",
        "array_parallelism": 4,
        "qos": "high",
    }
