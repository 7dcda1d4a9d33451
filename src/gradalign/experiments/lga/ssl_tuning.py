"""LGA part, §4: LGA, supervised training and VAT tuned on the validation split with one budget (our study `lga.tune`;
notebook lga/04).

The paper tuned LGA "using the procedure of Oliver et al." at CIFAR-10 with 4,000 labels and SVHN with 1,000 labels
(§4) and states neither the search nor its result. Figures 5-7 here run LGA untuned (T(i) = 1, α_w = 10⁻², ε_norm =
10⁻³, the EMA decays 0.9 and 0.999) beside baselines at Oliver et al.'s tuned values, so a loss of LGA could be its
settings. This study tunes the three methods the same way (Oliver et al. tuned by random search under a fixed
budget): for each method, `candidates` settings drawn log-uniformly from `SPACES` by a seeded generator (the list
is fixed by `search_seed`), candidate 0 being the current setting, so that the search can only match or improve on
it. Each candidate is one run (seed `seed`) at the benchmark's `cpu` scale (`ssl_benchmark.CPU`) at each label count
(4,000, the paper's CIFAR-10 count, and 250), a `lga.ssl` unit built by `ssl_runs.run_unit` (candidate 0's runs are
Figure 7's seed-0 runs, the same keys), scored by its best validation error over training (the benchmark's model
selection).

The choice (`choose`): per method and label count, the candidate with the highest validation accuracy (ties: the
earlier candidate); none while any of that method's candidates is not trained. A candidate whose run diverged ranks
below every trained one and is kept as a result, never trained again (`experiments.diverged_runs`). The fairness summary
(`fairness`): whether tuning gained LGA more validation accuracy over its candidate 0 than it gained supervised training
and VAT.
The follow-on (`rerun_overrides`, `rerun_items`, `compute.lga_rerun`): Figure 7's four methods at the settings chosen at
4,000 labels, 3 seeds, at the `cpu` budget B and at B/2; it is trained after this study's record, not before.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from gradalign.config import require, resolve
from gradalign.experiments.base import Experiment, check, outcome
from gradalign.experiments.lga.ssl_benchmark import CPU, NOTEBOOK, SMOKE, _paper
from gradalign.experiments.lga.ssl_runs import RUN_VERSION, SSLBenchConfig, method_settings, run_unit

SPACES: dict[str, dict[str, tuple[float, float, str]]] = {
    "supervised": {"lr": (1e-3, 1e-2, "log")},
    "vat": {"lr": (1e-3, 1e-2, "log"), "eps": (0.5, 12.0, "log"), "weight": (0.1, 1.0, "log")},
    "lga": {
        "lr": (3e-4, 3e-3, "log"),
        "alpha_w": (1e-3, 1e-1, "log"),
        "eps_norm": (1e-6, 1e-2, "log"),
        "labeled_weight": (0.3, 3.0, "log"),
        "grad_ema_decay": (0.7, 0.99, "log1m"),
        "norm_ema_decay": (0.99, 0.9999, "log1m"),
    },
}
"""Each method's search space, (low, high, how drawn), every range our choice (the paper states none): log-uniform
around the current value ("log"), or log-uniform in 1 − decay ("log1m": the EMA decays, read as averaging windows of
about 3 to 100 steps around 0.9's 10, and 100 to 10,000 around 0.999's 1,000). Supervised: Adam's lr around Oliver et
al.'s 3·10⁻³ (the runs have no weight decay); VAT: its lr, ε (around both of Oliver et al.'s values, 6 and 1) and
weight (around 0.3); LGA: α_θ, α_w, ε_norm, a constant T(i) and the two EMA decays."""
DIGITS = 3  # significant digits of a drawn value (our choice): readable run keys
SYMBOLS = {
    "lr": "lr",
    "eps": "ε",
    "weight": "weight",
    "alpha_w": "α_w",
    "eps_norm": "ε_norm",
    "labeled_weight": "T(i)",
    "grad_ema_decay": "EMA(g_ℓ) decay",
    "norm_ema_decay": "EMA(v⁴) decay",
}
"""How the view names each searched setting (LGA's lr is α_θ)."""


@dataclass(frozen=True)
class TuneConfig(SSLBenchConfig):
    """The benchmark's config, one seed, and the search: `candidates` per method (candidate 0: the current setting),
    drawn with `search_seed`."""

    methods: tuple[str, ...] = ("supervised", "vat", "lga")
    labels: tuple[int, ...] = (250, 4000)
    candidates: int = 8  # the budget per method, the same for every method (our choice)
    search_seed: int = 0

    def validate(self) -> None:
        super().validate()
        require(
            self,
            "methods",
            set(self.methods) <= set(SPACES) and {"lga", "supervised"} <= set(self.methods),
            f"must be a subset of {tuple(SPACES)} with lga and supervised (the comparison)",
        )
        require(self, "seeds", self.seeds == 1, "must be 1 (one run per candidate)")
        require(self, "families", len(self.families) == 1, "must name one family (candidate 0's settings)")
        require(self, "candidates", self.candidates >= 2, "must be >= 2 (candidate 0 and at least one draw)")
        require(self, "search_seed", self.search_seed >= 0, "must be >= 0")
        require(self, "tuned", self.tuned == (), "must be empty: the study sets each candidate's own")


def _draw(rng: random.Random, low: float, high: float, how: str) -> float:
    import math

    if how == "log1m":
        return round(1 - _draw(rng, 1 - high, 1 - low, "log"), 12)
    return float(f"{math.exp(rng.uniform(math.log(low), math.log(high))):.{DIGITS}g}")


def candidates(cfg: TuneConfig, method: str) -> list[tuple[tuple[str, str, float], ...]]:
    """Candidate settings of `method` as `tuned` triples (method, setting, value): candidate 0 is () (the current
    setting); the others are drawn, in order, by a generator seeded with `search_seed` and the method's name."""
    rng = random.Random(f"lga.tune/{cfg.search_seed}/{method}")
    out = [()]
    for _ in range(cfg.candidates - 1):
        out.append(tuple((method, name, _draw(rng, *space)) for name, space in SPACES[method].items()))
    return out


def candidate_config(cfg: TuneConfig, changes: tuple) -> SSLBenchConfig:
    """The benchmark config a candidate's runs are built from (its run keys are the benchmark's)."""
    base = {name: getattr(cfg, name) for name in SSLBenchConfig.__dataclass_fields__}
    return SSLBenchConfig(**{**base, "tuned": changes, "seeds": 1})


def candidate_values(cfg: TuneConfig, method: str, changes: tuple) -> dict[str, float]:
    """The searched settings of a candidate as its runs train with them (candidate 0: the current ones)."""
    settings = method_settings(candidate_config(cfg, changes), method, cfg.families[0])
    return {name: getattr(settings, name) for name in SPACES[method]}


def candidate_unit(cfg: TuneConfig, method: str, i: int, changes: tuple, n: int):
    """Candidate i's run at n labels: the benchmark's unit (its key), its label naming the candidate."""
    unit = run_unit(candidate_config(cfg, changes), cfg.dataset, cfg.families[0], method, n, cfg.seed)
    return replace(unit, label=f"{unit.label}, candidate {i}")


def tune_units(cfg: TuneConfig) -> list:
    """Every candidate's run at every label count, method by method (candidate 0's are Figure 7's seed-0 runs)."""
    return [
        candidate_unit(cfg, method, i, changes, n)
        for method in cfg.methods
        for i, changes in enumerate(candidates(cfg, method))
        for n in cfg.labels
    ]


DIVERGED = "diverged"  # a candidate's validation accuracy when its run diverged: ranked below every trained one


def choose(val_acc: list[float | str | None]) -> int | None:
    """The candidate with the highest validation accuracy, the earlier one on a tie, a diverged run (`DIVERGED`)
    below every other; None while any is not trained (None), or when every one diverged."""
    if not val_acc or any(v is None for v in val_acc):
        return None
    scored = [v if isinstance(v, (int, float)) else float("-inf") for v in val_acc]
    best = max(range(len(scored)), key=lambda i: (scored[i], -i))
    return None if scored[best] == float("-inf") else best


def fairness(val_acc: dict[str, dict[str, list[float | None]]]) -> dict[str, dict]:
    """Per label count: each method's gain from tuning (its chosen candidate's validation accuracy − candidate 0's,
    points) and whether LGA's is larger than every other method's; "not trained" while a choice is missing."""
    out = {}
    for n in next(iter(val_acc.values())):
        gains = {}
        for method, by_labels in val_acc.items():
            i = choose(by_labels[n])
            first = by_labels[n][0]
            gains[method] = None if i is None or first == DIVERGED else round(by_labels[n][i] - first, 2)
        others = [g for m, g in gains.items() if m != "lga"]
        known = gains.get("lga") is not None and all(g is not None for g in others)
        out[n] = {"gains": gains, "lga_gains_most": all(gains["lga"] > g for g in others) if known else "not trained"}
    return out


def tune_checks(chosen: dict[str, dict[str, float]], labels) -> dict:
    """`chosen[method][str(n)]` = the chosen candidate's validation accuracy at n labels: with every method tuned the
    same way, LGA's is higher than supervised training's at every label count (one run each: a screening rule)."""
    values = {str(n): {m: chosen[m][str(n)] for m in ("lga", "supervised")} for n in labels}
    known = all(isinstance(a, (int, float)) for v in values.values() for a in v.values())  # None: every one diverged
    passed = known and all(v["lga"] > v["supervised"] for v in values.values())
    return {
        "tuned_lga_beats_tuned_supervised_validation": check(
            passed,
            values,
            "at every label count, LGA's tuned candidate has a higher validation accuracy than supervised training's "
            "tuned candidate (one run each, the same budget of candidates)",
            "LGA improves on the supervised baseline (§4), each method tuned on validation as the paper tuned LGA",
        )
    }


def rerun_overrides(chosen: dict[str, dict[str, float]]) -> dict:
    """Figure 7's overrides at the chosen settings (`chosen[method]` = `candidate_values` of its choice at 4,000
    labels): supervised, VAT and LGA at theirs; LGA + VAT at LGA's, with VAT's ε and weight (our choice, as the
    benchmark gives LGA + VAT VAT's values)."""
    tuned = [(m, name, float(v)) for m in ("supervised", "vat", "lga") for name, v in chosen[m].items()]
    tuned += [("lga_vat", name, float(v)) for name, v in chosen["lga"].items()]
    tuned += [("lga_vat", f"vat.{name}", float(chosen["vat"][name])) for name in ("eps", "weight")]
    return {"tuned": tuned}


def rerun_items(full: dict) -> list[tuple[str, str, dict]]:
    """The follow-on backlog items from Figure 7's overrides at the chosen settings (`rerun_overrides`): Figure 7 at
    the `cpu` scale (3 seeds, the four methods) at the budget B and at B/2 (the schedule compressed into half the
    steps, as `claim_budget.half_overrides`). `compute.lga_rerun.items` reads them from the study's record."""
    return [("lga.fig7", "cpu", full), ("lga.fig7", "cpu", {**full, "protocol.steps": CPU["protocol.steps"] // 2})]


def _table(cfg: TuneConfig, read) -> tuple[dict, dict]:
    """(rows: per method, its candidates' settings and validation accuracy per label count (None: not trained);
    val_acc[method][str(n)]: those accuracies in candidate order), `read(unit)` giving a run's value or None."""
    rows, val_acc = {}, {}
    for method in cfg.methods:
        rows[method], val_acc[method] = [], {str(n): [] for n in cfg.labels}
        for i, changes in enumerate(candidates(cfg, method)):
            row = {"candidate": i, "settings": candidate_values(cfg, method, changes), "val_acc": {}}
            for n in cfg.labels:
                value = read(candidate_unit(cfg, method, i, changes, n))
                acc = (
                    None
                    if value is None
                    else DIVERGED
                    if DIVERGED in value
                    else round(100 - value["best_val_error"], 2)
                )
                row["val_acc"][str(n)] = acc
                val_acc[method][str(n)].append(acc)
            rows[method].append(row)
    return rows, val_acc


def choices(cfg: TuneConfig, rows: dict, val_acc: dict) -> dict[str, dict[str, dict | None]]:
    """Per method and label count: {"candidate", "settings", "val_acc"} of the choice, or None (not all trained)."""
    out = {}
    for method in cfg.methods:
        out[method] = {}
        for n, accs in val_acc[method].items():
            i = choose(accs)
            out[method][n] = None if i is None else {**rows[method][i], "val_acc": accs[i]}
    return out


def tune(cfg: TuneConfig, device) -> dict:
    """Every candidate's runs (trained where not stored), the choice, the fairness summary and the follow-on."""
    from gradalign.progress import progress

    from gradalign.errors import DivergenceError
    from gradalign.experiments.diverged_runs import diverged, keep_diverged

    units = {unit.key: unit for unit in tune_units(cfg)}
    stopped, values = diverged("lga.tune"), {}
    for key, unit in progress(list(units.items()), desc="lga.tune candidates"):
        try:
            values[key] = {DIVERGED: stopped[key]["why"]} if key in stopped else unit.run()
        except DivergenceError as err:  # a result: the candidate ranks last (`choose`), and it is not trained again
            values[key] = {DIVERGED: keep_diverged("lga.tune", unit, str(err), device)["why"]}
    rows, val_acc = _table(cfg, lambda unit: values[unit.key])
    chosen = choices(cfg, rows, val_acc)
    accs = {m: {n: c and c["val_acc"] for n, c in by.items()} for m, by in chosen.items()}  # None: all diverged
    at = str(max(cfg.labels))
    complete = set(cfg.methods) == set(SPACES) and all(chosen[m][at] for m in cfg.methods)
    metrics = {
        "rows": rows,
        "chosen": chosen,
        "fairness": fairness(val_acc),
        "rerun": rerun_overrides({m: chosen[m][at]["settings"] for m in cfg.methods}) if complete else None,
        "train_seconds": sum(v.get("train_seconds", 0.0) for v in values.values()),
    }
    curves = {
        unit.label: values[key]["history"]["val_error"] for key, unit in units.items() if DIVERGED not in values[key]
    }
    return outcome(tune_checks(accs, cfg.labels), metrics, curves, scope="reduced")


PRESETS = {
    "smoke": {**SMOKE, "labels": (50, 100), "candidates": 2},
    # cpu: 3 methods x 8 candidates x 2 label counts = 48 runs of 6,000 steps, candidate 0's 6 read from Figure 7's
    # committed runs; the 42 left are sized from the committed lga.ssl runs' wall times (`compute.tune_cost`): about
    # 6 hours of one CPU thread, over the two-core budget: a GPU window's (`pilots.OVER_CPU_BUDGET`)
    "cpu": {**CPU, "methods": ("supervised", "vat", "lga"), "labels": (250, 4000), "seeds": 1},
    "gpu": {**CPU, "methods": ("supervised", "vat", "lga"), "labels": (250, 4000), "seeds": 1},
    "paper": {**_paper("cifar10", (4000,), 5000, ("cifar",)), "seeds": 1, "methods": ("supervised", "vat", "lga")},
}


def cpu_config(overrides: dict | None = None) -> TuneConfig:
    return resolve(TuneConfig, PRESETS, "cpu", overrides)


def tuning_view(root=None):
    """The notebook's view, from committed runs only (it never trains): a DataFrame of every candidate (method,
    candidate, its settings, the validation accuracy at each label count or "not trained", "chosen" marks), with
    the answer in words as `attrs["answer"]`. `root`: the results folder (default: the project's)."""
    import pandas as pd

    from gradalign.store.run_unit import read_entry
    from gradalign.training.ssl import TITLES
    from gradalign.store.store_root import results_root

    from gradalign.experiments.diverged_runs import diverged

    cfg, folder, stopped = cpu_config(), (root or results_root()) / "runs", diverged("lga.tune", root)

    def read(unit):
        entry = read_entry(folder, unit)
        return entry["value"] if entry else {DIVERGED: stopped[unit.key]["why"]} if unit.key in stopped else None

    rows, val_acc = _table(cfg, read)
    chosen = choices(cfg, rows, val_acc)
    table = []
    for method, cands in rows.items():
        for row in cands:
            entry = {"method": TITLES[method], "candidate": row["candidate"]}
            names = {**SYMBOLS, "lr": "α_θ" if method == "lga" else "lr"}
            entry["settings"] = ", ".join(f"{names[k]} {_short(v)}" for k, v in row["settings"].items())
            for n, acc in row["val_acc"].items():
                shown = "not trained" if acc is None else acc if acc == DIVERGED else f"{acc:.2f}"
                entry[f"validation accuracy, {int(n):,} labels (%)"] = shown
                pick = chosen[method][n]
                entry[f"chosen at {int(n):,}"] = "yes" if pick and pick["candidate"] == row["candidate"] else ""
            table.append(entry)
    frame = pd.DataFrame(table)
    frame.attrs["answer"] = _answer(cfg, val_acc)
    return frame


def _short(value: float) -> str:
    """A drawn value for the page: 3 significant figures, in powers of ten below 0.01 (no long decimal runs); a value
    in (0.9, 1), an EMA decay, to 3 significant figures of 1 − decay: 0.9694, and "1 − 1.53e-04" for 0.999847 (3
    figures of "1" hid the drawn window), its spaces narrow and unbreakable (U+202F) so that a phone's narrow cell
    does not wrap it."""
    if 0.999 < value < 1:
        return f"1\u202f−\u202f{1 - value:.2e}"
    if 0.9 < value < 1:
        return f"{value:.{2 - math.floor(math.log10(1 - value))}f}".rstrip("0")
    return f"{value:.2e}" if value and abs(value) < 1e-2 else f"{value:.3g}"


def _answer(cfg: TuneConfig, val_acc: dict) -> str:
    from gradalign.training.ssl import TITLES

    trained = sum(v is not None for by in val_acc.values() for accs in by.values() for v in accs)
    total = sum(len(accs) for by in val_acc.values() for accs in by.values())
    fair = fairness(val_acc)
    if any(f["lga_gains_most"] == "not trained" for f in fair.values()):
        return (
            f"Not answered yet: {trained} of {total} candidate runs are trained (a GPU window trains them). Until then "
            "Figures 5-7 compare an untuned LGA with baselines at Oliver et al.'s tuned settings."
        )
    parts = []
    for n, f in fair.items():
        gains = ", ".join(f"{TITLES[m]} {g:+.2f}" for m, g in f["gains"].items())
        word = "more" if f["lga_gains_most"] else "not more"
        parts.append(f"at {int(n):,} labels tuning gained LGA {word} than the others ({gains} points of validation)")
    return "With the same budget of candidates for every method, " + "; ".join(parts) + "."


EXPERIMENTS = [
    Experiment(
        "lga.tune",
        tune,
        TuneConfig,
        PRESETS,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note="cpu: the benchmark's cpu scale on Fashion-MNIST, one seed per candidate, 8 candidates per method",
        choices={
            "search": "random search (Oliver et al.'s procedure): 8 candidates per method, candidate 0 the current "
            "setting, the rest log-uniform over ranges of our choice around it (`ssl_tuning.SPACES`)",
            "selection": "each run's lowest validation error over training (the benchmark's model selection); per "
            "method and label count the best candidate, ties to the earlier one",
            "rerun": "Figure 7 at the settings chosen at 4,000 labels, 3 seeds, at B and B/2, after this study",
        },
    ),
]
