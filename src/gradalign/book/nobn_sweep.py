"""Table 7 without BN before its record (`sgr.tab7nobn`, page sgr/02): global BP's rate sweep read from the committed
runs, at a reading given by overrides (`pad_to=32`: CIFAR's geometry), a cell per depth and rate.

The record also trains SGR and layer-wise at the deepest VGG, at the rate this sweep chooses; until those runs are
in, the page shows the sweep alone, labelled interim, and the record's own check of global BP's collapse on it.
Every cell is a committed run's validation accuracy (read, never trained), or says that the run is not in yet.
"""

from __future__ import annotations


def sweep_accuracies(overrides: dict, preset: str = "cpu") -> dict[int, dict[float, float | None]]:
    """{depth: {rate: validation accuracy (%) of the committed run, None where it is not committed}}."""
    from dataclasses import replace

    from gradalign.experiments import get
    from gradalign.experiments.sgr.local_runs import group_units
    from gradalign.experiments.sgr.vgg_without_bn import sweep_jobs
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    cfg = replace(get("sgr.tab7nobn").resolve(preset, overrides), seeds=1)
    folder, out = results_root() / "runs", {}
    for lr in cfg.lrs:
        for depth, unit in zip(cfg.depths, group_units(cfg.at_rate(lr), sweep_jobs(cfg))):
            entry = read_entry(folder, unit)
            out.setdefault(depth, {})[lr] = None if entry is None else entry["value"]["final_test_acc"]
    return out


def committed_sweep(overrides: dict, preset: str = "cpu") -> tuple[dict[str, dict[str, str]], int, int]:
    """({"VGG-d": {"lr x": accuracy (%) or "not trained yet"}}, runs committed, runs in the sweep) of the study's
    global-BP sweep at `overrides`, from the committed runs only."""
    accs = sweep_accuracies(overrides, preset)
    table = {
        f"VGG-{d}": {f"lr {lr:g}": "not trained yet" if v is None else f"{v:.1f}" for lr, v in by.items()}
        for d, by in accs.items()
    }
    values = [v for by in accs.values() for v in by.values()]
    return table, sum(v is not None for v in values), len(values)


def collapse_check(overrides: dict, preset: str = "cpu") -> dict | None:
    """The record's check that global BP collapses at the deepest VGG (`vgg_without_bn.no_bn_checks`: its best
    accuracy over the grid below halfway between its best at the shallowest depth and chance), from the committed
    sweep alone; None until every sweep run is committed. The record's SGR check needs runs the sweep does not hold."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.experiments import get
    from gradalign.experiments.sgr.vgg_without_bn import no_bn_checks

    accs = sweep_accuracies(overrides, preset)
    if any(v is None for by in accs.values() for v in by.values()):
        return None
    chance = image_set_info(get("sgr.tab7nobn").resolve(preset, overrides).datasets[0]).chance_accuracy
    return no_bn_checks(accs, chance, chance)["global_bp_collapses_without_bn"]
