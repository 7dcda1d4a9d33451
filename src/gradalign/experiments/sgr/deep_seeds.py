"""SGR part, the deepest VGG's seeds: which of SGR's runs at VGG-57 leave chance, and when (our study; notebook sgr/02).

At Table 7's `cpu` scale with BatchNorm, SGR's seed 2 at VGG-57 stayed near chance through its 30 epochs, where seeds
0 and 1 left it after a few epochs; without BatchNorm (`sgr.tab7nobn`) SGR's one run there never left it. Three seeds
cannot say how often a run stays stuck, so each reading is to be trained at `SEEDS` seeds (our choice; the GPU backlog
holds the runs: `BACKLOG_ITEMS`), and this module reports, from the committed runs only (it never trains), for each
seed the first epoch at which its accuracy left chance, or that it never did.

"Left chance" (our threshold): the run's accuracy came at least `LEFT` of the way from chance to perfect, the mark
at which the divergence rule counts a run as started (`methods.divergence.STARTED_LOW`). The BN reading scores test
images (Table 7's runs); the no-BN reading scores held-out training images (that study's runs). A no-BN seed is read
at the highest rate of the study's grid with a committed run: its runs at higher rates exploded and were not stored
(`vgg_without_bn.deepest_arm`).
"""

from __future__ import annotations

from dataclasses import replace

from gradalign.methods.divergence import STARTED_LOW

SEEDS = 5
LEFT = STARTED_LOW  # the fraction of the way from chance to perfect that counts as having left chance (ours)
DEPTH = 57
BACKLOG_ITEMS: tuple[tuple[str, str, dict], ...] = (
    ("sgr.tab7", "cpu", {"seeds": SEEDS, "depths": (12, DEPTH)}),  # Table 7 needs two depths; VGG-12's runs are cheap
    ("sgr.tab7nobn", "cpu", {"seeds": SEEDS}),
)
"""The runs of both readings at `SEEDS` seeds, as GPU backlog items (`backlog.BACKLOG`): Table 7's three arms at
VGG-12 and VGG-57 with BN, and the no-BN study's deepest arms (its sweep and init check are committed)."""


def left_chance_at(accuracies: list[float], epochs: list[int], chance: float) -> int | None:
    """The first epoch at which `accuracies` (in %) came `LEFT` of the way from `chance` to 100, else None."""
    if len(accuracies) != len(epochs):
        raise ValueError(f"{len(accuracies)} accuracies for {len(epochs)} epochs: one per evaluation")
    if not 0 <= chance < 100:
        raise ValueError(f"chance must be in [0, 100), got {chance}")
    mark = chance + LEFT * (100.0 - chance)
    return next((e for a, e in zip(accuracies, epochs) if a >= mark), None)


def _seed_row(entry: dict | None, chance: float, reading: str, seed: int, rate: float | None) -> dict:
    row = {"reading": reading, "seed": seed, "lr": rate}
    if entry is None:
        return row | {"status": "not trained"}
    value = entry["value"]
    history = value["history"]
    at = left_chance_at(history["test_acc"], history["epoch"], chance)
    epochs = history["epoch"][-1] if history["epoch"] else 0
    status = f"left chance at epoch {at}" if at is not None else f"never left chance in {epochs} epochs"
    return row | {"final_acc": round(value["final_test_acc"], 2), "left_at": at, "epochs": epochs, "status": status}


def _committed(unit) -> dict | None:
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    return read_entry(results_root() / "runs", unit)


def bn_rows(cfg, seeds: int = SEEDS) -> list[dict]:
    """SGR at the deepest VGG with BN: Table 7's config `cfg` (its run keys), seeds `cfg.seed`..+`seeds`."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.training.local import local_unit, vgg_name

    d, data = cfg.depths[-1], cfg.datasets[0]
    rows = []
    for seed in range(cfg.seed, cfg.seed + seeds):
        entry = _committed(local_unit(cfg.spec(vgg_name(d), "sgr", cfg.sgr_modules(d), data, seed)))
        rows.append(
            _seed_row(entry, image_set_info(data).chance_accuracy, "with BN (Table 7's runs)", seed, cfg.protocol.lr)
        )
    return rows


def no_bn_rows(cfg, seeds: int = SEEDS) -> list[dict]:
    """SGR at the deepest VGG without BN: the no-BN study's config `cfg`, each seed at the highest rate of its grid
    with a committed run (none: "not trained", at the grid's lowest rate)."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.training.local import local_unit, vgg_name

    d, data = cfg.depths[-1], cfg.datasets[0]
    rows = []
    for seed in range(cfg.seed, cfg.seed + seeds):
        found = None
        for lr in sorted(cfg.lrs, reverse=True):
            at_rate = replace(cfg, protocol=replace(cfg.protocol, lr=lr))
            entry = _committed(local_unit(at_rate.spec(vgg_name(d), "sgr", cfg.sgr_modules(d), data, seed)))
            if entry is not None:
                found = (entry, lr)
                break
        entry, lr = found or (None, min(cfg.lrs))
        rows.append(_seed_row(entry, image_set_info(data).chance_accuracy, "without BN (held-out images)", seed, lr))
    return rows


def summary(rows: list[dict]) -> str:
    """In words, per reading: how many trained seeds left chance, and when."""
    parts = []
    for reading in dict.fromkeys(r["reading"] for r in rows):
        mine = [r for r in rows if r["reading"] == reading]
        trained = [r for r in mine if "final_acc" in r]
        left = sorted(r["left_at"] for r in trained if r["left_at"] is not None)
        when = f" (at epochs {', '.join(map(str, left))})" if left else ""
        parts.append(
            f"{reading}: {len(left)} of {len(trained)} trained seeds left chance{when}; "
            f"{len(mine) - len(trained)} of {len(mine)} seeds not trained yet"
        )
    return "; ".join(parts) + "."


def seeds_view(preset: str = "cpu"):
    """The page's table (a data frame, one row per reading and seed) and its summary in words, from committed runs."""
    import pandas as pd

    from gradalign.experiments import get

    rows = bn_rows(get("sgr.tab7").resolve(preset, {})) + no_bn_rows(get("sgr.tab7nobn").resolve(preset, {}))
    frame = pd.DataFrame(
        [
            {
                "reading": r["reading"],
                "seed": r["seed"],
                "learning rate": f"{r['lr']:g}" if r["lr"] is not None else "–",
                "final accuracy (%)": f"{r['final_acc']:.2f}" if "final_acc" in r else "–",
                "left chance": r["status"],
            }
            for r in rows
        ]
    )
    return frame, summary(rows)
