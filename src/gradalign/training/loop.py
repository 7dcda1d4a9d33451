"""The one training loop. A run is any object with `step(t) -> diagnostics`, `evaluate(t, sums, count, last) -> values`,
`state_dict()` and `load_state_dict(state)`; the loop owns everything else:

- the cadence: `evaluate` after step t when `eval_at(t)` (default: every `eval_every` steps and the last);
- the sums of the step diagnostics since the last evaluation, kept on the device (no host sync per step);
- the divergence stop at each evaluation (`divergence`), naming the step and the quantity: a step diagnostic
  or an evaluated value NaN or Inf, a loss exploded, or a metric with a chance level (`chance`) back at chance
  once training has started;
- best-by-validation: the model state at the evaluation with the lowest `select` value;
- checkpoints (`training.checkpoint`) at every evaluation or every `checkpoint_every` steps, resumed
  bitwise: the run's own state, the loop's sums and history, the global random state;
- wall time summed over every resumed part (a resumed run says so once on stderr, "resumed from step N", and its
  earlier parts' time counts into its run entry's, `run_unit.note_resumed`), a progress bar, and an optional time box
  (`time_limit_s`, `max_evals`) that stops after an evaluation and reports `complete = False`;
- the command's time box (`timebox`, `gradalign run --time-limit`) when the caller gives neither: the run does
  not begin once the box has closed, and a checkpointed run stops at the evaluation or checkpoint where
  another window would overrun the box, with its checkpoint written, raising `TimeBoxSpent` (the same command
  resumes it). A run without a checkpoint is not stopped midway: its work would be lost.
- between evaluations, a run whose state holds everything a step needs (`resumes_between_evaluations = True`: the
  LGA benchmark's, the meta-gradient runs) is stopped at the first step past its time limit, checkpointed there,
  so a first evaluation far away (Figure 5's, 40 s in) cannot overrun the box; a run not stopped is unchanged.
Nothing here knows a method: methods are step functions (nanoGPT-plain, no hooks).
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import torch

from gradalign.training import timebox
from gradalign.store.run_unit import note_device, note_resumed
from gradalign.methods.divergence import ChanceLevel, raise_if_at_chance, raise_if_exploded, raise_if_not_finite
from gradalign.progress import progress
from gradalign.training.checkpoint import load_checkpoint, save_checkpoint, set_aside


class Run(Protocol):
    def step(self, t: int) -> dict[str, torch.Tensor]: ...
    def evaluate(
        self, t: int, sums: dict[str, float], count: int, last: dict[str, torch.Tensor]
    ) -> dict[str, float]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class LoopResult:
    history: dict[str, list] = field(default_factory=dict)  # per evaluation: step, the evaluate values
    best: dict = field(default_factory=dict)  # {"step", "value", "state"} when `select` is given
    steps_done: int = 0
    train_seconds: float = 0.0  # wall time over every resumed part (steps, evaluations, checkpoints)
    complete: bool = True


def every(n: int, steps: int) -> Callable[[int], bool]:
    """Evaluate after every n-th step and after the last."""
    return lambda t: t % n == 0 or t == steps


def train(
    run: Run,
    steps: int,
    *,
    eval_at: Callable[[int], bool],
    name: str,
    checkpoint: Path | None = None,
    run_fingerprint: str = "",
    checkpoint_every: int = 0,
    select: str | None = None,
    model: torch.nn.Module | None = None,
    time_limit_s: float | None = None,
    max_evals: int | None = None,
    map_location="cpu",
    chance: tuple[ChanceLevel, ...] = (),
) -> LoopResult:
    """Run steps 1..`steps` of `run` (1-based), resuming from `checkpoint` when it holds this run.

    `chance`: evaluated metrics with a chance level; one back at chance once training started is a divergence.
    """
    boxed = time_limit_s is None and max_evals is None and timebox.seconds_left() is not None
    if boxed:
        timebox.raise_if_spent(f"{name} could begin")
        if checkpoint is not None:
            time_limit_s = timebox.seconds_left()
    out, sums, count, tick = LoopResult(), {}, 0, time.perf_counter()
    deadline = _step_deadline(run, checkpoint, time_limit_s, tick)
    start, parts = 0, 0  # parts: the sittings before this one
    if select is not None:
        out.best = {"step": 0, "value": math.inf, "state": copy.deepcopy(model.state_dict())}
    saved = load_checkpoint(checkpoint, run_fingerprint, map_location)
    if saved is not None and not _restored(run, saved["run"], checkpoint):
        saved = None
    if saved is not None:
        loop = saved["loop"]
        out.history, out.best, start, out.train_seconds = loop["history"], loop["best"], loop["step"], loop["seconds"]
        sums, count, parts = loop["sums"], loop["count"], loop.get("parts", 1)
        _restore_rng(loop)
        _say_resumed(name, start, steps, len(out.history.get("step", [])), out.train_seconds, parts)
    evals_this_call, windows, begun = 0, 0, time.perf_counter()
    with progress(None, desc=name, total=steps - start) as bar:
        for t in range(start + 1, steps + 1):
            last = run.step(t)
            if t == start + 1:  # where this run's tensors live: the hardware of its run entry (`run_unit`)
                _note_devices(model, last)
            for key, value in last.items():
                sums[key] = sums[key] + value.detach() if key in sums else value.detach().clone()
            count += 1
            bar.update(1)
            evaluated = eval_at(t)
            if evaluated:
                raise_if_not_finite(name, t, {**last, **{f"mean {k}": v for k, v in sums.items()}})
                values = run.evaluate(t, {k: float(v) for k, v in sums.items()}, count, last)
                _raise_if_diverged(name, t, values, out.history, chance)
                sums, count = {}, 0
                out.history.setdefault("step", []).append(t)
                for key, value in values.items():
                    out.history.setdefault(key, []).append(value)
                if select is not None and values[select] < out.best["value"]:
                    out.best = {"step": t, "value": values[select], "state": copy.deepcopy(model.state_dict())}
                bar.set_postfix(**{k: f"{v:.3g}" for k, v in values.items() if isinstance(v, float)})
                evals_this_call += 1
            due = (t % checkpoint_every == 0) if checkpoint_every else evaluated
            windows += due
            stop = t < steps and (
                (evaluated and max_evals is not None and evals_this_call >= max_evals)
                or (due and _time_is_up(windows, time.perf_counter() - begun, time_limit_s))
                or (deadline is not None and time.perf_counter() > deadline)
            )
            if checkpoint is not None and (due or stop) and t < steps:
                now = time.perf_counter()
                save_checkpoint(
                    checkpoint,
                    run_fingerprint,
                    {
                        "run": run.state_dict(),
                        "loop": {
                            "history": out.history,
                            "best": out.best,
                            "step": t,
                            "sums": sums,
                            "count": count,
                            "seconds": out.train_seconds + now - tick,
                            "parts": parts + 1,
                            "rng": torch.get_rng_state(),
                            "cuda_rng": _cuda_rng(),
                        },
                    },
                )
            if stop:
                out.complete = False
                out.steps_done = t
                break
        else:
            out.steps_done = steps
    out.train_seconds += time.perf_counter() - tick
    if boxed and not out.complete:
        raise timebox.TimeBoxSpent(
            f"time box: {name} stopped after step {out.steps_done} of {steps}, checkpointed; "
            "run the same command again to resume"
        )
    return out


def _note_devices(model: torch.nn.Module | None, last: dict) -> None:
    """The devices of the run's parameters (when the loop has its model) and of its first step's diagnostics."""
    first = next(iter(model.parameters()), None) if model is not None else None
    for tensor in (first, *last.values()):
        if isinstance(tensor, torch.Tensor):
            note_device(tensor.device)


def _step_deadline(run: Run, checkpoint: Path | None, time_limit_s: float | None, began: float) -> float | None:
    """When the loop stops the run at the first step past its time limit (checkpointed there, between evaluations):
    only a checkpointed run whose state resumes from any step (`resumes_between_evaluations`); None otherwise."""
    if time_limit_s is None or checkpoint is None or not getattr(run, "resumes_between_evaluations", False):
        return None
    return began + time_limit_s


def _say_resumed(name: str, step: int, steps: int, evaluations: int, seconds: float, parts: int) -> None:
    """Once per resumed run: where it goes on from (stderr, beside the progress bar); its earlier parts' training
    time counts into the wall time of the run entry being computed (`run_unit.note_resumed`)."""
    print(
        f"gradalign: {name} resumed from step {step} of {steps} ({evaluations} evaluation"
        f"{'s' if evaluations != 1 else ''} done, {seconds:.0f} s of training before)",
        file=sys.stderr,
        flush=True,
    )
    note_resumed(seconds, parts)


def _time_is_up(windows: int, elapsed: float, time_limit_s: float | None) -> bool:
    """Another window (from one evaluation or checkpoint to the next) would overrun the time box."""
    return time_limit_s is not None and windows > 0 and elapsed * (windows + 1) / windows > time_limit_s


def _raise_if_diverged(
    name: str, t: int, values: dict, history: dict[str, list], chance: tuple[ChanceLevel, ...]
) -> None:
    """An evaluated value NaN or Inf, a loss exploded, or a metric back at chance once training started."""
    raise_if_exploded(name, t, values)
    for level in chance:
        if level.name in values:
            raise_if_at_chance(name, t, level, values[level.name], history.get(level.name, []))


def _cuda_rng() -> list[torch.Tensor] | None:
    """Every CUDA device's random state, where CUDA is in use (dropout and noise drawn there)."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _restored(run: Run, state: dict, checkpoint: Path) -> bool:
    """Load a checkpoint's run state; False, with the run as it was and the checkpoint set aside, where the run
    cannot take it: a checkpoint written on another device (a GPU window's carried run resumed on a CPU: torch
    takes a CUDA generator's 16-byte state for a CPU one only with a RuntimeError)."""
    fresh = copy.deepcopy(run.state_dict())
    try:
        run.load_state_dict(state)
    except RuntimeError as err:
        run.load_state_dict(fresh)
        why = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        set_aside(checkpoint, f"cannot be restored on this machine ({why})", "unrestorable")
        return False
    return True


def _restore_rng(loop: dict) -> None:
    """The random states a checkpoint saved. They load to the checkpoint's `map_location` (the GPU, for a run there),
    and torch takes them back only as CPU byte tensors: the first GPU window failed every resume on this."""
    torch.set_rng_state(loop["rng"].cpu())
    if loop.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in loop["cuda_rng"]])
