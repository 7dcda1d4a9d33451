"""LGA part, §4: the benchmark's settings and its training runs, shared by Figures 5-7 and Table 1.

Every training run (data set, method settings, number of labels, seed, protocol) is stored once in the
run cache (kind `lga.ssl`), so runs that several experiments share train once. Each run is a unit
(`run_unit`; an experiment's: `benchmark_units`, Table 1's per column: `column_configs`): `gradalign sweep`
can train them as separate jobs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from gradalign.config import Config, require, settings_fields
from gradalign.experiments.seed_stats import stats
from gradalign.store.run_unit import Unit, without_defaults
from gradalign.methods.lga_ssl import LGABenchmarkSettings
from gradalign.runtime import select_device
from gradalign.training.fast import FastPath
from gradalign.training.protocols import FAMILIES, OliverProtocol

RUN_VERSION = 1
MODELS = ("small_cnn", "wrn28_2")
FIGURE_METHODS = ("supervised", "pseudo_label", "pi_model", "mean_teacher", "vat", "lga", "lga_vat")
TABLE_METHODS = ("lga", "lga_vat", "vat", "vat_entmin", "pi_model", "mean_teacher", "pseudo_label", "supervised")


@dataclass(frozen=True)
class SSLBenchConfig(Config):
    dataset: str = "fashion_mnist"
    families: tuple[str, ...] = ("cifar",)  # Oliver et al.'s hyperparameter sets; several: the best by validation
    methods: tuple[str, ...] = FIGURE_METHODS
    labels: tuple[int, ...] = (250, 1000, 4000)
    seeds: int = 1
    model: str = "small_cnn"
    width: int = 16  # small_cnn channels of its first block
    n_validation: int = 2000
    n_pool: int = 10_000  # unlabeled pool (labeled images + others); 0 = the whole training split
    n_test: int = 5000  # 0 = the whole test split
    protocol: OliverProtocol = OliverProtocol(steps=1000, eval_every=200)  # cpu: 1,000 steps (Oliver: 500k)
    lga: LGABenchmarkSettings = LGABenchmarkSettings(alpha_w=1e-2)  # alpha_w: our choice for short runs
    fast: FastPath = FastPath()  # bf16 autocast, channels-last, compile (training.fast); the gpu preset sets them
    tuned: tuple[tuple[str, str, float], ...] = ()  # (method, setting, value) over its settings (`lga.tune`'s choice)

    def to_dict(self) -> dict:
        """`fast` only when a switch is on, `tuned` only when set: records stored before them keep their keys."""
        return without_defaults(self, super().to_dict(), ("fast", "tuned"))

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS
        from gradalign.training.ssl import METHODS

        super().validate()
        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        require(
            self,
            "families",
            len(self.families) >= 1 and set(self.families) <= set(FAMILIES),
            f"must be a non-empty subset of {FAMILIES}",
        )
        require(
            self,
            "methods",
            len(self.methods) >= 1 and set(self.methods) <= set(METHODS),
            f"must be a non-empty subset of {tuple(METHODS)}",
        )
        _check_labels(self, "labels", self.dataset, self.labels, self.n_validation)
        require(self, "model", self.model in MODELS, f"must be one of {MODELS}")
        for name in ("seeds", "width", "n_validation"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(
            self,
            "n_pool",
            self.n_pool == 0 or self.n_pool >= max(self.labels),
            "must be 0 or >= the largest label count",
        )
        require(self, "n_test", self.n_test >= 0, "must be >= 0")
        for method, name, _ in self.tuned:
            require(self, "tuned", method in METHODS, f"names methods among {tuple(METHODS)}, not {method!r}")
            known = settings_fields(type(method_settings(replace(self, tuned=()), method, FAMILIES[0])))
            require(self, "tuned", name in known, f"names {method}'s settings ({', '.join(known)}), not {name!r}")
            method_settings(self, method, FAMILIES[0])  # a value out of its range: that setting's one-line error


def unused_settings(cfg: SSLBenchConfig) -> dict[str, str]:
    """The fields this config's runs do not read: refused as overrides (`Experiment.unused`)."""
    out = {}
    if cfg.model != "small_cnn":
        out["width"] = f"it sets small_cnn's channels, and model is {cfg.model}"
    if not {"lga", "lga_vat"} & set(cfg.methods):
        out["lga"] = "LGA's settings, and methods has neither lga nor lga_vat"
    if isinstance(cfg, TableConfig):
        why = "Table 1 takes each column's data set, family, labels and validation size from `columns`"
        out.update({name: why for name in ("dataset", "families", "labels", "n_validation")})
    return out


def _check_labels(cfg, name: str, dataset: str, labels, n_validation: int) -> None:
    """Every label count, checked whole before the first run: a multiple of the classes, at least one
    labeled batch, and room for the validation split in the training set."""
    from gradalign.data.image_sets import TRAIN_SIZES, image_set_info

    classes = image_set_info(dataset).num_classes
    room = TRAIN_SIZES.get(dataset, 10**9) - n_validation
    require(
        cfg,
        name,
        len(labels) >= 1 and all(n >= classes and n % classes == 0 for n in labels),
        f"must be positive multiples of the {classes} classes of {dataset}",
    )
    require(cfg, name, min(labels) >= cfg.protocol.batch_labeled, "must each be >= protocol.batch_labeled")
    require(
        cfg,
        name,
        max(labels) <= room,
        f"must each fit in {dataset}'s training set beside the validation split ({room} images)",
    )


