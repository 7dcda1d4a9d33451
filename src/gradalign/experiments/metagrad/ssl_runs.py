"""What the meta-gradient benchmark experiments share (notebook metagrad/03): the config, its presets, the runs
(from the run cache, `training.semimeta`), their summaries over seeds and the scale of a record.

Per data set the protocol follows App. C: weight decay 5e-5 and Beta(0.1, 0.1) without flips on SVHN, 1e-4 and
Beta(1, 1) with flips elsewhere (Fashion-MNIST: the CIFAR values, our choice). Every number is reported twice:
the best test error over training (the paper's, as its code reports it) and the test error at the best
validation error (ours, from a held-out split of the training images).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradalign.config import Config, require
from gradalign.experiments.base import plural, scale_text
from gradalign.experiments.seed_stats import stats
from gradalign.store.run_unit import without_defaults
from gradalign.methods.semimeta import VARIANTS, SemiMetaSettings
from gradalign.training.semimeta import PSEUDO_DIAGNOSTICS, SemiMetaProtocol, SemiMetaRunSpec

NOTEBOOK = "notebooks/metagrad/03_benchmark.ipynb"
PAPER_COLUMNS = (("svhn", 1000), ("cifar10", 4000), ("cifar100", 10000))  # Tables 1 and 4
PAPER_DATA = {
    "metagrad.fig2": "SVHN and CIFAR-10 at several label counts",
    "metagrad.fig3": "SVHN 1k labels",
    "metagrad.tab2": "CIFAR-10 1k, 2k, 4k and CIFAR-100 6k, 8k, 10k labels",
}
MODEL_TITLES = {"conv_large": "Conv-Large", "shake_shake26": "ResNet-26 shake-shake 2×96d", "resnet18": "ResNet-18"}
METRICS = {
    "best_test_error": "best test error over training (the paper's)",
    "selected_test_error": "test error at the best validation error (ours)",
    "labeled_error": "eval-mode error on the run's own labeled training set (the fits-its-labels precondition)",
}


@dataclass(frozen=True)
class SemiMetaConfig(Config):
    columns: tuple[tuple[str, int], ...] = (("fashion_mnist", 1000),)  # (data set, labels) per column
    width: float = 1.0  # Conv-Large's channels × this
    dropout: float | None = None  # Conv-Large's Dropout2d rate; None: the paper's 0.5
    n_unlabeled: int = 0  # 0: every other training image outside the validation split
    n_validation: int = 5000
    n_test: int = 0
    seeds: int = 3  # runs seed, seed + 1, ... (the split is drawn once, with `seed`)
    protocol: SemiMetaProtocol = SemiMetaProtocol()  # weight decay and flips: None = the data set's (App. C)
    method: SemiMetaSettings = SemiMetaSettings()  # γ (None: the data set's), weight, c, form; rows set the variant
    tsne_points: int = 300

    def to_dict(self) -> dict:
        """`dropout` only when set: records stored before the field existed keep their keys."""
        return without_defaults(self, super().to_dict(), ("dropout",))

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        super().validate()
        ok = len(self.columns) >= 1 and all(len(c) == 2 and c[0] in IMAGE_SETS and c[1] >= 1 for c in self.columns)
        require(self, "columns", ok, f"must be (data set, labels) pairs, data sets among {tuple(IMAGE_SETS)}")
        require(self, "width", self.width > 0, "must be > 0")
        require(self, "seeds", self.seeds >= 1, "must be >= 1")
        require(self, "tsne_points", self.tsne_points >= 10, "must be >= 10 (Figure 3 embeds the runs these share)")
        for dataset, labels in self.columns:
            self.spec("meta_mixup", dataset, labels, self.seed).validate()

    def spec(self, variant: str, dataset: str, labels: int, seed: int) -> SemiMetaRunSpec:
        """One run's spec: the data set's defaults (App. C) first, then every setting the user gave."""
        gamma = (0.1 if dataset == "svhn" else 1.0) if self.method.gamma is None else self.method.gamma
        return SemiMetaRunSpec(
            method=replace(self.method, variant=variant, gamma=gamma),
            protocol=self.protocol.for_dataset(dataset),
            dataset=dataset,
            n_labeled=labels,
            n_unlabeled=self.n_unlabeled,
            n_validation=self.n_validation,
            n_test=self.n_test,
            width=self.width,
            dropout=self.dropout,
            data_seed=self.seed,
            seed=seed,
            tsne_points=self.tsne_points,
        )


PAPER = {"columns": PAPER_COLUMNS}
CPU = {
    "width": 0.125,
    "n_validation": 1000,
    "n_test": 2000,
    "tsne_points": 300,
    "protocol.steps": 2000,
    "protocol.batch_labeled": 32,
    "protocol.batch_unlabeled": 32,
    "protocol.eval_every": 100,
}
CPU_FITS = {"protocol.steps": 4000, "protocol.decay_at": (0.5, 0.7), "dropout": 0.0}
"""The `cpu` scale of Tables 1 and 4 and Figure 3 (our choice, from the pilot `pilots.PILOTS["metagrad.tab4"]`): at
`CPU`'s 2,000 steps with the paper's Dropout2d(0.5), labeled-only training ended at about 24 % error on its own
labeled images (it could not fit its labels); without dropout and over 4,000 steps, with the lr decays moved to 50 %
and 70 % so that the finished-learning rule's last 20 % of evaluations lie after them, it finished learning at
13.9 % validation error and 4.1 % labeled-set error (seed 0)."""
GPU = {**CPU, **CPU_FITS, "seeds": 5}
"""The `gpu` scale (our choice): the `cpu` scale with 5 seeds, so that a GPU window adds seeds 3 and 4 to the runs it
shares with `cpu` (same run keys). Sized by the first GPU windows (`results/windows/`): with twelve units sharing one
H100, a 4,000-step unit of Conv-Large ×0.125 took 85 s (labeled only) and 124 s (mixup only), and the meta-gradient
units had not finished at 190 s, the window's 3 minutes per unit; a wider or longer network would not finish whole
units. The paper's width and 400k steps are the `paper` preset."""
SMOKE = {
    "columns": (("fashion_mnist", 100),),
    "width": 0.0625,
    "n_unlabeled": 200,
    "n_validation": 100,
    "n_test": 100,
    "seeds": 1,
    "tsne_points": 20,
    "protocol.steps": 4,
    "protocol.batch_labeled": 16,
    "protocol.batch_unlabeled": 16,
    "protocol.eval_every": 2,
}


