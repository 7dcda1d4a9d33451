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


TERM_MARGIN = 10.0
"""Points by which layer-wise training must lie above SGR at the deepest VGG for `reading` to name SGR's term as what
held SGR's run back (our margin; with one seed this is a sentence on the page, not a check of the record)."""


def reading(record: dict) -> str:
    """Table 7's two halves at a stored `sgr.tab7nobn` record's reading, in words with its numbers. Where SGR stays
    below the record's mark while layer-wise training, which is SGR at λ = 0 (the same modules, heads and optimisers),
    lies at least `TERM_MARGIN` points above it, the sentence names the leading alternative for SGR's half: its λ,
    which `sgr.lam7` chose on the BN VGGs at 28 pixels, not on this network."""
    m, cfg, checks = record["metrics"], record["config"], record["checks"]
    arms, depth = m["deepest"]["arms"], m["deepest"]["depth"]
    collapse, trains = checks["global_bp_collapses_without_bn"], checks["sgr_trains_deepest_without_bn"]
    seeds = min(a["n"] for a in arms.values())
    bp, lw, sgr = (arms[a]["mean"] for a in ("global_bp", "layerwise", "sgr"))
    text = (
        f"At VGG-{depth} without BN on {cfg.get('pad_to') or 28}-pixel images ({seeds} seed{'s' * (seeds > 1)}, "
        f"validation accuracy): global BP {bp:.1f} %, layer-wise training {lw:.1f} %, SGR (λ = {cfg['lam']:g}, "
        f"{cfg['reduction']} reduction) {sgr:.1f} %; chance {m['chance']:g} %, the record's mark "
        f"{collapse['value']['halfway_to_chance']:.1f} %. "
        + (
            "Global BP stays below the mark: it collapses, the first half of Table 7's claim. "
            if collapse["passed"]
            else "Global BP lies above the mark: it does not collapse, against the first half of Table 7's claim. "
        )
        + (
            "SGR reaches the mark: the second half holds here."
            if trains["passed"]
            else "SGR stays below it: against the second half."
        )
    )
    if not trains["passed"] and lw - sgr >= TERM_MARGIN:
        text += (
            f" Layer-wise training is SGR at λ = 0 and reaches {lw:.1f} %: the one difference between the two runs, "
            f"SGR's term at λ = {cfg['lam']:g}, held this seed of SGR at {sgr:.1f} %. The leading alternative for "
            "SGR's half is therefore its λ, which `sgr.lam7` chose on VGG-12 and VGG-37 with BatchNorm at 28 pixels, "
            "not on this network."
        )
    if not record.get("preconditions", {}).get("enough_seeds", {}).get("passed", False):
        text += " With fewer than 3 seeds in an arm the record decides neither half: it is inconclusive."
    return text
