"""LGA part, §4: the semi-supervised benchmark (Figures 5-7, Table 1) on Oliver et al.'s protocol.

Every training run (data set, method settings, number of labels, seed, protocol) is stored once in the
run cache (`runcache`, kind `lga.ssl`, see `ssl_runs`); Figures 5-7 and Table 1 read the runs they need,
so runs they share train once, and an interrupted experiment resumes (within a run too, from its
checkpoint). The `paper` presets follow the protocol (WRN-28-2, 500k steps, 5 seeds); `smoke`/`cpu`
substitute Fashion-MNIST and a small CNN, and say so.
"""

from __future__ import annotations

from gradalign.data.image_sets import IMAGE_SETS
from gradalign.experiments.base import Experiment, check, outcome, plural, scale_text
from gradalign.experiments.rules import all_of, compare
from gradalign.experiments.lga.ssl_runs import (
    FIGURE_METHODS,
    RUN_VERSION,
    SSLBenchConfig,
    TableConfig,
    column_configs,
    sweep,
    unused_settings,
)

NOTEBOOK = "notebooks/lga/04_ssl_benchmark.ipynb"


def _summary(row: dict, name: str) -> dict:
    """{"mean", "std", "n"} of a stored summary's `name` ("test_error" or "test_loss") over seeds."""
    return {"mean": row[name], "std": row[f"{name}_std"], "n": row["seeds"]}


def _vs(a_row: dict, b_row: dict, names: tuple[str, str], name: str, claim: str, relation: str = "beats") -> dict:
    quantity = {"test_error": "test error", "test_loss": "test loss"}[name]
    return compare(
        _summary(a_row, name),
        _summary(b_row, name),
        relation=relation,
        higher_is_better=False,
        quantity=quantity,
        names=names,
        claim=claim,
    )


def _majority(parts: dict[str, dict], rule: str, claim: str) -> dict:
    """Passes when at least half of `parts` pass; fails beyond noise when more than half fail beyond noise."""
    wins = sum(p["passed"] for p in parts.values())
    losses = sum(not p["passed"] and not p.get("within_noise") for p in parts.values())
    out = check(2 * wins >= len(parts), {k: p["value"] for k, p in parts.items()}, rule, claim)
    out["within_noise"] = not out["passed"] and 2 * losses <= len(parts)
    return out


def _figure_checks(table: dict, labels) -> dict:
    """Figures 5-7's checks: `table` maps each method to {"by_labels": {str(n): its summary at n labels (mean and
    std over seeds of "test_error" and "test_loss", and "seeds")}}, for every label count n in `labels`."""
    from gradalign.training.ssl import TITLES

    def row(method, n):
        return table[method]["by_labels"][str(n)]

    baselines = [m for m in table if m not in ("lga", "lga_vat")]
    checks = {}
    if "lga" in table:
        claim = "LGA consistently achieves better test loss than other SSL methods"
        parts = {
            f"{n}/{m}": _vs(row("lga", n), row(m, n), ("LGA", TITLES[m]), "test_loss", claim)
            for n in labels
            for m in baselines
        }
        if parts:
            checks["lga_lowest_test_loss_vs_baselines"] = all_of(
                parts, "at every label count, LGA beats every non-LGA method: lower test loss by more than 2 SE", claim
            )
        if "supervised" in table:
            claim = "LGA improves on the supervised baseline"
            parts = {
                str(n): _vs(row("lga", n), row("supervised", n), ("LGA", "Supervised"), "test_error", claim)
                for n in labels
            }
            checks["lga_beats_supervised"] = all_of(
                parts, "at every label count, LGA beats Supervised: lower test error by more than 2 SE", claim
            )
    if {"lga", "lga_vat", "vat"} <= set(table):
        claim = "in many cases the combination achieves better performance than either method individually"
        parts = {
            str(n): all_of(
                {
                    m: _vs(row("lga_vat", n), row(m, n), ("LGA + VAT", TITLES[m]), "test_error", claim)
                    for m in ("lga", "vat")
                },
                "LGA + VAT beats both",
                claim,
            )
            for n in labels
        }
        checks["lga_vat_better_than_either"] = _majority(
            parts, "LGA + VAT beats both LGA and VAT (test error, 2 SE) at >= half of the label counts", claim
        )
    return checks


