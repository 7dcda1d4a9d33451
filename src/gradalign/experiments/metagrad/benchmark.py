"""Meta-gradient part, the benchmark (notebooks metagrad/03 and 04): Table 4 (the ablation), Table 1 (the method
against labeled-only training), Figure 3 (t-SNE of the features) and, on its own page, Figure 2 (error against the
number of labels).

All four read the same kind of run (`training.semimeta`, run cache kind `metagrad.ssl`), so the runs they share
(Table 4's rows 1 and 4 are Table 1's and Figure 3's) train once. `paper` follows App. C on SVHN, CIFAR-10 and
CIFAR-100; `cpu` and `gpu` substitute Fashion-MNIST and a narrower Conv-Large, named on the page. Decision rule
(`experiments.rules.compare`): A beats B when its mean error over seeds is lower by more than 2 standard errors of
the difference, on the paper's number (the best test error over training); every check's value carries the means,
the difference and its standard error, and the page shows the validation-selected errors beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradalign.analysis.feature_mmd import PERMUTATIONS
from gradalign.analysis.feature_mmd import SEED as MMD_SEED
from gradalign.config import require
from gradalign.experiments.base import Experiment, check, outcome
from gradalign.experiments.metagrad.ssl_runs import (
    CPU,
    CPU_FITS,
    GPU,
    NOTEBOOK,
    PAPER,
    PAPER_COLUMNS,
    SMOKE,
    SemiMetaConfig,
    column_name,
    curves_of,
    run_group,
    ssl_scale,
    still_improving,
    summary,
    unused_settings,
    variant_title,
)
from gradalign.experiments.rules import all_of, compare
from gradalign.experiments.rules import summary as seed_summary
from gradalign.experiments.seed_stats import stats
from gradalign.methods.semimeta import VARIANTS
from gradalign.training.semimeta import SemiMetaProtocol

TABLE4_CLAIMS = (  # (check, better, worse, the paper's claim)
    (
        "meta_beats_labeled_only",
        "meta",
        "labeled_only",
        "the meta-learning component improves on labeled-only training",
    ),
    ("mixup_beats_labeled_only", "mixup", "labeled_only", "mixup improves on labeled-only training"),
    ("meta_adds_to_mixup", "meta_mixup", "mixup", "meta-learning further improves performance with mixup present"),
)


def _scope(cfg: SemiMetaConfig, columns) -> str:
    full = cfg.width == 1 and cfg.protocol == SemiMetaProtocol() and cfg.n_test == 0 and cfg.n_unlabeled == 0
    return "exact" if full and set(columns) <= {tuple(c) for c in cfg.columns} else "reduced"


def _prefixed(cfg, dataset, labels, name):
    return name if len(cfg.columns) == 1 else f"{column_name(dataset, labels)}_{name}"


def _tables(cfg: SemiMetaConfig, runs: dict, variants) -> tuple[dict, dict]:
    """Per column, each variant's summary over seeds; and each run's validation and test error per evaluation,
    which the finished-learning precondition reads (`validity`)."""
    tables, curves = {}, {}
    for d, n in cfg.columns:
        key = column_name(d, n)
        tables[key] = {v: summary(runs[(v, d, n)]) for v in variants}
        curves.update({f"{key}/{v}": curves_of(runs[(v, d, n)]) for v in variants})
    return tables, curves


def _improving(runs: dict) -> list[int]:
    every = [r for group in runs.values() for r in group]
    return [sum(still_improving(r) for r in every), len(every)]


# --- Table 4 -----------------------------------------------------------------------------------------------


def _better(table: dict, a: str, b: str, claim: str, metric: str = "best_test_error") -> dict:
    """ "A beats B" on the mean error over seeds, beyond 2 standard errors (`rules.compare`)."""
    return compare(
        table[a][metric],
        table[b][metric],
        relation="beats",
        higher_is_better=False,
        quantity="best test error",
        names=(variant_title(a), variant_title(b)),
        claim=claim,
    )


def table4_checks(table: dict) -> dict[str, dict]:
    """`table[variant]` = summary of one column; the paper's three claims of §4.3."""
    return {name: _better(table, better, worse, f"{claim} (Table 4)") for name, better, worse, claim in TABLE4_CLAIMS}


def table4(cfg: SemiMetaConfig, device) -> dict:
    jobs = [(v, d, n) for d, n in cfg.columns for v in VARIANTS]
    runs = run_group(cfg, jobs, device)
    tables, curves = _tables(cfg, runs, VARIANTS)
    checks = {}
    for d, n in cfg.columns:
        checks.update({_prefixed(cfg, d, n, k): c for k, c in table4_checks(tables[column_name(d, n)]).items()})
    seconds = sum(s["train_seconds"] for t in tables.values() for s in t.values())
    metrics = {"table": tables, "train_seconds": seconds, "still_improving": _improving(runs)}
    return outcome(checks, metrics, curves, scope=_scope(cfg, PAPER_COLUMNS))


