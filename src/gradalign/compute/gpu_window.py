"""`gradalign gpu-window` and `gradalign import`: a short GPU window that finishes whole units, and its return.

A window (a lent GPU machine: about 15 minutes of device time, commands of at most 10 minutes, at most 8
files of at most 16 MiB back) is one command, run in a checkout that carries the committed `results/`:

1. `bench --quick` on the device, first and alone (`window_measure.bench_slot`: no worker or test shares the GPU
   while it is timed): every benchmark at its tiny sizes, whose CUDA records `import` keeps as
   `results/bench/<name>/gpu-<device>-quick.json`;
2. the CUDA tests at `smoke` (`window_measure.CUDA_TESTS`; skipped without a CUDA device or without pytest), while
   the workers train when there are several;
3. the units of a backlog (`BACKLOG`, most valuable first) under the window's time box (`timebox`): each unit's finished
   entry is committed to the checkout's `results/runs/` (`run_unit`), and once an experiment's units are all there its
   record is assembled (`runner.run`; a pilot's or a budget check's runs make no record). A unit the box stops keeps its
   checkpoint in the run cache and is not committed. Units already committed (by an earlier window, carried in the
   checkout) are read, not trained: a window continues where the last one stopped. A unit that diverges (here, or
   in an earlier window: `gpu_import.diverged_before`) is not trained again: a study's other units still train (it
   ranks it), another experiment is left for a sitting (a local-BP table's run, `gpu_import.retried`, trains again).

For the whole window GPU utilisation and memory are sampled once a second (`gpu_sampler`: nvidia-smi, else torch,
else the report says why not), with the phases marked (bench, training); each unit's throughput comes from its run
(`window_measure.unit_throughput`) and is summarised per unit kind: both are in `window.json`.

Everything the window finished is written to `--out` as it goes (at most `MAX_FILES` files, each under
`MAX_FILE_BYTES`): `window.json` (what ran, each unit's wall time and hardware, what is left), `runs-<n>.json`
(committed run entries), `records.json`, `bench.json`, and the stopped runs' checkpoints in up to
`window_carry.CARRY_FILES` tar files (`window_carry.carry_files`). A command stopped at its limit still
leaves what it had finished. Back on the CPU machine `gradalign import DIR` checks every digest (entries as
`run_unit.check_entry`, records as the results store reads them), places the entries and records in the results
store, and says what it added; then commit them. Nothing here imports jupyter or papermill.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from gradalign.errors import ConfigError, DivergenceError
from gradalign.experiments.diverged_runs import STUDIES
from gradalign.compute.backlog import BACKLOG
from gradalign.compute.pilots import runs_only
from gradalign.compute.window_files import MAX_FILE_BYTES, Window, WindowWriter, snapshot
from gradalign.compute.window_pool import UnitDiverged, diverged_fields, left_item, unit_row
from gradalign.compute.gpu_import import diverged_before, left_diverged
from gradalign.compute.window_measure import bench_slot, cuda_tests, unit_throughput


def gpu_window(
    minutes: float,
    out: str | Path,
    backlog=BACKLOG,
    *,
    device: str = "auto",
    tests: bool = True,
    bench: bool = True,
    workers: int = 1,
    echo: Callable[[str], None] = print,
) -> Window:
    """Run one window of at most `minutes` and write what it finished to `out` (see the module's text)."""
    from gradalign.records.results import ResultStore
    from gradalign.store.runcache import cache_root
    from gradalign.runtime import check_device, pin_threads, select_device
    from gradalign.training.timebox import check_minutes, seconds_left, time_box
    from gradalign.compute.window_carry import CARRY_FOLDER, carry_files, carry_stopped, seed
    from gradalign.compute.gpu_sampler import Sampler
    from gradalign.compute.window_pool import check_workers

    check_minutes(minutes)
    check_device(device)
    check_workers(workers)
    out = _out_folder(out)
    dev = select_device(device)
    pin_threads()  # as `gradalign run` does: the units a window computes are the ones a run computes
    store = ResultStore()
    before = snapshot(store.root)
    window = Window(minutes=minutes, device=str(dev), workers=workers, began=_now())
    window.carried = seed(store.root.parent / CARRY_FOLDER, cache_root(), store.root / "runs")
    if window.carried:
        echo(f"gpu-window: {len(window.carried)} run(s) resume from checkpoints an earlier window left")
    sampler = Sampler().start()
    writer = WindowWriter(out, store.root, before, window, sampler)
    start = time.monotonic()

    def checks() -> None:
        if tests:
            window.tests = cuda_tests(dev, seconds_left)
            echo(f"gpu-window: CUDA tests: {window.tests['outcome']}")
            writer.write()

    try:
        with time_box(minutes):
            if bench:  # alone, before any worker or test begins
                sampler.mark("bench")
                window.bench, window.bench_slot = bench_slot(dev)
                echo(f"gpu-window: bench --quick alone: {len(window.bench)} benchmark(s)")
                writer.write()
            sampler.mark("training")
            if workers == 1:
                checks()
                _backlog(window, backlog, dev, store, writer, echo)
            else:  # the tests run here while the workers train
                _backlog_in_pool(window, backlog, dev, store, writer, echo, checks)
            sampler.mark("end")
    finally:
        sampler.stop()
    window.checkpoints, window.checkpoints_left = carry_stopped(backlog, store.root, carry_files(out), MAX_FILE_BYTES)
    if window.checkpoints_left:
        echo(f"gpu-window: no room to carry {len(window.checkpoints_left)} checkpoint(s); those runs start over")
    writer.write()
    echo(
        f"gpu-window: {sum(u['status'] == 'finished' for u in window.units)} unit(s) finished, "
        f"{len(window.records)} record(s) in {time.monotonic() - start:.0f} s"
        + (f"; stopped: {window.stopped}" if window.stopped else "; backlog done")
        + f"; files in {out}"
    )
    return window


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _out_folder(out: str | Path) -> Path:
    if not str(out).strip():
        raise ConfigError("--out must name a folder")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {path} is a file; give a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _backlog(window: Window, backlog, dev, store, writer: WindowWriter, echo) -> None:
    from gradalign.experiments import get
    from gradalign.experiments.units import UNITS, units_of
    from gradalign.store.run_unit import committed_runs, read_entry, runs_read
    from gradalign.records.runner import run
    from gradalign.training.timebox import TimeBoxSpent

    diverged = diverged_before(store.root)
    for index, (element_id, preset, overrides) in enumerate(backlog):
        cfg = get(element_id).resolve(preset, overrides)
        try:
            skipped = 0  # a study's units kept as diverged: the study ranks them; the rest still train
            if element_id in UNITS:
                for unit in units_of(element_id, cfg):
                    if not _box_open():
                        raise TimeBoxSpent(f"the window's time box closed before {unit.label}")
                    stopped = left_diverged(unit, diverged)
                    if stopped and read_entry(store.root / "runs", unit) is None:
                        if element_id not in STUDIES:
                            raise DivergenceError(f"{unit.label} diverged in an earlier window (not trained again)")
                        window.units.append(unit_row(element_id, preset, unit, status="diverged in an earlier window"))
                        skipped += 1
                        continue
                    start, there = time.monotonic(), read_entry(store.root / "runs", unit) is not None
                    try:
                        with committed_runs(store.root / "runs", write=True):
                            value = unit.run()
                            made = runs_read().get((unit.kind, unit.key), {})
                    except DivergenceError as err:  # its row (kind, key) tells the next window and the import
                        seconds = round(time.monotonic() - start, 3)
                        window.units.append(unit_row(element_id, preset, unit, seconds=seconds, **diverged_fields(err)))
                        if element_id not in STUDIES:
                            raise UnitDiverged(str(err)) from err  # reported once: on the unit's row
                        writer.write()
                        diverged.add((unit.kind, unit.key))  # the study's result (kept by the import); the rest train
                        skipped += 1
                        continue
                    seconds = round(time.monotonic() - start, 3)
                    status = "committed before" if there else "finished"
                    rate = unit_throughput(unit.kind, unit.spec, value)
                    hardware, extra = made.get("hardware", ""), {"throughput": rate} if rate else {}
                    window.units.append(
                        unit_row(element_id, preset, unit, seconds=seconds, hardware=hardware, status=status, **extra)
                    )
                    writer.write()
            if skipped:  # assembled where the divergences are kept (`gradalign import`), as the pool path leaves it
                window.left.append(left_item(element_id, preset, skipped))
                continue
            if runs_only(element_id, preset, overrides):
                continue  # a pilot's or a budget check's runs: read by a page or a precondition, no record
            start = time.monotonic()
            run(element_id, preset, overrides, store=store, device=str(dev))
            window.records.append(f"{element_id} [{preset}] in {time.monotonic() - start:.1f} s")
            echo(f"gpu-window: {element_id} [{preset}] record stored")
            writer.write()
        except TimeBoxSpent as err:
            window.stopped = f"{element_id} [{preset}]: {err}"
            window.left = [f"{e} [{p}]" for e, p, _ in backlog[index:]]
            return
        except ConfigError as err:  # e.g. a data set this machine lacks: the next item
            window.units.append({"element": element_id, "preset": preset, "status": f"refused: {err}"})
            writer.write()
        except DivergenceError as err:  # a run that diverged cannot complete its experiment: the next item
            if isinstance(err, UnitDiverged):  # its row is the unit's; left, as the pool path leaves it
                window.left.append(left_item(element_id, preset, 1))
            else:
                window.units.append({"element": element_id, "preset": preset, "status": f"diverged: {err}"})
            writer.write()


def _backlog_in_pool(window: Window, backlog, dev, store, writer: WindowWriter, echo, meanwhile) -> None:
    """The backlog's uncommitted units in `window.workers` processes (`window_pool`), then each whole one's record."""
    from gradalign.experiments import get
    from gradalign.experiments.units import UNITS, units_of
    from gradalign.store.run_unit import read_entry
    from gradalign.records.runner import run
    from gradalign.runtime import threads_from_env
    from gradalign.training.timebox import TimeBoxSpent, seconds_left
    from gradalign.compute.window_pool import train_in_pool

    runs, items, jobs, diverged = store.root / "runs", [], [], diverged_before(store.root)
    queued: dict[tuple[str, str], str] = {}  # (kind, key) -> the item it is trained for: two items may share a run
    for element_id, preset, overrides in backlog:
        try:
            units = units_of(element_id, get(element_id).resolve(preset, overrides)) if element_id in UNITS else []
        except ConfigError as err:
            window.units.append({"element": element_id, "preset": preset, "status": f"refused: {err}"})
            continue
        items.append((element_id, preset, overrides, units))
        for unit in units:
            if read_entry(runs, unit) is not None:
                window.units.append(unit_row(element_id, preset, unit, status="committed before"))
            elif left_diverged(unit, diverged):
                window.units.append(unit_row(element_id, preset, unit, status="diverged in an earlier window"))
            elif (unit.kind, unit.key) in queued:
                window.units.append(
                    unit_row(element_id, preset, unit, status=f"trained for {queued[unit.kind, unit.key]}")
                )
            else:
                queued[unit.kind, unit.key] = element_id
                jobs.append((element_id, preset, unit))
    deadline = time.monotonic() + seconds_left()
    for done, row in enumerate(train_in_pool(jobs, runs, deadline, window.workers, threads_from_env(), meanwhile), 1):
        window.units.append(row)
        if row["status"].startswith("diverged"):
            diverged.add((row["kind"], row["key"]))
        echo(f"gpu-window: [{done}/{len(jobs)}] {row['label']}: {row['status']} ({row.get('seconds', 0):.0f} s)")
        writer.write()
    for element_id, preset, overrides, units in items:
        if not all(read_entry(runs, unit) is not None for unit in units) or not _box_open():
            lost = sum(left_diverged(unit, diverged) and read_entry(runs, unit) is None for unit in units)
            window.left.append(left_item(element_id, preset, lost))
            continue
        if runs_only(element_id, preset, overrides):
            continue  # a pilot's or a budget check's runs: read by a page or a precondition, no record
        try:
            start = time.monotonic()
            run(element_id, preset, overrides, store=store, device=str(dev))
            window.records.append(f"{element_id} [{preset}] in {time.monotonic() - start:.1f} s")
            echo(f"gpu-window: {element_id} [{preset}] record stored")
        except (ConfigError, DivergenceError, TimeBoxSpent) as err:
            window.units.append({"element": element_id, "preset": preset, "status": f"no record: {err}"})
        writer.write()
    if window.left:
        window.stopped = f"the time box closed with {len(window.left)} experiment(s) unfinished"


def _box_open() -> bool:
    """Whether the window's time box still has time for another unit to begin."""
    from gradalign.training.timebox import seconds_left

    left = seconds_left()
    return left is None or left > 0