def _scope(cfg: SSLBenchConfig, paper_dataset: str) -> str:
    full = (
        cfg.model == "wrn28_2"
        and cfg.protocol.steps >= 500_000
        and cfg.seeds >= 5
        and cfg.n_pool == 0
        and cfg.n_test == 0
    )
    return "exact" if full and cfg.dataset == paper_dataset else "reduced"


def _figure(paper_dataset: str):
    def run(cfg: SSLBenchConfig, device) -> dict:
        table = sweep(cfg, device)
        curves = {m: table[m].pop("curves") for m in table}
        seconds = sum(s["train_seconds"] for row in table.values() for s in row["by_labels"].values())
        return outcome(
            _figure_checks(table, cfg.labels),
            {"table": table, "dataset": cfg.dataset, "train_seconds": seconds},
            curves,
            scope=_scope(cfg, paper_dataset),
        )

    run.__doc__ = f"Error and test loss against the number of labels ({paper_dataset} in the paper)."
    return run


def table1_checks(columns: dict, methods) -> dict[str, dict]:
    """Table 1's checks: `columns` maps each column (first: CIFAR-10's, last: SVHN's) to every method's summary
    (mean and std over seeds of "test_error", and "seeds"), over `methods`."""
    from gradalign.training.ssl import TITLES

    checks = {}
    first, second = list(columns)[0], list(columns)[-1]

    def best(col: str, method: str, claim: str, relation: str) -> dict:
        parts = {
            m: _vs(columns[col][method], columns[col][m], (TITLES[method], TITLES[m]), "test_error", claim, relation)
            for m in methods
            if m != method
        }
        word = "beats" if relation == "beats" else "is at least as good as"
        return all_of(parts, f"{TITLES[method]} {word} every other method (test error, 2 SE)", claim)

    if {"lga", "lga_vat"} <= set(methods):
        checks["lga_vat_best_first_column"] = best(
            first, "lga_vat", "LGA + VAT: 12.06 on CIFAR-10 with 4000 labels, the best of the table", "at_least"
        )
        others = [m for m in methods if m not in ("lga", "lga_vat")]
        claim = "LGA alone (12.91) beats every baseline on CIFAR-10 with 4000 labels (best baseline VAT+EntMin 13.13)"
        parts = {
            m: _vs(columns[first]["lga"], columns[first][m], ("LGA", TITLES[m]), "test_error", claim) for m in others
        }
        if parts:
            checks["lga_beats_baselines_first_column"] = all_of(
                parts, "LGA beats every baseline in the first column (test error, 2 SE)", claim
            )
    if "vat_entmin" in methods:
        checks["vat_entmin_best_second_column"] = best(
            second,
            "vat_entmin",
            "on SVHN with 1000 labels VAT+EntMin is best (5.35); LGA (7.56) trails the consistency methods",
            "at_least",
        )
    return checks


def table1(cfg: TableConfig, device) -> dict:
    """Table 1: test error of every method at one label count per column."""
    columns, curves = {}, {}
    for name, sub in column_configs(cfg):
        table = sweep(sub, device)
        (n,) = sub.labels
        columns[name] = {m: {k: v for k, v in table[m]["by_labels"][str(n)].items()} for m in cfg.methods}
        curves[name] = {m: table[m]["curves"][str(n)] for m in cfg.methods}  # the finished-learning precondition
    checks = table1_checks(columns, cfg.methods)
    scope = (
        "exact"
        if all(c[0] != "fashion_mnist" for c in cfg.columns) and _scope(cfg, cfg.columns[0][0]) == "exact"
        else "reduced"
    )
    seconds = sum(v["train_seconds"] for col in columns.values() for v in col.values())
    return outcome(checks, {"columns": columns, "train_seconds": seconds}, curves, scope=scope)