# --- Table 1 -----------------------------------------------------------------------------------------------


def table1_checks(table: dict) -> dict[str, dict]:
    claim = "the method learns from the unlabeled data: its error is well below labeled-only training (Tables 1, 4)"
    return {"method_beats_labeled_only": _better(table, "meta_mixup", "labeled_only", claim)}


def table1(cfg: SemiMetaConfig, device) -> dict:
    return against_labeled_only(cfg, device, PAPER_COLUMNS)


def against_labeled_only(cfg: SemiMetaConfig, device, paper_columns) -> dict:
    """The method against labeled-only training in every column of `cfg` (Tables 1 and 2); the scope is exact
    when the config is the paper's on `paper_columns`."""
    jobs = [(v, d, n) for d, n in cfg.columns for v in ("labeled_only", "meta_mixup")]
    runs = run_group(cfg, jobs, device)
    tables, curves = _tables(cfg, runs, ("labeled_only", "meta_mixup"))
    checks = {}
    for d, n in cfg.columns:
        checks.update({_prefixed(cfg, d, n, k): c for k, c in table1_checks(tables[column_name(d, n)]).items()})
    seconds = sum(s["train_seconds"] for t in tables.values() for s in t.values())
    metrics = {"table": tables, "train_seconds": seconds, "still_improving": _improving(runs)}
    return outcome(checks, metrics, curves, scope=_scope(cfg, paper_columns))


# --- Figure 2 ----------------------------------------------------------------------------------------------


def figure2_checks(points: dict) -> dict[str, dict]:
    """`points[column]` = {variant: summary}: the method below labeled-only at every number of labels."""
    claim = "the method's error is below the labeled-only baseline for every number of labels (Figure 2)"
    parts = {c: _better(p, "meta_mixup", "labeled_only", claim) for c, p in points.items()}
    return {
        "method_below_baseline_everywhere": all_of(
            parts, "at every number of labels: meta + mixup beats labeled-only (best test error, 2 SE)", claim
        )
    }


def figure2(cfg: SemiMetaConfig, device) -> dict:
    jobs = [(v, d, n) for d, n in cfg.columns for v in ("labeled_only", "meta_mixup")]
    runs = run_group(cfg, jobs, device)
    points, curves = _tables(cfg, runs, ("labeled_only", "meta_mixup"))
    seconds = sum(s["train_seconds"] for p in points.values() for s in p.values())
    metrics = {"points": points, "train_seconds": seconds, "still_improving": _improving(runs)}
    return outcome(figure2_checks(points), metrics, curves, scope=_scope(cfg, FIGURE2_PAPER_COLUMNS))


FIGURE2_PAPER_COLUMNS = tuple(("svhn", n) for n in (250, 500, 1000, 2000)) + tuple(
    ("cifar10", n) for n in (1000, 2000, 4000, 8000)
)  # our grid: Figure 2 gives no numbers and no grid in the text


# --- Figure 3 ----------------------------------------------------------------------------------------------


FIGURE3_DISCREPANCY_CLAIM = (
    "there is a considerable empirical distribution discrepancy between labeled and unlabeled examples of the baseline "
    "method. In contrast, such discrepancy is reduced and the feature distributions of different domains are aligned "
    "to some extent by our approach (§4.3, Figure 3)"
)
MMD_QUANTITY = "squared MMD between the labeled and unlabeled features (Gaussian kernel at the median distance)"


def _discrepancy_check(mmd: dict | None) -> dict:
    """Meta + mixup's labeled-unlabeled MMD² below labeled-only's (Welch's t over seeds); "not recorded", undecided,
    where a run lacks the MMD (runs trained before it was measured): the verdict then cannot rest on it."""
    if not mmd or any(mmd.get(v) is None for v in ("labeled_only", "meta_mixup")):
        out = check(False, "not recorded", f"{MMD_QUANTITY}: must be recorded by every run", FIGURE3_DISCREPANCY_CLAIM)
        out.update(within_noise=True, not_recorded=True)
        return out
    return compare(
        mmd["meta_mixup"],
        mmd["labeled_only"],
        relation="beats",
        higher_is_better=False,
        quantity=MMD_QUANTITY,
        names=("meta + mixup", "labeled-only"),
        claim=FIGURE3_DISCREPANCY_CLAIM,
    )


def figure3_checks(m: dict) -> dict[str, dict]:
    """Both halves of Figure 3's claim: the method's test features cluster by class (silhouette) and its labeled and
    unlabeled features are closer in distribution (MMD², `analysis.feature_mmd`) than labeled-only training's."""
    return {
        "labeled_unlabeled_closer": _discrepancy_check(m.get("mmd")),
        "method_clusters_test_features": compare(
            m["silhouette"]["meta_mixup"],
            m["silhouette"]["labeled_only"],
            relation="beats",
            higher_is_better=True,
            quantity="silhouette score of the test features by class",
            names=("meta + mixup", "labeled-only"),
            claim="the method's features of unseen images cluster by class better than the labeled-only baseline's "
            "(Figure 3; our measure of what the figure shows)",
        ),
    }