@dataclass(frozen=True)
class TableConfig(SSLBenchConfig):
    """Table 1: (data set, family, labels, validation size) per column; `dataset`, `families`, `labels` and
    `n_validation` are unused."""

    columns: tuple[tuple[str, str, int, int], ...] = (
        ("fashion_mnist", "cifar", 4000, 2000),
        ("fashion_mnist", "svhn", 1000, 2000),
    )
    methods: tuple[str, ...] = TABLE_METHODS

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        super().validate()
        require(
            self, "columns", len(self.columns) >= 1, "must name at least one (dataset, family, labels, n_validation)"
        )
        for dataset, family, labels, n_validation in self.columns:
            require(
                self,
                "columns",
                dataset in IMAGE_SETS and family in FAMILIES,
                f"must name data sets among {tuple(IMAGE_SETS)} and families among {FAMILIES}",
            )
            _check_labels(self, "columns", dataset, (labels,), n_validation)


def _model(cfg: SSLBenchConfig, num_classes: int, channels: int) -> torch.nn.Module:
    from gradalign.models.small_cnn import SmallCNN
    from gradalign.models.wrn import WideResNet

    if cfg.model == "wrn28_2":
        return WideResNet(num_classes, channels)
    return SmallCNN(num_classes, channels, cfg.width)


def _data(cfg: SSLBenchConfig, dataset: str, n_labeled: int, seed: int, device):
    from gradalign.data.ssl_data import prepare_ssl_data
    from gradalign.training.data_cache import cached_data

    key = ("lga.ssl", dataset, n_labeled, seed, cfg.n_validation, cfg.n_pool, cfg.n_test, str(device))
    return cached_data(
        key,
        lambda: prepare_ssl_data(
            dataset, n_labeled, cfg.n_validation, seed, device, n_pool=cfg.n_pool or None, n_test=cfg.n_test or None
        ),
    )


def method_settings(cfg: SSLBenchConfig, method: str, family: str):
    """Oliver et al.'s tuned settings for `family`; LGA's from the config (LGA + VAT: VAT's tuned values); then the
    config's `tuned` values of `method` (a dotted name sets a nested setting: "vat.eps")."""
    from gradalign.training.protocols import oliver_settings

    if method == "lga":
        settings = cfg.lga
    elif method == "lga_vat":
        settings = replace(cfg.lga, vat=oliver_settings("lga_vat", family).vat)
    else:
        settings = oliver_settings(method, family)
    for m, name, value in cfg.tuned:
        if m == method:
            settings = _set(settings, name, value)
    return settings


def _set(settings, name: str, value: float):
    """`settings` with its (dotted) setting `name` at `value`, checked as any settings are."""
    head, _, rest = name.partition(".")
    return replace(settings, **{head: _set(getattr(settings, head), rest, value) if rest else value})


def run_unit(
    cfg: SSLBenchConfig, dataset: str, family: str, method: str, n_labeled: int, seed: int, device=None
) -> Unit:
    """One training run as a run-cache unit: what `ssl_run` reads back, and what `gradalign sweep` computes as a
    job of its own. `device`: where it trains; None: chosen where it runs (CUDA when the job sees a GPU).
    The fast path is the config's `fast`, named in the key when it is on: an fp32 and a bf16 run are different
    entries."""
    settings = method_settings(cfg, method, family)
    fast = cfg.fast
    spec = {
        "dataset": dataset,
        "method": method,
        "settings": settings.to_dict(),
        "protocol": cfg.protocol.to_dict(),
        "labels": n_labeled,
        "seed": seed,
        "model": cfg.model,
        "width": cfg.width,
        "n_validation": cfg.n_validation,
        "n_pool": cfg.n_pool,
        "n_test": cfg.n_test,
        **({"fast": fast.to_dict()} if fast.on else {}),  # fp32 eager runs keep their earlier keys
    }
    label = f"{dataset} {method} ({family} settings), {n_labeled} labels, seed {seed}"
    train = functools.partial(_train, cfg, dataset, family, method, n_labeled, seed, settings, device, fast)
    return Unit(label, "lga.ssl", spec, RUN_VERSION, train)


