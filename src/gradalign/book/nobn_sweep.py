"""Table 7 without BN before its record (`sgr.tab7nobn`, page sgr/02): global BP's rate sweep read from the committed
runs, at a reading given by overrides (`pad_to=32`: CIFAR's geometry), a cell per depth and rate.

The record also trains SGR and layer-wise at the deepest VGG, at the rate this sweep chooses; until those runs are
in, the page shows the sweep alone, labelled interim. Every cell is a committed run's validation accuracy (read,
never trained), or says that the run is not in yet.
"""

from __future__ import annotations


def committed_sweep(overrides: dict, preset: str = "cpu") -> tuple[dict[str, dict[str, str]], int, int]:
    """({"VGG-d": {"lr x": accuracy (%) or "not trained yet"}}, runs committed, runs in the sweep) of the study's
    global-BP sweep at `overrides`, from the committed runs only."""
    from dataclasses import replace

    from gradalign.experiments import get
    from gradalign.experiments.sgr.local_runs import group_units
    from gradalign.experiments.sgr.vgg_without_bn import sweep_jobs
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    cfg = replace(get("sgr.tab7nobn").resolve(preset, overrides), seeds=1)
    folder, table, done = results_root() / "runs", {}, 0
    for lr in cfg.lrs:
        for (network, *_), unit in zip(sweep_jobs(cfg), group_units(cfg.at_rate(lr), sweep_jobs(cfg))):
            entry = read_entry(folder, unit)
            done += entry is not None
            cell = "not trained yet" if entry is None else f"{entry['value']['final_test_acc']:.1f}"
            table.setdefault(f"VGG-{network[3:]}", {})[f"lr {lr:g}"] = cell
    return table, done, len(cfg.lrs) * len(cfg.depths)
