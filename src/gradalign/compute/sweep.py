"""`gradalign sweep`: an experiment's units (`experiments.units`) computed as separate jobs through submitit.

Each missing unit is one job: submitit's local executor runs it in a subprocess of this machine's Python
(`sys.executable`), Slurm as a task of a job array. A job computes its unit with `Unit.run`, which writes
the run-cache entry atomically (temporary file, then rename), so a job killed half way leaves no entry, at
most a checkpoint that the next attempt resumes from. The sweep waits, prints its progress, and returns
which units are stored and which failed (one line each); a rerun submits only what is still missing, and
`gradalign run <id>` then assembles the record from the cache exactly as if it had trained itself.
Interrupting the sweep leaves its jobs running (Slurm's, and the local executor's subprocesses too); a
rerun submits again whatever they have not stored by then.

A job sees the caller's run cache and threads: it sets GRADALIGN_CACHE to the caller's `cache_root()` and
pins torch to the caller's GRADALIGN_THREADS, as `gradalign run` does, so that a unit computed in a job is
the one computed in-process (on a cluster the cache and the job folder must be on a shared file system).

A unit is missing when the run cache cannot give its value: `missing_units` asks `cached_run` itself, with a
compute that raises a private exception. A valid stored entry comes back; a missing one reaches the
compute, and so does an unusable one (reported with a RunCacheWarning, as a run would report it). The
sweep thus applies exactly the checks a run applies, with no second reader of entries to keep in step.

Bad input (an unknown id, an experiment without units, a bad preset, override or executor, an executor
that cannot submit from here) is a ConfigError before anything is submitted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gradalign.compute.job_options import check_job_options
from gradalign.errors import ConfigError
from gradalign.experiments.units import units_of
from gradalign.store.run_unit import Unit
from gradalign.store.runcache import cached_run

EXECUTORS = ("local", "slurm")
DEFAULT_TIMEOUT_MIN = 240  # per job; a unit that runs out keeps its checkpoint and the rerun resumes it


class _NotStored(Exception):
    """Raised by the probe's compute: cached_run found no usable entry."""


def _not_stored(_checkpoint) -> None:
    raise _NotStored


def missing_units(units: list[Unit], committed: Path | None = None) -> list[Unit]:
    """The units without a usable entry in the committed runs (`committed`, when given) or the run cache
    (`cache_root()`), in their order. Outside `force_recompute` only: within it every entry counts as missing
    (and its checkpoint is dropped)."""
    from gradalign.store.run_unit import read_entry

    missing = []
    for unit in units:
        if committed is not None and read_entry(committed, unit) is not None:
            continue
        try:
            cached_run(unit.kind, unit.spec, unit.version, _not_stored, lock=False)
        except _NotStored:
            missing.append(unit)
    return missing


def compute_unit(unit: Unit, cache: str, threads: int, committed: str | None = None, study: str | None = None) -> str:
    """A job's body: `unit` computed into the run cache `cache` with `threads` torch threads, and committed to
    `committed` (the results store's `runs/`, at the presets whose runs are committed) with its hardware; its key.
    A divergence of a run of a study that keeps its divergences (`study` in `diverged_runs.STUDIES`) is kept as
    the study's result, in the results store that holds `committed` (the job then succeeds), as the study itself
    keeps it; any other divergence fails the job."""
    import contextlib

    from gradalign.errors import DivergenceError
    from gradalign.experiments.diverged_runs import STUDIES, keep_diverged
    from gradalign.runtime import pin_threads, select_device
    from gradalign.store.run_unit import committed_runs

    os.environ["GRADALIGN_CACHE"] = cache  # and for any run the unit reads in turn
    pin_threads(threads)
    try:
        with committed_runs(Path(committed), write=True) if committed else contextlib.nullcontext():
            unit.run()
    except DivergenceError as err:
        if study not in STUDIES:
            raise
        keep_diverged(study, unit, str(err), select_device(), Path(committed).parent if committed else None)
    return unit.key