CPU = {
    "width": 32,
    "n_test": 0,
    "protocol.steps": 6000,
    "protocol.eval_every": 150,
    "protocol.lr_decay_at": 0.6,
    "methods": ["supervised", "vat", "lga", "lga_vat"],
    "seeds": 3,
    "fast.bf16": True,
    "fast.channels_last": True,
}
"""The `cpu` scale of Figures 5-7 and Table 1 (our choice, from the pilot `pilots.PILOTS["lga.fig7"]`): the book's
supervised reference protocol (a 3-block CNN at width 32, 6,000 steps, lr x 0.2 after 60 %, the full test set) with
the fast path, 3 seeds, and the four methods issue 29 lists first. At 1,000 labels every method of the pilot finished
learning. Figures 5 and 6 and Table 1 read a subset of Figure 7's runs (the same run keys)."""
SMOKE = {
    "labels": (50, 100),
    "protocol.steps": 8,
    "protocol.eval_every": 4,
    "n_validation": 200,
    "n_pool": 400,
    "n_test": 200,
    "width": 8,
    "protocol.batch_labeled": 20,
    "protocol.batch_unlabeled": 20,
}
GPU = {**CPU, "methods": list(FIGURE_METHODS)}
"""The `gpu` scale: the `cpu` scale with all seven methods, so that a GPU window adds Pseudo-Label, the Pi-model and
Mean Teacher to the runs the `cpu` preset shares with it (same run keys). Sized by the first GPU window
(`results/windows/`): with ten units sharing one H100, a 6,000-step unit of this network took 95 s (supervised) to
190 s (LGA + VAT), within the window's 3 minutes per unit; the three added methods cost less per step than VAT.
WRN-28-2 is the `paper` preset's (500k steps a run: GPU-days for a figure)."""


def _paper(dataset: str, labels, n_validation: int, families) -> dict:
    return {
        "dataset": dataset,
        "families": families,
        "labels": labels,
        "model": "wrn28_2",
        "protocol.steps": 500_000,
        "seeds": 5,
        "n_validation": n_validation,
        "n_pool": 0,
        "n_test": 0,
        "protocol.eval_every": 5000,
        "lga.alpha_w": 1e-3,
    }


LABELS_PAPER = (250, 500, 1000, 2000, 4000, 8000)
CHOICES = {
    "model": "cpu/gpu: a 3-block CNN at width 32 (32/64/128 channels, BN, leaky ReLU 0.1) for WRN-28-2, with bf16 "
    "autocast and channels-last; paper: WRN-28-2",
    "schedule": "cpu/gpu: 6,000 steps of 50 + 50 images, ramp-up over the first 40% and lr x 0.2 after 60% "
    "(Oliver's 200k and 400k of 500k; the decay moved earlier so that the finished-learning rule's last 20% of "
    "evaluations lie after it), evaluation every 150 steps",
    "data": "cpu/gpu: Fashion-MNIST, 2,000 validation images, an unlabeled pool of 10,000 (labeled included), the "
    "full test set of 10,000",
    "methods": "cpu: supervised, VAT, LGA and LGA + VAT (Pseudo-Label, the Pi-model and Mean Teacher are not run at "
    "cpu); gpu: all seven",
    "lga": "T(i) = 1, alpha_theta = 1e-3, alpha_w = 1e-2 (cpu/gpu) / 1e-3 (paper), eps_norm = 1e-3: "
    "not stated in the paper",
    "selection": "test metrics at the evaluation with the lowest validation error (Oliver et al.'s model selection)",
}
PAPER_DATA = {"lga.fig5": "CIFAR-10", "lga.fig6": "SVHN", "lga.fig7": "Fashion-MNIST", "lga.tab1": "CIFAR-10, SVHN"}
MODEL_TITLES = {"small_cnn": "a 3-block CNN", "wrn28_2": "WRN-28-2"}


