"""An experiment's units: the independent sub-runs it stores in the run cache, each computable on its own.

A unit is exactly the arguments of `runcache.cached_run` (kind, spec, version, compute) and a label for
people. Running it anywhere that sees the same run cache stores the entry the experiment would have stored
itself, so `gradalign sweep` can compute an experiment's units as separate jobs and `gradalign run` then
assembles the record from the cache without training. The experiment modules build their units
(`shells.trial_unit`, `ssl_runs.run_unit`) and read them through `Unit.run`, so each spec is written once:
a sweep stores exactly what the experiment reads.

`Unit` (whose `compute` must pickle: see there) lives in `gradalign.store.run_unit`, beside the run cache, so that
the experiment modules that build units and this registry, which reaches them only when it is called, import
in one direction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Callable

from gradalign.config import Config
from gradalign.errors import ConfigError
from gradalign.store.run_unit import Unit


def _shells_trials(cfg: Config) -> list[Unit]:
    """The trials, then LGA at each further ε_norm on their data sets (`shells.study_units`)."""
    from gradalign.experiments.lga.shells import study_units

    return study_units(cfg)


def _shells_trials_and_tuning(cfg: Config) -> list[Unit]:
    """Figure 4: the trials, then the tuning runs whose table it shows (`shells_tuning`)."""
    from gradalign.experiments.lga.shells_tuning import tuning_candidates, tuning_unit

    tuning = [
        tuning_unit(cfg, method, settings, j)
        for method, settings in tuning_candidates(cfg).values()
        for j in range(cfg.tuning_trials)
    ]
    return _shells_trials(cfg) + tuning


def _benchmark_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.lga.ssl_runs import benchmark_units

    return benchmark_units(cfg)


def _table_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.lga.ssl_runs import benchmark_units, column_configs

    return [unit for _, sub in column_configs(cfg) for unit in benchmark_units(sub)]


def _semimeta_runs(element_id: str) -> Callable[[Config], list[Unit]]:
    def units(cfg: Config) -> list[Unit]:
        from gradalign.experiments.metagrad.ssl_runs import BASELINE_AND_METHOD, ROWS, units

        return units(cfg, ROWS.get(element_id, BASELINE_AND_METHOD))

    return units


def _local_runs(jobs_of: str) -> Callable[[Config], list[Unit]]:
    def units(cfg: Config) -> list[Unit]:
        from gradalign.experiments.sgr import bp_free, local_bp
        from gradalign.experiments.sgr.local_runs import group_units

        module = local_bp if hasattr(local_bp, jobs_of) else bp_free
        return group_units(cfg, getattr(module, jobs_of)(cfg))

    return units


def _table4_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.bp_free import table4_units

    return table4_units(cfg)


def _figure_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.bp_free import figure_units

    return figure_units(cfg)


def _table4_conv_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.bp_free_conv import units

    return units(cfg)


def _no_bn_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.vgg_without_bn import units

    return units(cfg)


def _pooled_head_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.pooled_head import units

    return units(cfg)


def _lambda_study_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.sgr.lambda_study import units

    return units(cfg)


def _tuning_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.lga.ssl_tuning import tune_units

    return tune_units(cfg)


def _siamese_runs(cfg: Config) -> list[Unit]:
    from gradalign.experiments.isoloss.deep_siamese import siamese_units

    return siamese_units(cfg)


UNITS: dict[str, Callable[[Config], list[Unit]]] = {
    "lga.fig3": _shells_trials,
    "lga.fig4": _shells_trials_and_tuning,
    "lga.fig5": _benchmark_runs,
    "lga.fig6": _benchmark_runs,
    "lga.fig7": _benchmark_runs,
    "lga.tab1": _table_runs,
    "lga.tune": _tuning_runs,
    **{
        element_id: _semimeta_runs(element_id)
        for element_id in ("metagrad.tab4", "metagrad.tab1", "metagrad.fig2", "metagrad.fig3", "metagrad.tab2")
    },
    "sgr.tab3": _local_runs("table3_jobs"),
    "sgr.tab6": _local_runs("table6_jobs"),
    "sgr.tab7": _local_runs("table7_jobs"),
    "sgr.tab4": _table4_runs,
    "sgr.tab4conv": _table4_conv_runs,
    "sgr.tab7nobn": _no_bn_runs,
    "sgr.poolhead": _pooled_head_runs,
    "sgr.lamfull": _lambda_study_runs,
    "isoloss.tab1": _siamese_runs,
    **dict.fromkeys(("sgr.fig2", "sgr.fig3", "sgr.fig4"), _figure_runs),
}
"""Element id -> its units at a resolved config, for the experiments that have independent units."""


def units_of(element_id: str, cfg: Config) -> list[Unit]:
    """The units of `element_id` at its resolved config `cfg`, in the order the experiment reads them, each once
    (two parts of an experiment that read the same run list it once). A ConfigError when the id is unknown or
    the experiment has no units (it computes in one piece: `gradalign run`)."""
    from gradalign.experiments import get

    get(element_id)  # an unknown or unbuilt id: its own one-line error
    if element_id not in UNITS:
        raise ConfigError(
            f"{element_id} has no units to sweep (it computes in one piece: gradalign run {element_id}); "
            f"experiments with units: {', '.join(UNITS)}"
        )
    units, keys = [], set()
    for unit in UNITS[element_id](cfg):
        if (unit.kind, unit.key) not in keys:
            keys.add((unit.kind, unit.key))
            units.append(unit)
    labels = Counter(unit.label for unit in units)  # a report names units by label: make each say which
    return [replace(unit, label=f"{unit.label} [{unit.key}]") if labels[unit.label] > 1 else unit for unit in units]
