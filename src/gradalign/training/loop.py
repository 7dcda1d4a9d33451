"""The one training loop. A run is any object with `step(t) -> diagnostics`, `evaluate(t, sums, count, last) -> values`,
`state_dict()` and `load_state_dict(state)`; the loop owns everything else:

- the cadence: `evaluate` after step t when `eval_at(t)` (default: every `eval_every` steps and the last);
- the sums of the step diagnostics since the last evaluation, kept on the device (no host sync per step);
- the divergence stop at each evaluation, naming the step and the quantity;
- best-by-validation: the model state at the evaluation with the lowest `select` value;
- checkpoints (`training.checkpoint`) at every evaluation or every `checkpoint_every` steps, resumed
  bitwise: the run's own state, the loop's sums and history, the global random state;
- wall time summed over every resumed part, a progress bar, and an optional time box (`time_limit_s`,
  `max_evals`) that stops after an evaluation and reports `complete = False`.
Nothing here knows a method: methods are step functions (nanoGPT-plain, no hooks).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import torch

from gradalign.progress import progress
from gradalign.training.checkpoint import load_checkpoint, save_checkpoint
from gradalign.divergence import raise_if_not_finite


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
) -> LoopResult:
    """Run steps 1..`steps` of `run` (1-based), resuming from `checkpoint` when it holds this run."""
    out, sums, count, tick = LoopResult(), {}, 0, time.perf_counter()
    start = 0
    if select is not None:
        out.best = {"step": 0, "value": math.inf, "state": copy.deepcopy(model.state_dict())}
    saved = load_checkpoint(checkpoint, run_fingerprint, map_location)
    if saved is not None:
        run.load_state_dict(saved["run"])
        loop = saved["loop"]
        out.history, out.best, start, out.train_seconds = loop["history"], loop["best"], loop["step"], loop["seconds"]
        sums, count = loop["sums"], loop["count"]
        torch.set_rng_state(loop["rng"])
    evals_this_call, begun = 0, time.perf_counter()
    with progress(None, desc=name, total=steps - start) as bar:
        for t in range(start + 1, steps + 1):
            last = run.step(t)
            for key, value in last.items():
                sums[key] = sums[key] + value.detach() if key in sums else value.detach().clone()
            count += 1
            bar.update(1)
            evaluated = eval_at(t)
            if evaluated:
                raise_if_not_finite(name, t, {**last, **{f"mean {k}": v for k, v in sums.items()}})
                values = run.evaluate(t, {k: float(v) for k, v in sums.items()}, count, last)
                sums, count = {}, 0
                out.history.setdefault("step", []).append(t)
                for key, value in values.items():
                    out.history.setdefault(key, []).append(value)
                if select is not None and values[select] < out.best["value"]:
                    out.best = {"step": t, "value": values[select], "state": copy.deepcopy(model.state_dict())}
                bar.set_postfix(**{k: f"{v:.3g}" for k, v in values.items() if isinstance(v, float)})
                evals_this_call += 1
            due = (t % checkpoint_every == 0) if checkpoint_every else evaluated
            if checkpoint is not None and due and t < steps:
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
                            "rng": torch.get_rng_state(),
                        },
                    },
                )
            if (
                evaluated
                and t < steps
                and _time_is_up(evals_this_call, time.perf_counter() - begun, time_limit_s, max_evals)
            ):
                out.complete = False
                out.steps_done = t
                break
        else:
            out.steps_done = steps
    out.train_seconds += time.perf_counter() - tick
    return out


def _time_is_up(evals: int, elapsed: float, time_limit_s: float | None, max_evals: int | None) -> bool:
    """Stop when `max_evals` evaluations are done, or when another window would overrun the time box."""
    if max_evals is not None and evals >= max_evals:
        return True
    return time_limit_s is not None and elapsed * (evals + 1) / evals > time_limit_s
