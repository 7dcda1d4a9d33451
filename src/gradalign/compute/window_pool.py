"""A window's units trained by several worker processes at once (`gradalign gpu-window --workers N`).

The networks the backlog trains first (the pilots' reruns: a small CNN, Conv-Large ×0.125, ResNet-32 on 28×28
images) are far too small to fill an H100: one run is bound by Python and kernel launches, not by the GPU. Several
runs in separate processes share the GPU and the machine's cores, so a 9-minute window finishes several times more
units (our measurement is in each window's `window.json`: every unit's wall time, with the worker count).

Each worker is a fresh `spawn` process (CUDA cannot be forked) with `threads` torch threads; it trains one unit
at a time inside the window's deadline (`timebox.time_box`: a run stops at its next checkpoint when the deadline
would pass, and is then not committed), and commits the finished entry to the checkout's `results/runs/` as the
serial window does (`run_unit.committed_runs`). Entries are written atomically under distinct keys, so workers never
write the same file. Units are dispatched in the backlog's order; the window assembles a record only once all of an
experiment's units are committed.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import time
from pathlib import Path
from typing import Callable, Iterator

from gradalign.errors import ConfigError, DivergenceError


def check_workers(workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
        raise ConfigError(f"--workers must be an integer in [1, 64]; got {workers!r}")


def train_in_pool(
    jobs: list[tuple[str, str, object]], runs: Path, deadline: float, workers: int, threads: int, meanwhile: Callable
) -> Iterator[dict]:
    """Train `jobs` ((element id, preset, unit) in priority order) in `workers` processes until the monotonic
    `deadline`; call `meanwhile()` in this process once they are dispatched; yield each unit's row as it ends."""
    check_workers(workers)
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        rows = pool.imap_unordered(_train_one, [(*job, str(runs), deadline, threads) for job in jobs], chunksize=1)
        meanwhile()
        yield from rows


def left_item(element_id: str, preset: str, diverged: int = 0) -> str:
    """A backlog item a window leaves, as `window.left` names it: "sgr.fig2 [cpu] (2 units diverged)"."""
    return f"{element_id} [{preset}]" + (f" ({diverged} unit{'s' * (diverged != 1)} diverged)" if diverged else "")


def unit_row(element_id: str, preset: str, unit, **fields) -> dict:
    """A unit's row in `window.json` (serial and parallel windows alike)."""
    return {"element": element_id, "preset": preset, "label": unit.label, "kind": unit.kind, "key": unit.key, **fields}


class UnitDiverged(DivergenceError):
    """A unit's divergence in a window, already reported on the unit's own row (not again on its element's)."""


def diverged_fields(err: Exception) -> dict:
    """A diverged unit's row fields: its status, and the commit and hardware it diverged on, which the import keeps
    with the divergence where the unit is a study's (`gpu_import`, `diverged_runs.keep_diverged`)."""
    import torch

    from gradalign.environment import git_commit, hardware

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"status": f"diverged: {err}", "git_commit": git_commit(), "hardware": hardware(device)}


def _train_one(job) -> dict:
    """A worker's body: one unit trained and committed within the deadline; its row for `window.json`."""
    element_id, preset, unit, runs, deadline, threads = job
    from gradalign.store.run_unit import committed_runs, runs_read
    from gradalign.runtime import pin_threads
    from gradalign.training.timebox import TimeBoxSpent, time_box
    from gradalign.compute.window_measure import unit_throughput

    row = {**unit_row(element_id, preset, unit), "worker": os.getpid()}
    left = deadline - time.monotonic()
    if left <= 1:
        return {**row, "seconds": 0.0, "hardware": "", "status": "not begun: the time box closed"}
    pin_threads(threads)
    start, made, progress, rate, kept = time.monotonic(), {}, None, None, {}
    try:
        with time_box(left / 60), committed_runs(Path(runs), write=True):
            value = unit.run()
            made = runs_read().get((unit.kind, unit.key), {})
        status, rate = "finished", unit_throughput(unit.kind, unit.spec, value)
    except TimeBoxSpent as err:
        status = "stopped by the time box"
        progress = stopped_at(str(err))
    except DivergenceError as err:
        kept = diverged_fields(err)
        status = kept["status"]
    except Exception as err:  # noqa: BLE001 (a failed unit is reported in the window's file; the others go on)
        status = f"failed: {type(err).__name__}: {err}"
    row.update(seconds=round(time.monotonic() - start, 3), hardware=made.get("hardware", ""), status=status)
    row.update(kept)  # a divergence: the commit and hardware it happened on
    return {**row, **({"progress": progress} if progress else {}), **({"throughput": rate} if rate else {})}


def stopped_at(message: str) -> list[int] | None:
    """[done, total] steps (or epochs) of a run the box stopped, from its `TimeBoxSpent` message ("... stopped
    after step 450 of 6000 ..."): with the unit's seconds, what a full unit would take on this machine (an upper
    bound: the seconds include the run's start), which sizes the `gpu` presets from units no window finished."""
    found = re.search(r"stopped after (?:step|epoch) (\d+) of (\d+)", message)
    return [int(found[1]), int(found[2])] if found and int(found[1]) > 0 else None