@dataclass(frozen=True)
class Figure3Config(SemiMetaConfig):
    def validate(self) -> None:
        super().validate()
        require(self, "columns", len(self.columns) == 1, "must hold one (data set, labels) pair")
        require(self, "tsne_points", self.tsne_points >= 10, "must be >= 10")


def figure3(cfg: Figure3Config, device) -> dict:
    (d, n), variants = cfg.columns[0], ("labeled_only", "meta_mixup")
    runs = run_group(cfg, [(v, d, n) for v in variants], device)
    tables, curves = _tables(cfg, runs, variants)  # what its preconditions read, as Table 1's
    m = {
        "table": tables,
        "tsne": {v: runs[(v, d, n)][0]["tsne"] for v in variants},
        "silhouette": {v: stats([r["tsne"]["test_silhouette"] for r in runs[(v, d, n)]]) for v in variants},
        "mmd": {v: _mmd_summary(runs[(v, d, n)]) for v in variants},
        "train_seconds": sum(r["train_seconds"] for group in runs.values() for r in group),
        "still_improving": _improving(runs),
    }
    return outcome(figure3_checks(m), m, curves, scope=_scope(cfg, (("svhn", 1000),)))


def _mmd_summary(runs: list[dict]) -> dict | None:
    """The labeled-unlabeled MMD² over seeds, with each run's p-value; None when a run did not record it."""
    found = [r["tsne"].get("labeled_unlabeled_mmd") for r in runs]
    if any(f is None for f in found):
        return None
    return {**seed_summary([f["mmd2"] for f in found]), "p_values": [f["p_value"] for f in found]}


def feature_dim(record: dict) -> int:
    """The dimension of the pooled features the record's runs embedded (Figure 3): the model built at its config."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.training.semimeta import MODELS

    cfg = record["config"]
    dataset = cfg["columns"][0][0]
    info = image_set_info(dataset)
    return MODELS[cfg.get("model", "conv_large")](info.num_classes, info.channels, cfg["width"]).feature_dim


def record_config(record: dict) -> SemiMetaConfig:
    """The config a stored record ran with, rebuilt (validated) from its stored dict."""
    from gradalign.config import resolve

    cls = Figure3Config if record["id"] == "metagrad.fig3" else SemiMetaConfig
    return resolve(cls, {record["preset"]: {}}, record["preset"], record["config"])


def settings_rows(record: dict) -> list[dict]:
    """Mixup's γ, Conv-Large's dropout and the learning-rate schedule that the record's runs trained with, read from
    the run spec its config gives (`SemiMetaConfig.spec`, what the training reads), each with the paper's value (App.
    C, Table 6) and whether ours is the paper's or our choice: {"setting", "value", "paper", "source"} per row."""
    from gradalign.data.image_sets import IMAGE_SETS
    from gradalign.models.conv_large import DROPOUT as PAPER_DROPOUT

    cfg = record_config(record)
    rows = []
    for dataset, labels in cfg.columns:
        spec, title = cfg.spec("meta_mixup", dataset, labels, cfg.seed), IMAGE_SETS[dataset].title
        p, gamma = spec.protocol, spec.method.gamma
        paper_gamma = {"svhn": 0.1, "cifar10": 1.0, "cifar100": 1.0}.get(dataset)
        dropout = PAPER_DROPOUT if spec.dropout is None else spec.dropout
        decays = ", ".join(f"step {round(d * p.steps):,} ({d * 100:g} %)" for d in p.decay_at)

        def row(setting, value, paper, source):
            rows.append({"setting": f"{title}: {setting}", "value": value, "paper": paper, "source": source})

        if paper_gamma is None and cfg.method.gamma is None:
            source = "our choice (CIFAR's value; the paper does not use this data set)"
        else:
            source = "the paper's" if gamma == paper_gamma else "our choice"
        row("mixup λ ~ Beta(γ, γ)", f"γ = {gamma:g}", "γ = 1.0 on CIFAR, 0.1 on SVHN (App. C)", source)
        if spec.model == "conv_large":
            source = "the paper's" if dropout == PAPER_DROPOUT else "our choice"
            row("Conv-Large Dropout2d rate", f"{dropout:g}", f"{PAPER_DROPOUT:g} (Table 6)", source)
        same = tuple(p.decay_at) == (0.75, 0.875) and p.decay == 0.1 and p.steps == 400_000
        source = "the paper's" if same else "our choice"
        paper = "× 0.1 at 300k and 350k of 400k steps (75 %, 87.5 %; App. C)"
        row("learning-rate decays", f"× {p.decay:g} at {decays} of {p.steps:,} steps", paper, source)
        source = "the authors' code" if p.warmup_fraction == 0.01 else "our choice"
        row("learning-rate warm-up", f"linear over the first {p.warmup_steps:,} steps", "not stated", source)
    return rows