def ssl_scale(record: dict) -> str:
    """Data, model, steps and seeds of a benchmark record against the paper's (500k steps, 5 trials)."""
    cfg = record["config"]
    data = sorted({c[0] for c in cfg["columns"]}) if "columns" in cfg else [cfg["dataset"]]
    text = scale_text(
        (", ".join(IMAGE_SETS[d].title for d in data), PAPER_DATA[record["id"]]),
        (MODEL_TITLES[cfg["model"]], "WRN-28-2"),
        (plural(cfg["protocol"]["steps"], "step"), "500,000 steps"),
        (plural(cfg["seeds"], "seed"), "5 seeds"),
    )
    return text


TABLE1_COLUMNS = (("fashion_mnist", "cifar", 4000, 2000), ("fashion_mnist", "svhn", 1000, 2000))
"""Table 1's columns at `cpu`/`gpu`: (data, family, labels, validation images), Figure 7's split (2,000 validation
images), so that its runs are Figure 7's."""
SHARED_RUNS = "the training runs stored once for lga.fig5, fig6, fig7 and tab1 (run cache: lga.ssl)"
FIG_NOTE = "cpu/gpu presets run on Fashion-MNIST with this figure's hyperparameter family (the paper: {})"

EXPERIMENTS = [
    Experiment(
        "lga.fig5",
        _figure("cifar10"),
        SSLBenchConfig,
        {"smoke": SMOKE, "cpu": CPU, "gpu": GPU, "paper": _paper("cifar10", LABELS_PAPER, 5000, ("cifar",))},
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note=FIG_NOTE.format("CIFAR-10"),
        choices=CHOICES,
        shares=SHARED_RUNS,
        scale=ssl_scale,
        unused=unused_settings,
    ),
    Experiment(
        "lga.fig6",
        _figure("svhn"),
        SSLBenchConfig,
        {
            "smoke": {**SMOKE, "families": ("svhn",)},
            "cpu": {**CPU, "families": ("svhn",)},
            "gpu": {**GPU, "families": ("svhn",)},
            "paper": _paper("svhn", LABELS_PAPER, 7326, ("svhn",)),
        },
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note=FIG_NOTE.format("SVHN"),
        choices=CHOICES,
        shares=SHARED_RUNS,
        scale=ssl_scale,
        unused=unused_settings,
    ),
    Experiment(
        "lga.fig7",
        _figure("fashion_mnist"),
        SSLBenchConfig,
        {
            "smoke": {**SMOKE, "families": ("cifar", "svhn")},
            "cpu": {**CPU, "families": ("cifar", "svhn")},
            "gpu": {**GPU, "families": ("cifar", "svhn")},
            "paper": _paper("fashion_mnist", LABELS_PAPER, 5000, ("cifar", "svhn")),
        },
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note="Fashion-MNIST, the paper's own data; each method takes the better of the CIFAR-10 and SVHN "
        "hyperparameter sets by validation error, as the paper did",
        choices=CHOICES,
        shares=SHARED_RUNS,
        scale=ssl_scale,
        unused=unused_settings,
    ),
    Experiment(
        "lga.tab1",
        table1,
        TableConfig,
        {
            "smoke": {**SMOKE, "columns": (("fashion_mnist", "cifar", 100, 200), ("fashion_mnist", "svhn", 50, 200))},
            "cpu": {**CPU, "columns": TABLE1_COLUMNS},
            "gpu": {**GPU, "columns": TABLE1_COLUMNS},
            "paper": {
                **_paper("cifar10", (4000,), 5000, ("cifar",)),
                "columns": (("cifar10", "cifar", 4000, 5000), ("svhn", "svhn", 1000, 7326)),
            },
        },
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note="cpu/gpu: both columns on Fashion-MNIST, with the CIFAR-10 set at 4000 labels and the SVHN set at "
        "1000 labels",
        choices=CHOICES,
        shares=SHARED_RUNS,
        scale=ssl_scale,
        unused=unused_settings,
    ),
]
