"""Registered experiments, keyed by the element ids of gradalign.elements.

An experiment is a function `run(config, device) -> outcome` plus its config class, its presets and a
version number bumped by hand whenever the meaning of its output changes (old records then stop
matching). The outcome is a dict with `metrics`, `curves`, `checks` and `verdict` (see `outcome`). How a claim
is decided lives here too: the verdict vocabulary (`verdict`), the rules (`rules`, `budget_rule`, `student_t`).

May import `benchmarks/`, `training/` and everything below them; `records/` and above import it.
"""

from __future__ import annotations

from gradalign.errors import ConfigError
from gradalign.experiments.base import Experiment, check, outcome  # noqa: F401
from gradalign.elements import element


def _collect() -> dict[str, Experiment]:
    from gradalign.experiments import isoloss, lga, metagrad, sgr

    experiments = {}
    for exp in lga.EXPERIMENTS + metagrad.EXPERIMENTS + isoloss.EXPERIMENTS + sgr.EXPERIMENTS:
        element(exp.id)  # every experiment belongs to an element of gradalign.elements
        experiments[exp.id] = exp
    return experiments


EXPERIMENTS: dict[str, Experiment] = _collect()


def get(element_id: str) -> Experiment:
    element(element_id)
    if element_id not in EXPERIMENTS:
        raise ConfigError(f"element {element_id!r} is not built yet; built: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[element_id]
