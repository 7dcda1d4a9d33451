"""LGA part, §3.2: the shells trials' LGA at a further ε_norm (`EPS_ARMS`), a run of its own beside each trial."""

from __future__ import annotations

import functools
from dataclasses import replace

from gradalign.experiments.lga.shells_config import STUDY_VERSION, ShellsStudyConfig, _data, data_spec
from gradalign.store.run_unit import Unit

EPS_ARMS = (1e-6,)
"""The further ε_norm reading of every preset (our choice, issue 47): at the trials' 1e-3, ε_norm exceeds
sqrt(EMA(v⁴)) for about 99 % of the parameters by the end of training, so Eq. 2's normalisation is effectively off;
at 1e-6 it lies below sqrt(EMA(v⁴)) for most of them (measured on trial 0 before the arm was trained: the
`eps_dominates` of each arm), so the normalisation acts, as the paper's premise that ε_norm "does not have a
significant effect" assumes."""


def arm_name(eps_norm: float) -> str:
    """The name of LGA's arm at a further ε_norm, as the record's curves and metrics use it: `lga_eps=1e-06`."""
    return f"lga_eps={eps_norm:g}"


def eps_arm_unit(cfg: ShellsStudyConfig, k: int, eps_norm: float) -> Unit:
    """LGA alone on trial k's data set (seed + k) with the trials' settings but `eps_norm`, as a run-cache unit of
    its own kind (`lga.shells-eps`): the trials' units and keys are untouched, and the arm is compared with the same
    supervised arms."""
    seed = cfg.seed + k
    trial = replace(cfg.trial, eps_norm=eps_norm)
    spec = {**data_spec(cfg, seed), "trial": trial.to_dict(), "arm": "lga"}
    train = functools.partial(_train_lga, cfg, seed, trial)
    return Unit(f"trial {k} (seed {seed}), LGA at eps_norm {eps_norm:g}", "lga.shells-eps", spec, STUDY_VERSION, train)


def _train_lga(cfg: ShellsStudyConfig, seed: int, trial, _checkpoint) -> dict:
    from gradalign.training.shells import shells_trial

    return shells_trial(_data(cfg, seed), "lga", trial, seed)
