"""LGA part, §4: the semi-supervised benchmark (Figures 5-7, Table 1) on Oliver et al.'s protocol.

Every training run (data set, method settings, number of labels, seed, protocol) is stored once in the
run cache (`runcache`, kind `lga.ssl`); Figures 5-7 and Table 1 read the runs they need, so runs they
share train once, and an interrupted experiment resumes (within a run too, from its checkpoint). The `paper` presets follow the protocol (WRN-28-2, 500k steps, 5 seeds);
`smoke`/`cpu` substitute Fashion-MNIST and a small CNN, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome
from gradalign.methods.lga_ssl import LGABenchmarkSettings
from gradalign.training.protocols import FAMILIES, OliverProtocol

NOTEBOOK = "notebooks/lga/04_ssl_benchmark.ipynb"
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

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS
        from gradalign.training.ssl import METHODS

        super().validate()
        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        require(self, "families", len(self.families) >= 1 and set(self.families) <= set(FAMILIES),
                f"must be a non-empty subset of {FAMILIES}")
        require(self, "methods", len(self.methods) >= 1 and set(self.methods) <= set(METHODS),
                f"must be a non-empty subset of {tuple(METHODS)}")
        _check_labels(self, "labels", self.dataset, self.labels, self.n_validation)
        require(self, "model", self.model in MODELS, f"must be one of {MODELS}")
        for name in ("seeds", "width", "n_validation"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "n_pool", self.n_pool == 0 or self.n_pool >= max(self.labels), "must be 0 or >= the largest label count")
        require(self, "n_test", self.n_test >= 0, "must be >= 0")


def _check_labels(cfg, name: str, dataset: str, labels, n_validation: int) -> None:
    """Every label count, checked whole before the first run: a multiple of the classes, at least one
    labeled batch, and room for the validation split in the training set."""
    from gradalign.data.image_sets import TRAIN_SIZES, image_set_info

    classes = image_set_info(dataset).num_classes
    room = TRAIN_SIZES.get(dataset, 10**9) - n_validation
    require(cfg, name, len(labels) >= 1 and all(n >= classes and n % classes == 0 for n in labels),
            f"must be positive multiples of the {classes} classes of {dataset}")
    require(cfg, name, min(labels) >= cfg.protocol.batch_labeled, "must each be >= protocol.batch_labeled")
    require(cfg, name, max(labels) <= room, f"must each fit in {dataset}'s training set beside the validation "
                                            f"split ({room} images)")


@dataclass(frozen=True)
class TableConfig(SSLBenchConfig):
    """Table 1: (data set, family, labels, validation size) per column; `dataset`, `families`, `labels` and
    `n_validation` are unused."""

    columns: tuple[tuple[str, str, int, int], ...] = (("fashion_mnist", "cifar", 4000, 2000),
                                                      ("fashion_mnist", "svhn", 1000, 2000))
    methods: tuple[str, ...] = TABLE_METHODS

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        super().validate()
        require(self, "columns", len(self.columns) >= 1, "must name at least one (dataset, family, labels, n_validation)")
        for dataset, family, labels, n_validation in self.columns:
            require(self, "columns", dataset in IMAGE_SETS and family in FAMILIES,
                    f"must name data sets among {tuple(IMAGE_SETS)} and families among {FAMILIES}")
            _check_labels(self, "columns", dataset, (labels,), n_validation)


def _model(cfg: SSLBenchConfig, num_classes: int, channels: int) -> torch.nn.Module:
    from gradalign.models.small_cnn import SmallCNN
    from gradalign.models.wrn import WideResNet

    if cfg.model == "wrn28_2":
        return WideResNet(num_classes, channels)
    return SmallCNN(num_classes, channels, cfg.width)


_DATA_CACHE: dict = {}


def _data(cfg: SSLBenchConfig, dataset: str, n_labeled: int, seed: int, device):
    from gradalign.data.ssl_data import prepare_ssl_data

    key = (dataset, n_labeled, seed, cfg.n_validation, cfg.n_pool, cfg.n_test, str(device))
    if key not in _DATA_CACHE:
        _DATA_CACHE.clear()
        _DATA_CACHE[key] = prepare_ssl_data(dataset, n_labeled, cfg.n_validation, seed, device,
                                            n_pool=cfg.n_pool or None, n_test=cfg.n_test or None)
    return _DATA_CACHE[key]


def method_settings(cfg: SSLBenchConfig, method: str, family: str):
    """Oliver et al.'s tuned settings for `family`; LGA's from the config (LGA + VAT: VAT's tuned values)."""
    from gradalign.training.protocols import oliver_settings

    if method == "lga":
        return cfg.lga
    if method == "lga_vat":
        return replace(cfg.lga, vat=oliver_settings("lga_vat", family).vat)
    return oliver_settings(method, family)


def ssl_run(cfg: SSLBenchConfig, dataset: str, family: str, method: str, n_labeled: int, seed: int, device) -> dict:
    """One training run, from the run cache when it is there."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.runcache import cached_run
    from gradalign.training.ssl import train_ssl

    settings = method_settings(cfg, method, family)
    spec = {"dataset": dataset, "method": method, "settings": settings.to_dict(), "protocol": cfg.protocol.to_dict(),
            "labels": n_labeled, "seed": seed, "model": cfg.model, "width": cfg.width,
            "n_validation": cfg.n_validation, "n_pool": cfg.n_pool, "n_test": cfg.n_test}

    def train(checkpoint) -> dict:
        data = _data(cfg, dataset, n_labeled, seed, device)
        info = image_set_info(dataset)
        torch.manual_seed(seed)
        model = _model(cfg, info.num_classes, info.channels).to(device)
        out = train_ssl(model, method, settings, cfg.protocol, data, seed, checkpoint=checkpoint)
        out.update(family=family, dataset=dataset, labels=n_labeled, data=data.description)
        return out

    return cached_run("lga.ssl", spec, RUN_VERSION, train)


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
    out["seeds"] = len(runs)
    out["train_seconds"] = sum(r["train_seconds"] for r in runs)
    return out


def sweep(cfg: SSLBenchConfig, device) -> dict:
    """Per method and label count: the summary of the chosen family (lowest mean validation error)."""
    from gradalign.progress import progress

    pairs = _unique_settings_families(cfg, cfg.methods, cfg.families)
    jobs = [(m, f, n, s) for n in cfg.labels for s in range(cfg.seed, cfg.seed + cfg.seeds) for (m, f) in pairs]
    runs: dict = {}
    for m, f, n, s in progress(jobs, desc=f"{cfg.dataset} runs"):
        runs.setdefault((m, f, n), []).append(ssl_run(cfg, cfg.dataset, f, m, n, s, device))
    table = {}
    for method in cfg.methods:
        families = [f for (m, f) in pairs if m == method]
        val = {f: sum(_summary(runs[(method, f, n)])["best_val_error"] for n in cfg.labels) for f in families}
        family = min(families, key=lambda f: val[f])
        table[method] = {"family": family, "by_labels": {str(n): _summary(runs[(method, family, n)]) for n in cfg.labels},
                         "curves": {str(n): runs[(method, family, n)][0]["history"] for n in cfg.labels}}
    return table


def _figure_checks(table: dict, labels) -> dict:
    """Figures 5-7's checks: `table` maps each method to {"by_labels": {str(n): its summary at n labels (mean
    "test_error" and "test_loss")}}, for every label count n in `labels`."""
    def at(method, n, name):
        return table[method]["by_labels"][str(n)][name]

    baselines = [m for m in table if m not in ("lga", "lga_vat")]
    checks = {}
    if "lga" in table:
        best_loss = [all(at("lga", n, "test_loss") < at(m, n, "test_loss") for m in baselines) for n in labels]
        checks["lga_lowest_test_loss_vs_baselines"] = check(
            all(best_loss), {str(n): {m: round(at(m, n, "test_loss"), 3) for m in table} for n in labels},
            "LGA's test loss < every non-LGA method's, at every label count",
            "LGA consistently achieves better test loss than other SSL methods")
        if "supervised" in table:
            checks["lga_beats_supervised"] = check(
                all(at("lga", n, "test_error") < at("supervised", n, "test_error") for n in labels),
                {str(n): {m: round(at(m, n, "test_error"), 2) for m in ("lga", "supervised")} for n in labels},
                "LGA's test error < Supervised's at every label count", "LGA improves on the supervised baseline")
    if {"lga", "lga_vat", "vat"} <= set(table):
        wins = [at("lga_vat", n, "test_error") < min(at("lga", n, "test_error"), at("vat", n, "test_error"))
                for n in labels]
        checks["lga_vat_better_than_either"] = check(
            2 * sum(wins) >= len(wins), {str(n): {m: round(at(m, n, "test_error"), 2) for m in ("lga_vat", "lga", "vat")}
                                         for n in labels},
            "LGA+VAT's test error < both LGA's and VAT's at >= half of the label counts",
            "in many cases the combination achieves better performance than either method individually")
    return checks


def _scope(cfg: SSLBenchConfig, paper_dataset: str) -> str:
    full = cfg.model == "wrn28_2" and cfg.protocol.steps >= 500_000 and cfg.seeds >= 5 and cfg.n_pool == 0 and cfg.n_test == 0
    return "exact" if full and cfg.dataset == paper_dataset else "reduced"


def _figure(paper_dataset: str):
    def run(cfg: SSLBenchConfig, device) -> dict:
        table = sweep(cfg, device)
        curves = {m: table[m].pop("curves") for m in table}
        seconds = sum(s["train_seconds"] for row in table.values() for s in row["by_labels"].values())
        return outcome(_figure_checks(table, cfg.labels), {"table": table, "dataset": cfg.dataset,
                                                           "train_seconds": seconds}, curves,
                       scope=_scope(cfg, paper_dataset))
    run.__doc__ = f"Error and test loss against the number of labels ({paper_dataset} in the paper)."
    return run


def table1_checks(columns: dict, methods) -> dict[str, dict]:
    """Table 1's checks: `columns` maps each column (first: CIFAR-10's, last: SVHN's) to every method's summary
    (its mean "test_error"), over `methods`."""
    checks = {}
    first, second = list(columns)[0], list(columns)[-1]
    err = lambda col, m: columns[col][m]["test_error"]  # noqa: E731
    if {"lga", "lga_vat"} <= set(methods):
        checks["lga_vat_best_first_column"] = check(
            all(err(first, "lga_vat") <= err(first, m) for m in methods), {m: round(err(first, m), 2) for m in methods},
            "LGA+VAT has the lowest error of all methods in the first (CIFAR-10) column",
            "LGA + VAT: 12.06 on CIFAR-10 with 4000 labels, the best of the table")
        others = [m for m in methods if m not in ("lga", "lga_vat")]
        checks["lga_beats_baselines_first_column"] = check(
            all(err(first, "lga") < err(first, m) for m in others), {m: round(err(first, m), 2) for m in methods},
            "LGA's error < every baseline's in the first column",
            "LGA alone (12.91) beats every baseline on CIFAR-10 with 4000 labels (best baseline VAT+EntMin 13.13)")
    if "vat_entmin" in methods:
        checks["vat_entmin_best_second_column"] = check(
            all(err(second, "vat_entmin") <= err(second, m) for m in methods),
            {m: round(err(second, m), 2) for m in methods},
            "VAT+EntMin has the lowest error in the second (SVHN) column",
            "on SVHN with 1000 labels VAT+EntMin is best (5.35); LGA (7.56) trails the consistency methods")
    return checks


def table1(cfg: TableConfig, device) -> dict:
    """Table 1: test error of every method at one label count per column."""
    columns = {}
    for dataset, family, n, n_validation in cfg.columns:
        sub = replace(cfg, dataset=dataset, families=(family,), labels=(n,), n_validation=n_validation)
        table = sweep(sub, device)
        columns[f"{dataset}/{family}/{n}"] = {m: {k: v for k, v in table[m]["by_labels"][str(n)].items()}
                                              for m in cfg.methods}
    checks = table1_checks(columns, cfg.methods)
    scope = "exact" if all(c[0] != "fashion_mnist" for c in cfg.columns) and _scope(cfg, cfg.columns[0][0]) == "exact" \
        else "reduced"
    seconds = sum(v["train_seconds"] for col in columns.values() for v in col.values())
    return outcome(checks, {"columns": columns, "train_seconds": seconds}, {}, scope=scope)


CPU = {}
SMOKE = {"labels": (50, 100), "protocol.steps": 8, "protocol.eval_every": 4, "n_validation": 200, "n_pool": 400,
         "n_test": 200, "width": 8, "protocol.batch_labeled": 20, "protocol.batch_unlabeled": 20}
GPU = {"model": "wrn28_2", "protocol.steps": 20_000, "seeds": 2, "labels": (250, 1000, 4000), "n_validation": 5000,
       "n_pool": 0, "n_test": 0, "protocol.eval_every": 1000}


def _paper(dataset: str, labels, n_validation: int, families) -> dict:
    return {"dataset": dataset, "families": families, "labels": labels, "model": "wrn28_2", "protocol.steps": 500_000,
            "seeds": 5, "n_validation": n_validation, "n_pool": 0, "n_test": 0, "protocol.eval_every": 5000,
            "lga.alpha_w": 1e-3}


LABELS_PAPER = (250, 500, 1000, 2000, 4000, 8000)
CHOICES = {
    "model": "cpu: a 3-block CNN (16/32/64 channels, BN, leaky ReLU 0.1) for WRN-28-2; gpu/paper: WRN-28-2",
    "schedule": "cpu: 1,000 steps of 50 + 50 images, ramp-up over the first 40% and lr x 0.2 after 80% "
                "(Oliver's 200k and 400k of 500k, scaled)",
    "data": "cpu: Fashion-MNIST, 2,000 validation images, an unlabeled pool of 10,000 (labeled included), 5,000 test",
    "lga": "T(i) = 1, alpha_theta = 1e-3, alpha_w = 1e-2 (cpu) / 1e-3 (paper), eps_norm = 1e-3: not stated in the paper",
    "selection": "test metrics at the evaluation with the lowest validation error (Oliver et al.'s model selection)",
}
SHARED_RUNS = "the training runs stored once for lga.fig5, fig6, fig7 and tab1 (run cache: lga.ssl)"
FIG_NOTE = "cpu/gpu presets run on Fashion-MNIST with this figure's hyperparameter family (the paper: {})"

EXPERIMENTS = [
    Experiment("lga.fig5", _figure("cifar10"), SSLBenchConfig,
               {"smoke": SMOKE, "cpu": CPU, "gpu": GPU, "paper": _paper("cifar10", LABELS_PAPER, 5000, ("cifar",))},
               RUN_VERSION, NOTEBOOK, uses_accelerator=True, note=FIG_NOTE.format("CIFAR-10"), choices=CHOICES,
               shares=SHARED_RUNS),
    Experiment("lga.fig6", _figure("svhn"), SSLBenchConfig,
               {"smoke": {**SMOKE, "families": ("svhn",)}, "cpu": {"families": ("svhn",)},
                "gpu": {**GPU, "families": ("svhn",)}, "paper": _paper("svhn", LABELS_PAPER, 7326, ("svhn",))},
               RUN_VERSION, NOTEBOOK, uses_accelerator=True, note=FIG_NOTE.format("SVHN"), choices=CHOICES,
               shares=SHARED_RUNS),
    Experiment("lga.fig7", _figure("fashion_mnist"), SSLBenchConfig,
               {"smoke": {**SMOKE, "families": ("cifar", "svhn")}, "cpu": {"families": ("cifar", "svhn")},
                "gpu": {**GPU, "families": ("cifar", "svhn")},
                "paper": _paper("fashion_mnist", LABELS_PAPER, 5000, ("cifar", "svhn"))},
               RUN_VERSION, NOTEBOOK, uses_accelerator=True,
               note="Fashion-MNIST, the paper's own data; each method takes the better of the CIFAR-10 and SVHN "
                    "hyperparameter sets by validation error, as the paper did", choices=CHOICES,
               shares=SHARED_RUNS),
    Experiment("lga.tab1", table1, TableConfig,
               {"smoke": {**SMOKE, "columns": (("fashion_mnist", "cifar", 100, 200), ("fashion_mnist", "svhn", 50, 200))},
                "cpu": CPU, "gpu": {**GPU, "columns": (("fashion_mnist", "cifar", 4000, 5000), ("fashion_mnist", "svhn", 1000, 5000))},
                "paper": {**_paper("cifar10", (4000,), 5000, ("cifar",)),
                          "columns": (("cifar10", "cifar", 4000, 5000), ("svhn", "svhn", 1000, 7326))}},
               RUN_VERSION, NOTEBOOK, uses_accelerator=True,
               note="cpu/gpu: both columns on Fashion-MNIST, with the CIFAR-10 set at 4000 labels and the SVHN set at "
                    "1000 labels", choices=CHOICES,
               shares=SHARED_RUNS),
]