def kept_diverged(element_id: str, committed: Path | None) -> dict[str, dict]:
    """Run key -> what was kept, for the runs of `element_id` kept as diverged (a study's result; {} for others)."""
    from gradalign.experiments.diverged_runs import STUDIES, diverged

    return diverged(element_id, committed.parent if committed else None) if element_id in STUDIES else {}


@dataclass
class SweepSummary:
    """What a sweep did: the units it submitted, which are stored now and why the others failed."""

    element_id: str
    preset: str
    units: int  # all the units of the experiment at this config
    submitted: list[str] = field(default_factory=list)  # labels of the units submitted as jobs
    stored: list[str] = field(default_factory=list)  # of those, the ones whose entry is now stored
    diverged: list[str] = field(default_factory=list)  # of those, the ones kept as diverged (a study's result)
    failed: dict[str, str] = field(default_factory=dict)  # label -> why, one line
    jobs: dict[str, str] = field(default_factory=dict)  # label -> submitit job id (local: the process id)
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def run_command(self) -> str:
        """The `gradalign run` that assembles the record from the units."""
        sets = [
            f"{key}={json.dumps(value, separators=(',', ':'), default=str)}" for key, value in self.overrides.items()
        ]
        return " ".join(
            ["gradalign run", self.element_id, "--preset", self.preset, *(f"--set {shlex.quote(s)}" for s in sets)]
        )

    @property
    def ok(self) -> bool:
        return not self.failed

    def lines(self) -> list[str]:
        head = f"{self.element_id} [{self.preset}]: {self.units} unit(s)"
        if not self.submitted:
            return [f"{head}, all stored; nothing to submit ({self.run_command} assembles the record)"]
        lines = [f"{head}: {len(self.stored)} of {len(self.submitted)} submitted stored, {len(self.failed)} failed"]
        lines += [f"  diverged, kept as the study's result: {label}" for label in self.diverged]
        lines += [f"  failed: {label}: {why}" for label, why in self.failed.items()]
        if self.ok:
            lines.append(f"  all stored: {self.run_command} assembles the record")
        else:
            lines.append("  rerun the same sweep to submit only the units still missing")
        return lines