def _train(
    cfg: SSLBenchConfig,
    dataset: str,
    family: str,
    method: str,
    n_labeled: int,
    seed: int,
    settings,
    device,
    fast,
    checkpoint,
) -> dict:
    """The run itself, resuming from `checkpoint` (a module-level function: a sweep's job receives it pickled)."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.training.ssl import train_ssl

    device = select_device() if device is None else device
    data = _data(cfg, dataset, n_labeled, seed, device)
    info = image_set_info(dataset)
    torch.manual_seed(seed)
    model = _model(cfg, info.num_classes, info.channels).to(device)
    out = train_ssl(model, method, settings, cfg.protocol, data, seed, checkpoint=checkpoint, fast=fast)
    out["fast_path"], out["device"] = fast.text(), str(device)  # the device names the hardware of its entry
    out.update(family=family, dataset=dataset, labels=n_labeled, data=data.description)
    return out


def ssl_run(cfg: SSLBenchConfig, dataset: str, family: str, method: str, n_labeled: int, seed: int, device) -> dict:
    """One training run, from the run cache when it is there."""
    return run_unit(cfg, dataset, family, method, n_labeled, seed, device).run()


def _unique_settings_families(cfg: SSLBenchConfig, methods, families) -> list[tuple[str, str]]:
    """(method, family) pairs, one per distinct hyperparameter set (families differ only for VAT)."""
    pairs, seen = [], set()
    for method in methods:
        for family in families:
            settings = method_settings(cfg, method, family)
            if settings not in seen:
                seen.add(settings)
                pairs.append((method, family))
    return pairs


def _summary(runs: list[dict]) -> dict:
    def stats(name):
        t = torch.tensor([r[name] for r in runs], dtype=torch.float64)
        return float(t.mean()), float(t.std()) if len(t) > 1 else 0.0

    out = {}
    for name in ("test_error", "test_loss", "best_val_error", "final_test_error", "final_test_loss"):
        out[name], out[name + "_std"] = stats(name)
    if all("labeled_error" in r for r in runs):  # runs cached before it was recorded lack it
        out["labeled_error"], out["labeled_error_std"] = stats("labeled_error")
    out.update(_lga_diagnostics(runs))
    out["seeds"] = len(runs)
    out["train_seconds"] = sum(r["train_seconds"] for r in runs)
    return out


LGA_DIAGNOSTICS = ("imputed_moved", "imputed_accuracy", "imputed_confidence", "eps_dominated")


def _lga_diagnostics(runs: list[dict]) -> dict:
    """LGA's diagnostics over seeds, where every run recorded them (`training.ssl.SSLRun.evaluate`): its imputed
    labels at the last evaluation (distance from their start, accuracy on the unlabeled pool, confidence), the share
    of parameters whose ε_norm exceeds sqrt(EMA(v⁴)) at the last evaluation (`eps_dominated`: runs trained before
    it was recorded lack it, and then so does the summary: not recorded) and the cosine of its unlabeled and labeled
    gradients averaged over training (`alignment`)."""
    histories = [r["history"] for r in runs]
    out = {}
    for name in (*LGA_DIAGNOSTICS, "alignment"):
        if not all(h.get(name) and h[name][-1] is not None for h in histories):
            continue
        values = [h[name][-1] if name != "alignment" else sum(h[name]) / len(h[name]) for h in histories]
        summary = stats(values)
        out[name], out[f"{name}_std"] = summary["mean"], summary["std"]
    return out


def _runs(cfg: SSLBenchConfig, pairs: list[tuple[str, str]]) -> list[tuple[str, str, int, int]]:
    """(method, family, labels, seed) of every run `sweep` reads, in its order."""
    return [(m, f, n, s) for n in cfg.labels for s in range(cfg.seed, cfg.seed + cfg.seeds) for (m, f) in pairs]


def benchmark_units(cfg: SSLBenchConfig) -> list[Unit]:
    """The runs `sweep(cfg, device)` reads, as units (each trains on the device its job sees)."""
    pairs = _unique_settings_families(cfg, cfg.methods, cfg.families)
    return [run_unit(cfg, cfg.dataset, f, m, n, s) for m, f, n, s in _runs(cfg, pairs)]


def column_configs(cfg: TableConfig) -> list[tuple[str, TableConfig]]:
    """Table 1's columns, each as (its name `dataset/family/labels`, the config of the sweep that fills it)."""
    return [
        (f"{dataset}/{family}/{n}", replace(cfg, dataset=dataset, families=(family,), labels=(n,), n_validation=nv))
        for dataset, family, n, nv in cfg.columns
    ]


def sweep(cfg: SSLBenchConfig, device) -> dict:
    """Per method and label count: the summary of the chosen family (lowest mean validation error)."""
    from gradalign.progress import progress

    pairs = _unique_settings_families(cfg, cfg.methods, cfg.families)
    runs: dict = {}
    for m, f, n, s in progress(_runs(cfg, pairs), desc=f"{cfg.dataset} runs"):
        runs.setdefault((m, f, n), []).append(ssl_run(cfg, cfg.dataset, f, m, n, s, device))
    table = {}
    for method in cfg.methods:
        families = [f for (m, f) in pairs if m == method]
        val = {f: sum(_summary(runs[(method, f, n)])["best_val_error"] for n in cfg.labels) for f in families}
        family = min(families, key=lambda f: val[f])
        table[method] = {
            "family": family,
            "by_labels": {str(n): _summary(runs[(method, family, n)]) for n in cfg.labels},
            "curves": {str(n): runs[(method, family, n)][0]["history"] for n in cfg.labels},
        }
    return table