def _presets(paper: dict, both: dict | None = None, cpu: dict | None = None) -> dict:
    """`both`: overrides of the `cpu` and `gpu` presets (Figure 2's grid); `cpu`: of the `cpu` preset alone."""
    cpu_preset = {**CPU, **(both or {}), **(cpu or {})}
    return {"smoke": SMOKE, "cpu": cpu_preset, "gpu": {**GPU, **(both or {})}, "paper": paper}


GRID_CPU = {"columns": (("fashion_mnist", 250), ("fashion_mnist", 1000), ("fashion_mnist", 4000))}
NOTE = "cpu/gpu presets run on Fashion-MNIST with a narrower Conv-Large and far fewer steps (the paper: 400k steps)"
CHOICES = {
    "substitute": "Fashion-MNIST (the CIFAR protocol: weight decay 1e-4, Beta(1, 1), crop + flip); cpu: Conv-Large "
    "x0.125, 2,000 steps of 32 + 32, evaluation every 100 steps, 1,000 validation and 2,000 test images",
    "seeds": "3 per configuration; the split drawn once, with the config's seed",
    "validation": "a held-out split of the training images (not in the paper), for the validation-selected errors",
}
CHOICES_FITS = {
    **CHOICES,
    "substitute": "Fashion-MNIST (the CIFAR protocol: weight decay 1e-4, Beta(1, 1), crop + flip); cpu: Conv-Large "
    "x0.125, 4,000 steps of 32 + 32, lr decays at 50 % and 70 % of the steps (the paper's: 75 % and 87.5 %), "
    "evaluation every 100 steps, 1,000 validation and 2,000 test images",
    "dropout": "cpu: no Dropout2d (the paper: 0.5). With it, the narrowed network could not fit its labeled "
    "images in the budget (labeled-set error 18.5 % against 4.1 % without, in the pilot shown on the page)",
}

EXPERIMENTS = [
    Experiment(
        "metagrad.tab4",
        table4,
        SemiMetaConfig,
        _presets(PAPER, cpu=CPU_FITS),
        1,
        NOTEBOOK,
        note=NOTE,
        choices=CHOICES_FITS,
        scale=ssl_scale,
        shares="metagrad.ssl runs (rows 1 and 4 are Table 1's and Figure 3's)",
        unused=unused_settings,
    ),
    Experiment(
        "metagrad.tab1",
        table1,
        SemiMetaConfig,
        _presets(PAPER, cpu=CPU_FITS),
        1,
        NOTEBOOK,
        note=NOTE,
        choices=CHOICES_FITS,
        scale=ssl_scale,
        shares="metagrad.ssl runs (Table 4's rows 1 and 4)",
        unused=unused_settings,
    ),
    Experiment(
        "metagrad.fig2",
        figure2,
        SemiMetaConfig,
        _presets({"columns": FIGURE2_PAPER_COLUMNS}, GRID_CPU, cpu=CPU_FITS),
        1,
        "notebooks/metagrad/04_labels.ipynb",
        note=NOTE,
        choices={
            **CHOICES_FITS,
            "grid": "Figure 2 states no grid: ours is 250, 1,000 and "
            "4,000 labels at cpu/gpu; SVHN 250-2,000 and CIFAR-10 1,000-8,000 at paper",
        },
        scale=ssl_scale,
        shares="metagrad.ssl runs (1,000 labels: Table 4's rows 1 and 4)",
        unused=unused_settings,
    ),
    Experiment(
        "metagrad.fig3",
        figure3,
        Figure3Config,
        _presets({"columns": (("svhn", 1000),)}, cpu=CPU_FITS),
        1,
        NOTEBOOK,
        note=NOTE,
        choices={
            **CHOICES_FITS,
            "measure": "silhouette score of the first 300 test images' pooled features by class (the features' "
            "dimension is the model's: 128 at width 1; the page states the runs' from their config); the squared MMD "
            "between the first 300 labeled and 300 unlabeled images' features, unbiased, Gaussian kernel at the "
            f"median distance of the pooled sample, with a permutation p-value over {PERMUTATIONS} permutations "
            f"drawn by a generator seeded {MMD_SEED} (analysis.feature_mmd; our choices); t-SNE (scikit-learn, "
            "perplexity 30, PCA init) of the same images of the first seed",
        },
        scale=ssl_scale,
        shares="metagrad.ssl runs (Table 4's rows 1 and 4)",
        unused=unused_settings,
    ),
]