def unused_settings(cfg: SemiMetaConfig) -> dict[str, str]:
    """Fields these experiments do not read (`Experiment.unused`): each row of a table sets its own variant."""
    out = {"method.variant": "each row of the table or figure runs its own variant"}
    if getattr(cfg, "model", "conv_large") != "conv_large":
        out["dropout"] = f"it is Conv-Large's Dropout2d rate, and {cfg.model} has no dropout layer"
    return out


ROWS = {"metagrad.tab4": tuple(VARIANTS)}  # the variants each experiment runs (others: the two of Table 1)
BASELINE_AND_METHOD = ("labeled_only", "meta_mixup")


def jobs_of(cfg: SemiMetaConfig, variants) -> list[tuple[str, str, int]]:
    return [(v, d, n) for d, n in cfg.columns for v in variants]


def units(cfg: SemiMetaConfig, variants=BASELINE_AND_METHOD, device=None) -> list:
    """The runs of `variants` in every column, over the seeds, as run-cache units (`gradalign sweep`)."""
    from gradalign.training.semimeta import semimeta_unit

    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    return [semimeta_unit(cfg.spec(*job, seed), device) for job in jobs_of(cfg, variants) for seed in seeds]


def run_group(cfg: SemiMetaConfig, jobs: list[tuple[str, str, int]], device) -> dict[tuple, list[dict]]:
    """{(variant, data set, labels): [one run per seed]}, each from the run cache when stored."""
    from gradalign.progress import progress
    from gradalign.training.semimeta import semimeta_unit

    todo = [(job, seed) for job in jobs for seed in range(cfg.seed, cfg.seed + cfg.seeds)]
    runs: dict[tuple, list[dict]] = {}
    for job, seed in progress(todo, desc="meta-gradient runs"):
        runs.setdefault(job, []).append(semimeta_unit(cfg.spec(*job, seed), device).run())
    return runs


def still_improving(run: dict) -> bool:
    """The best test error came at the last evaluation."""
    errors = run["history"]["test_error"]
    return len(errors) > 1 and min(range(len(errors)), key=errors.__getitem__) == len(errors) - 1


def summary(runs: list[dict]) -> dict:
    """Both test errors over seeds, how many runs were still improving, the training time; for the meta variants
    the pseudo-label update averaged over each run's training (`methods.semimeta.pseudo_label_update`)."""
    out = {name: stats([r[name] for r in runs]) for name in METRICS if all(r.get(name) is not None for r in runs)}
    for name in PSEUDO_DIAGNOSTICS:
        series = [r["history"].get(name) for r in runs]
        if all(series):
            out[name] = stats([sum(s) / len(s) for s in series])
    out["still_improving"] = sum(still_improving(r) for r in runs)
    out["train_seconds"] = sum(r["train_seconds"] for r in runs)
    return out


def curves_of(runs: list[dict]) -> dict:
    h = runs[0]["history"]
    return {"step": h["step"], **{k: [r["history"][k] for r in runs] for k in ("test_error", "val_error") if k in h}}


def column_name(dataset: str, labels: int) -> str:
    return f"{dataset}_{labels}"


def ssl_scale(record: dict) -> str:
    """Data, labels, width, steps, batches and seeds against the paper's (how many runs finished learning is the
    precondition's count, which `report.scale_of` adds)."""
    from gradalign.data.image_sets import IMAGE_SETS

    cfg = record["config"]
    p, model = cfg["protocol"], MODEL_TITLES[cfg.get("model", "conv_large")]
    data = ", ".join(f"{IMAGE_SETS[d].title} {n:,} labels" for d, n in cfg["columns"])
    text = scale_text(
        (data, PAPER_DATA.get(record["id"], "SVHN 1k, CIFAR-10 4k, CIFAR-100 10k labels")),
        (f"{model} ×{cfg['width']:g}" if cfg["width"] != 1 else model, model),
        (f"{p['steps']:,} steps of {p['batch_labeled']} + {p['batch_unlabeled']}", "400,000 steps of 128 + 128"),
        (plural(cfg["seeds"], "seed"), "seeds not stated"),
    )
    if cfg["n_test"]:
        text += f"; test error on {cfg['n_test']:,} test images"
    return text


def variant_title(variant: str) -> str:
    return VARIANTS[variant][0]