def sweep(
    element_id: str,
    preset: str,
    executor: str = "local",
    folder: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    partition: str | None = None,
    gpus_per_node: int | None = None,
    cpus_per_task: int | None = None,
    timeout_min: int = DEFAULT_TIMEOUT_MIN,
    mem_gb: float | None = None,
    parallel: int | None = None,
    parameters: dict[str, Any] | None = None,
    poll_s: float = 10.0,
    echo: Callable[[str], None] = print,
) -> SweepSummary:
    """Submit the units of `element_id` at `preset` that the run cache lacks, one job each, and wait for them.

    `folder`: submitit's job folder (pickles, logs); default `<run cache>/sweeps/<id>`. `partition`,
    `gpus_per_node`, `cpus_per_task` (default: the threads a job pins), `timeout_min` and `mem_gb` are
    submitit's; the local executor ignores the partition and the memory, and shows a job no GPU unless
    `gpus_per_node` asks for one. `parallel`: jobs at once (local default: the cores over the threads a job
    pins; Slurm: the job array's parallelism, default all). `parameters`: passed to submitit's
    `update_parameters` as they are (`slurm_qos`, `slurm_account`, ...).
    """
    from gradalign.experiments import get
    from gradalign.store.runcache import cache_root
    from gradalign.runtime import threads_from_env

    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    check_job_options(executor, timeout_min, cpus_per_task, mem_gb, gpus_per_node, parallel)
    exp = get(element_id)
    cfg = exp.resolve(preset, overrides)  # validates before anything is submitted
    units = units_of(element_id, cfg)
    threads = threads_from_env()
    cache = cache_root().absolute()
    if parallel is not None and parallel < 1:
        raise ConfigError(f"parallel must be >= 1; got {parallel}")
    if executor == "local":
        parallel = parallel or max(1, (os.cpu_count() or 1) // threads)
    options = {
        "name": f"gradalign-{element_id}",
        "timeout_min": timeout_min,
        "cpus_per_task": cpus_per_task or threads,
        "gpus_per_node": gpus_per_node,
        "mem_gb": mem_gb,
        "slurm_partition": partition,
        "slurm_array_parallelism": parallel if executor == "slurm" else None,
        **(parameters or {}),
    }
    if folder:  # submitit's job folder, checked as `run` checks its folders (the default is in the run cache)
        from gradalign.records.storage import check_folder

        check_folder(folder, "--folder (submitit's job folder)", min_free=2**20)
    submitter = make_executor(executor, Path(folder) if folder else cache / "sweeps" / element_id, options)
    summary = SweepSummary(element_id, preset, len(units), overrides=dict(overrides or {}))
    committed = _committed_folder(preset)
    kept = kept_diverged(element_id, committed)
    missing = [unit for unit in missing_units(units, committed) if unit.key not in kept]
    if not missing:
        return summary
    from gradalign.store.atomic import check_writable, remove_stale_temporaries

    check_writable(cache, "run cache (GRADALIGN_CACHE)")  # the jobs write their entries there
    remove_stale_temporaries(cache)
    stored = len(units) - len(missing)
    echo(f"{element_id} [{preset}]: {stored} of {len(units)} unit(s) stored, submitting {len(missing)} as jobs")
    if executor == "local" and not gpus_per_node and any((u.spec.get("fast") or {}).get("bf16") for u in missing):
        from gradalign.compute.bf16_speed import slow_bf16
        from gradalign.training.fast import FastPath

        echo(f"  note: {slow_bf16(FastPath(bf16=True), 'cpu') or 'bf16 autocast runs natively on this CPU'}")
    summary.submitted = [unit.label for unit in missing]
    slots = parallel if executor == "local" else len(missing)
    job = functools.partial(
        compute_unit, cache=str(cache), threads=threads, committed=committed and str(committed), study=element_id
    )
    summary.jobs, summary.failed = _submit_and_wait(submitter, missing, job, slots, poll_s, echo)
    kept = kept_diverged(element_id, committed)
    summary.diverged = [unit.label for unit in missing if unit.key in kept]
    still = {unit.label for unit in missing_units(missing, committed) if unit.key not in kept}
    for label in still - set(summary.failed):  # the job ended well but left no entry where we look
        summary.failed[label] = f"its job finished but no entry is in the run cache {cache}"
    summary.stored = [label for label in summary.submitted if label not in still and label not in summary.diverged]
    return summary


def make_executor(executor: str, folder: Path, options: dict[str, Any]):
    """submitit's AutoExecutor for `executor` with `options` (None: not set); a ConfigError when it cannot be."""
    import submitit

    try:
        submitter = submitit.AutoExecutor(folder=folder, cluster=executor)
    except RuntimeError as err:  # Slurm asked where there is no srun
        raise ConfigError(f"executor {executor!r} cannot submit from this machine: {_first_line(err)}") from None
    try:
        submitter.update_parameters(**{name: value for name, value in options.items() if value is not None})
    except (NameError, AssertionError, ValueError, TypeError) as err:
        raise ConfigError(f"bad {executor} executor parameter: {_first_line(err)}") from None
    return submitter


def _committed_folder(preset: str) -> Path | None:
    """Where the runs of `preset` are committed (`<results>/runs`), or None (smoke: never committed)."""
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import COMMITTED_PRESETS

    return ResultStore().root / "runs" if preset in COMMITTED_PRESETS else None


def _submit_and_wait(submitter, units: list[Unit], job: Callable[[Unit], str], slots: int, poll_s: float, echo):
    """Submit `units` (at most `slots` running at once) and wait for them all: (label -> job id, label -> why
    for the failed). Polls every 0.1 s at first, backing off to `poll_s` while nothing finishes."""
    pending, running, ids, failed, done, wait = list(units), [], {}, {}, 0, 0.1
    while pending or running:
        if pending and len(running) < slots:
            batch, pending = pending[: slots - len(running)], pending[slots - len(running) :]
            with submitter.batch():
                submitted = [submitter.submit(job, unit) for unit in batch]
            running += list(zip(submitted, batch))
            ids.update((unit.label, handle.job_id) for handle, unit in zip(submitted, batch))
        finished = [(handle, unit) for handle, unit in running if handle.done()]
        for handle, unit in finished:  # `handle`, not `job`: `job` is the function the next batch submits
            running.remove((handle, unit))
            error = handle.exception()
            if error is not None:
                failed[unit.label] = f"{_reason(error)} (log: {handle.paths.stderr})"
        if finished:
            done, wait = done + len(finished), 0.1
            echo(f"  {done} of {len(units)} job(s) finished, {len(failed)} failed")
        elif running:
            time.sleep(wait)
            wait = min(2 * wait, poll_s)
    return ids, failed


def _reason(error: Exception) -> str:
    """One line for a failed job: the last line of its traceback (`ValueError: ...`), else the error's first."""
    lines = str(error).splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    trace = [line.strip() for line in lines[rules[0] + 1 : rules[1]] if line.strip()] if len(rules) >= 2 else []
    return trace[-1] if trace else _first_line(error)


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def cmd_sweep(args) -> int:
    """0 when every unit is stored, 1 when some failed; bad input raises a ConfigError (the CLI: exit 2)."""
    from gradalign.config import check_preset
    from gradalign.compute.overrides import parse_overrides

    from gradalign.records.storage import check_data_env

    check_preset(args.preset)
    check_data_env()
    if args.folder is not None and not args.folder.strip():
        raise ConfigError("--folder is empty; give a folder for submitit's job files, or leave it out")
    summary = sweep(
        args.id,
        args.preset,
        args.executor,
        args.folder,
        parse_overrides(args.set),
        partition=args.partition,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        timeout_min=args.timeout_min,
        mem_gb=args.mem_gb,
        parallel=args.parallel,
        parameters=parse_overrides(args.param, "--param"),
    )
    for line in summary.lines():
        print(line)
    sys.stdout.flush()
    return 0 if summary.ok else 1


def add_sweep_parser(subparsers) -> argparse.ArgumentParser:
    """Register `gradalign sweep` on the CLI's subparsers; its func returns the exit status."""
    s = subparsers.add_parser("sweep", help="compute an experiment's units (trials, runs) as jobs: local or Slurm")
    s.add_argument("id", help="element id with units, e.g. lga.fig3")
    s.add_argument("--preset", default="cpu", help="smoke | cpu | gpu | paper (default: cpu)")
    s.add_argument("--executor", default="local", help="local (subprocesses here) | slurm (default: local)")
    s.add_argument("--folder", help="submitit's job folder (default: <run cache>/sweeps/<id>); shared on a cluster")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    s.add_argument("--partition", help="Slurm partition")
    s.add_argument("--gpus-per-node", type=int, help="GPUs per job (local: GPUs a job may see; default none)")
    s.add_argument("--cpus-per-task", type=int, help="cores per job (default: GRADALIGN_THREADS, 2)")
    s.add_argument("--mem-gb", type=float, help="memory per job (Slurm)")
    s.add_argument("--timeout-min", type=int, default=DEFAULT_TIMEOUT_MIN, help="minutes per job (default: 240)")
    s.add_argument("--parallel", type=int, help="jobs at once (local: cores / threads; Slurm: the array's limit)")
    s.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a submitit parameter passed as it is, JSON value (slurm_qos=high, slurm_account=proj)",
    )
    s.set_defaults(func=cmd_sweep)
    return s
