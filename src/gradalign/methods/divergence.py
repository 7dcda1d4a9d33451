"""The divergence checks every run goes through; each error names the run, the step and the quantity.

A run has diverged when, at a step or evaluation:

- a quantity is NaN or Inf (`raise_if_not_finite`: one host read for the whole set);
- a loss exploded: a quantity whose name holds "loss" reached `EXPLODED` in absolute value
  (`raise_if_exploded`; a cross entropy of 1e6 means logits of that size, which no converging run reaches;
  the test loss of `lga.fig5 --set lga.lr=1e6` was 2.4e15);
- a metric with a chance level is back at chance once training has started (`ChanceLevel`,
  `raise_if_at_chance`): the metric is within `CHANCE_BAND` of the way from chance to perfect, after it had
  come at least `STARTED` of the way at an earlier evaluation (or, for a readout on features that beat chance
  before any training, such as a linear probe, at once). A short run that never left chance (the `smoke`
  presets) has not started, and is not stopped.

The training loop (`training.loop`) applies them at every evaluation (the chance check where the run names a
metric with a chance level); runs outside it call them on what they measure. The error is a `DivergenceError`,
one line, `"<run> diverged at step N: <quantity> = <value>; <hint>"`: the run is neither cached nor recorded and
the command ends, except where the run's divergence is its result (`training.local_divergence`: global BP's
"fail", and a local method's final run in SGR's Tables 3, 6 and 7, which skips the chance check and is stored at
chance on a NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from gradalign.errors import DivergenceError

EXPLODED = 1e6  # |loss| at or above this: exploded
STARTED = 0.5  # training has started once a metric came this fraction of the way from chance to perfect
# A run that came only this fraction of the way counts as diverged once at chance at two evaluations in a row: a
# BP-free SGR run (no augmentation, lr 0.1) reached 36.5 % and 51.7 % test accuracy, then sat at 10 % for 21 epochs
# and passed as finished; one evaluation is not enough there (an LGA reference run went 49.5 % error -> 84.3 % -> 45.8 %
# under its early, noisy BatchNorm statistics)
STARTED_LOW = 0.25
CHANCE_BAND = 0.1  # back at chance: within this fraction of the way from chance to perfect


def raise_if_not_finite(
    what: str, step: int, quantities: dict[str, torch.Tensor | None], hint: str = "lower the learning rate"
) -> None:
    """DivergenceError `"<what> diverged at step <step>: <name> = nan; <hint>"` if any value is NaN or Inf."""
    quantities = {name: v for name, v in quantities.items() if v is not None}
    if not quantities:
        return
    flags = torch.stack([torch.isfinite(v.detach()).all() for v in quantities.values()]).tolist()
    for (name, value), ok in zip(quantities.items(), flags):
        if not ok:
            shown = value.item() if value.numel() == 1 else "non-finite entries"
            raise DivergenceError(f"{what} diverged at step {step}: {name} = {shown}; {hint}")


def _numbers(value: Any) -> Iterable[float]:
    """The numbers in an evaluated value: a number, or a (nested) list of numbers and Nones."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, torch.Tensor):
        yield from value.detach().reshape(-1).double().tolist()
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item)


def raise_if_exploded(what: str, step: int, values: dict[str, Any], hint: str = "lower the learning rate") -> None:
    """DivergenceError when a value (a number or a list of numbers) is NaN or Inf, or when a quantity named
    `*loss*` reached `EXPLODED` in absolute value."""
    for name, value in values.items():
        for number in _numbers(value):
            if not math.isfinite(number):
                raise DivergenceError(f"{what} diverged at step {step}: {name} = {number}; {hint}")
            if "loss" in name.lower() and abs(number) >= EXPLODED:
                raise DivergenceError(
                    f"{what} diverged at step {step}: {name} = {number:.3g} (exploded: |{name}| >= {EXPLODED:g}); "
                    f"{hint}"
                )


@dataclass(frozen=True)
class ChanceLevel:
    """An evaluated metric whose chance level is known: `level` (what guessing scores) and `perfect` (what a
    perfect model scores), in the metric's units: accuracy in % (10, 100 for ten classes), error in % (90, 0),
    or a fraction. `started`: the metric beats chance before any training (a linear probe on features),
    so being at chance is a divergence from the first evaluation on."""

    name: str
    level: float
    perfect: float
    started: bool = False

    def progress(self, value: float) -> float:
        """How far `value` is from chance towards perfect: 0 at chance, 1 at perfect."""
        return (value - self.level) / (self.perfect - self.level)

    def has_started(self, history: Iterable[float], share: float = STARTED) -> bool:
        return self.started or any(v is not None and self.progress(v) >= share for v in history)

    def at_chance(self, value: float) -> bool:
        return self.progress(value) <= CHANCE_BAND


def accuracy_chance(name: str, classes: int, percent: bool = True, started: bool = False) -> ChanceLevel:
    """The chance level of an accuracy over `classes` balanced classes (in % unless `percent` is False)."""
    scale = 100.0 if percent else 1.0
    return ChanceLevel(name, scale / classes, scale, started)


def error_chance(name: str, classes: int, started: bool = False) -> ChanceLevel:
    """The chance level of an error rate in % over `classes` balanced classes."""
    return ChanceLevel(name, 100.0 - 100.0 / classes, 0.0, started)


def raise_if_at_chance(
    what: str,
    step: int,
    chance: ChanceLevel,
    value: float,
    history: Iterable[float] = (),
    hint: str = "lower the learning rate",
) -> None:
    """DivergenceError when `value` of `chance.name` is back at chance after training started (`history`:
    the metric's earlier values in this run): at once after it came `STARTED` of the way from chance to perfect, or
    at two evaluations in a row after it came `STARTED_LOW` of the way."""
    history = [v for v in history if v is not None]
    if value is None or not chance.at_chance(value):
        return
    twice = bool(history) and chance.at_chance(history[-1]) and chance.has_started(history[:-1], STARTED_LOW)
    if not (chance.has_started(history) or twice):
        return
    before = (
        "it beats chance before any training"
        if chance.started
        else f"it had reached {max(history, key=chance.progress):.4g}"
    )
    raise DivergenceError(
        f"{what} diverged at step {step}: {chance.name} = {value:.4g}, back at chance ({chance.level:.4g}; "
        f"{before}); {hint}"
    )
