"""Upper bounds of sizes: every integer setting of every settings object, checked before any compute.

A size that cannot run (steps=10**12, width=10**6, a seed numpy refuses) or that asks for more images than
the data set holds (n_test=100000 of a 10,000-image test split) is a one-line ConfigError when the settings
object is built (`config.Settings` calls `check_sizes` before its own range rules), never capped later. The
bounds go by field name (`seed`, `steps`, `epochs`, `seeds`, `width`, ...; any other integer has MAX_COUNT),
and sample counts (`n_train`, `n_test`, `train_subset`, `n_pool`, `n_labeled`, `n_unlabeled`,
`n_validation`) by the data set a settings object names in `dataset` or `datasets` (DATA_SPLITS).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from gradalign.errors import ConfigError

DATA_SPLITS: dict[str, dict[str, int]] = {
    "fashion_mnist": {"train": 60_000, "test": 10_000},
    "cifar10": {"train": 50_000, "test": 10_000},
    "cifar100": {"train": 50_000, "test": 10_000},
    "svhn": {"train": 73_257, "test": 26_032, "extra": 531_131},
    "stl10": {"train": 5_000, "test": 8_000, "unlabeled": 100_000},
}
"""Images in each split of every image set a config may name: the upper bound of its sample counts."""

MAX_SEED = 2**31 - 1  # numpy takes seeds below 2**32; experiments add offsets (seed + 1, seed + seeds, ...)
MAX_COUNT = 10_000_000  # any other integer setting (samples, draws, points, batch sizes, ...)
MAX_STEPS = 1_000_000_000  # 2000x the longest protocol of the four papers (500,000 steps)
MAX_EPOCHS = 10_000
MAX_REPEATS = 1_000  # seeds, trials, repeats: runs of the same computation
MAX_DEPTH = 1_000  # layers or modules: 17x the deepest network of the four papers (VGG with 57 layers)
MAX_WIDTH = 16_384  # a layer of this many units holds 16384^2 = 2.7e8 weights (1 GiB in float32)
MAX_ELEMENTS = MAX_WIDTH**2  # a list of sizes ((m, n), ...): the m x n allocated by one item
MAX_WIDTH_FACTOR = 16.0  # a network's channels x this: 256x the weights (and activations ~16x) of the paper's


@functools.lru_cache(maxsize=None)  # by name only: every settings object asks it for every field
def _size_rule(name: str) -> tuple[float, str] | None:
    """The upper bound of an integer (or width-factor) field called `name`, and why; None: no bound by name."""
    if name == "seed" or name.endswith("_seed"):
        return MAX_SEED, "seeds above 2**31 - 1 do not fit numpy's and torch's generators with their offsets"
    if name in ("steps", "horizons", "iterations") or name.endswith(("_steps", "_iters", "_iterations")):
        return MAX_STEPS, f"{MAX_STEPS:,} steps is 2000x the longest protocol of the four papers"
    if name == "epochs" or name.endswith("_epochs"):
        return MAX_EPOCHS, f"{MAX_EPOCHS:,} epochs is 12x the longest protocol of the four papers"
    if name in ("seeds", "trials", "repeats", "inits", "problems") or name.endswith("_repeats"):
        return MAX_REPEATS, "each one is a whole run"
    if name in ("depth", "depths", "modules", "splits") or name.endswith(("_depth", "_splits")):
        return MAX_DEPTH, "each one is a layer or a module of the network"
    widths = ("width", "widths", "hidden", "dims", "features", "in_features", "channels", "d", "d0", "N", "M")
    if name in widths or name.endswith(("_hidden", "_dim", "_dims", "_width")):
        return MAX_WIDTH, "the memory of a layer grows as its width squared"
    return None


def check_sizes(obj: Any) -> None:
    """Every integer setting below its upper bound, and every sample count within the data set it draws from.

    Runs before `validate` and before any compute: a size that cannot run (steps=10**12, width=10**6, a seed
    numpy refuses, more test images than the test split holds) is a one-line ConfigError, never capped."""
    _check_sample_counts(obj)
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        rule = _size_rule(field.name)
        if isinstance(value, float) and field.name == "width":
            require(obj, field.name, value <= MAX_WIDTH_FACTOR, _too_big(MAX_WIDTH_FACTOR, "parameters grow as width²"))
            continue
        items = value if isinstance(value, tuple) else (value,)
        ints = [v for v in _flat_items(items) if isinstance(v, int) and not isinstance(v, bool)]
        limit, why = rule or (MAX_COUNT, "larger sizes do not fit in memory or time")
        if ints and max(ints) > limit:
            require(obj, field.name, False, _too_big(limit, why))
        shapes = [item for item in items if isinstance(item, tuple) and item and _all_ints(item)]
        if shapes and max(math.prod(s) for s in shapes) > MAX_ELEMENTS:
            require(obj, field.name, False, _too_big(MAX_ELEMENTS, "elements per item: their product is allocated"))


def _all_ints(item: tuple) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in item)


def _too_big(limit: float, why: str) -> str:
    shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
    return f"must be <= {shown} ({why})"


def _flat_items(items: tuple) -> list:
    out = []
    for item in items:
        out.extend(_flat_items(item) if isinstance(item, (tuple, list)) else [item])
    return out


TRAIN_COUNTS = ("n_train", "train_subset")  # drawn from the training split (0: all of it)
TEST_COUNTS = ("n_test", "test_subset")  # drawn from the test split (0: all of it)


def _check_sample_counts(obj: Any) -> None:
    """Sample counts of a settings object that names its data set(s) (`dataset` or `datasets`), against each."""
    named = getattr(obj, "dataset", None)
    datasets = [named] if isinstance(named, str) else list(getattr(obj, "datasets", None) or ())
    for dataset in [d for d in datasets if isinstance(d, str) and d in DATA_SPLITS]:
        splits = DATA_SPLITS[dataset]
        train = splits["train"]
        for name in TRAIN_COUNTS:
            pool = train + splits.get("unlabeled", 0) if name == "train_subset" else train
            what = f"{dataset}'s training split" + (" with its unlabeled split" if pool != train else "")
            _count_within(obj, name, pool, f"{pool:,} images in {what}")
        for name in TEST_COUNTS:
            _count_within(obj, name, splits["test"], f"{splits['test']:,} images in {dataset}'s test split")
        validation = getattr(obj, "n_validation", 0)
        if isinstance(validation, int) and not isinstance(validation, bool):
            _count_within(obj, "n_validation", train - 1, f"{train:,} images in {dataset}'s training split")
            rest = train - validation
            _count_within(obj, "n_pool", rest, f"{rest:,} training images of {dataset} outside the validation split")
            labeled = getattr(obj, "n_labeled", 0)
            if isinstance(labeled, int) and not isinstance(labeled, bool):
                _count_within(obj, "n_labeled", rest, f"{rest:,} training images of {dataset} outside validation")
                left = rest - labeled
                _count_within(
                    obj, "n_unlabeled", left, f"{left:,} training images of {dataset} outside validation and labeled"
                )


def _count_within(obj: Any, name: str, available: int, what: str) -> None:
    value = getattr(obj, name, None)
    if isinstance(value, int) and not isinstance(value, bool) and value > available:
        require(
            obj, name, False, f"must be <= {max(available, 0):,} (the {what}; larger values are refused, not capped)"
        )


def require(obj: Any, name: str, ok: bool, rule: str) -> None:
    """`config.require`'s one-line ConfigError (kept here: config imports this module, not the reverse)."""
    if not ok:
        raise ConfigError(f"{type(obj).__name__}.{name} {rule}; got {getattr(obj, name)!r}")
