"""SGR part, λ at the full budget (our study `sgr.lamfull`, issue 46 item 1; notebook sgr/02).

Tables 3, 4, 6 and Figures 2-4 run SGR at λ = 10³ with Algorithm 1's mean reduction, the choice of an 80-step,
one-seed pilot (`sgr.lam`) whose rule ranks "the term acts" before accuracy. At 60 epochs SGR then loses to
layer-wise training on ResNet-32 (−5.90, 95 % interval [−7.29, −4.51]) and is within noise of it on PlainNet-32 (−3.32,
[−6.75, +0.12]; Table 3's `cpu` record), so "SGR does not help" and "λ = 10³ over-regularises" are not yet told
apart. This study trains SGR at four readings of λ at Table 3's `cpu` scale (K = 16, the same images, seeds and
schedule):

- λ = 1 with Algorithm 1's mean (`nn.MSELoss()`): App. E's setting, read as its code has it;
- λ = 1 with Eq. 6's sum over features (‖·‖²): the paper's λ read at face value;
- λ = 10² and 10³ with the mean (10³: Table 3's runs, read from the run cache, not trained again).

Two steps, so that the choice is never made on the test split:

1. **The choice, on validation.** One run per reading and network (seed `seed`), scored on `validation` training
   images held out from its training subset, at the full budget; the reading with the highest validation accuracy
   is chosen for each network (`choose_reading`; ties: the smaller λ). At a reading other than Table 3's, that run
   is the first seed's comparison run, scoring the held-out images besides the test split
   (`training.local_heldout`: the same training, bit for bit); Table 3's reading, whose runs are committed without
   them, gets a run of its own.
2. **The comparison, on test.** Every reading at `seeds` seeds against Table 3's layer-wise runs (the same run keys):
   SGR − layer-wise with Welch's interval and decision (`rules.decide`), and the term ratio (SGR's term at the last
   epoch over layer-wise's, in the reading's reduction, as `sgr.validity`'s mechanism precondition measures it).

The claim checked (ours): at the reading chosen on validation, SGR beats layer-wise training (Table 3: 85.65 vs
84.49 % on ResNet-32, 81.67 vs 80.66 % on PlainNet-32); the mechanism precondition reads the chosen reading's term
ratio. At half the epochs the study is given B's choice (`half_budget`, `chosen`): it trains no choice run and only
the chosen readings' SGR runs (layer-wise's and 10³'s are Table 3's), and once they are committed the claim is decided
at both budgets (`records.assess`) for the same reading. A choice run that diverges scores chance and is kept as a
result (`choice`, `experiments.diverged_runs`).
If the reading chosen on validation is not Table 3's and SGR beats layer-wise there at both budgets with its term
acting, Tables 3 and 6 are to be rerun at it (`book.lambda_words`); a win at a reading validation did not choose, or
at the full budget only, is shown as what it is and grounds no rerun (the test split would then have chosen λ).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from gradalign.config import require
from gradalign.experiments.base import Experiment, never_used, outcome
from gradalign.experiments.rules import compare, decide, mechanism_active, sig
from gradalign.experiments.sgr.local_bp import TABLE3_CPU, TABLE3_PRESETS, Table3Config
from gradalign.experiments.sgr.local_runs import CALIBRATED, curves_of, run_group, scope, summary_with_values
from gradalign.training.local import RUN_VERSION

NOTEBOOK = "notebooks/sgr/02_local_bp.ipynb"
ACTIVE_RATIO = 0.5  # the term acts: SGR's at the end <= 0.5 x layer-wise training's (`sgr.validity`)
NETWORKS = {"resnet32": "ResNet-32", "plainnet32": "PlainNet-32"}
PAPER = {"resnet32": (85.65, 84.49), "plainnet32": (81.67, 80.66)}  # Table 3: SGR, layer-wise (K = 16, CIFAR-10)


def reading_name(reduction: str, lam: float) -> str:
    return f"{reduction} λ={lam:g}"


@dataclass(frozen=True)
class LambdaStudyConfig(Table3Config):
    """Table 3's config, SGR at each reading of λ and layer-wise, plus the held-out images of the choice."""

    methods: tuple[str, ...] = ("layerwise", "sgr")
    mean_lams: tuple[float, ...] = (1.0, 100.0, 1000.0)  # λ with Algorithm 1's mean
    sum_lams: tuple[float, ...] = (1.0,)  # λ with Eq. 6's sum over features
    validation: int = 1000  # held-out training images scoring the choice's runs (our choice)
    chosen: tuple[tuple[str, str], ...] = ()  # (network, reading): the choice given, not made (the study at B/2)

    def validate(self) -> None:
        super().validate()
        require(self, "methods", self.methods == ("layerwise", "sgr"), "must be ('layerwise', 'sgr')")
        require(self, "mean_lams", all(lam > 0 for lam in self.mean_lams), "must be > 0")
        require(self, "sum_lams", all(lam > 0 for lam in self.sum_lams), "must be > 0")
        require(self, "mean_lams", len(self.mean_lams) + len(self.sum_lams) >= 2, "with sum_lams: at least 2 readings")
        require(self, "validation", self.validation >= 1, "must be >= 1 (the choice is made on it)")
        names = {reading_name(*r) for r in self.readings()}
        given = dict(self.chosen)
        require(
            self,
            "chosen",
            not self.chosen or (sorted(given) == sorted(self.networks) and set(given.values()) <= names),
            f"must give one reading of {sorted(names)} to each network, or nothing (the choice is then made)",
        )

    def chosen_readings(self) -> dict[str, tuple[str, float]]:
        """Network -> its given reading as (reduction, λ) ({} when the choice is made on validation)."""
        by_name = {reading_name(*r): r for r in self.readings()}
        return {net: by_name[name] for net, name in self.chosen}

    def readings(self) -> list[tuple[str, float]]:
        return [("mean", lam) for lam in self.mean_lams] + [("sum", lam) for lam in self.sum_lams]

    def table3(self) -> Table3Config:
        """Table 3's config (its λ, its run keys): layer-wise's runs and SGR's at the calibrated reading."""
        base = {f.name: getattr(self, f.name) for f in fields(Table3Config)}
        return Table3Config(**base | CALIBRATED)

    def at(self, reduction: str, lam: float) -> Table3Config:
        """SGR's config at one reading: Table 3's with that λ and reduction."""
        return replace(self.table3(), lam=lam, reduction=reduction)

    def choice_spec(self, network: str, reduction: str, lam: float):
        """The choice's run of Table 3's reading: seed `seed` at the full budget, scored on the held-out images
        (Table 3's runs are committed without them)."""
        spec = self.at(reduction, lam).spec(network, "sgr", self.modules, self.datasets[0], self.seed)
        return replace(spec, validation=self.validation, n_test=0)

    def sgr_units(self, network: str, reduction: str, lam: float, device=None) -> list:
        """SGR's comparison runs at one reading, a unit per seed. Where the choice is made (no `chosen`), the first
        seed's run at a reading other than Table 3's also scores the held-out images (`training.local_heldout`):
        it is that reading's choice run too, the same training with one more evaluation."""
        from gradalign.training.local import local_unit
        from gradalign.training.local_heldout import heldout_unit

        cfg, d = self.at(reduction, lam), self.datasets[0]
        specs = [cfg.spec(network, "sgr", self.modules, d, s) for s in range(self.seed, self.seed + self.seeds)]
        scored = not self.chosen and not is_table3(reduction, lam) and self.n_train > 0  # the whole split: no held-out
        return [
            heldout_unit(spec, self.validation, device) if scored and i == 0 else local_unit(spec, device)
            for i, spec in enumerate(specs)
        ]


def is_table3(reduction: str, lam: float) -> bool:
    """Whether a reading is Table 3's own (its runs committed, without held-out scores)."""
    return (reduction, lam) == (CALIBRATED["reduction"], CALIBRATED["lam"])


def choose_reading(val_acc: dict[str, float]) -> str:
    """The reading (its name) with the highest validation accuracy; ties: the smaller λ, then the mean."""
    order = {name: (-acc, float(name.split("=")[1]), name.startswith("sum")) for name, acc in val_acc.items()}
    return min(order, key=order.__getitem__)


def input_features(cfg: LambdaStudyConfig, network: str) -> list[int]:
    """D_k, the features of module k's input for k = 2 … K (what the sum reduction sums over), from one forward
    pass of the network on a zero image."""
    import torch

    from gradalign.data.image_sets import image_set_info
    from gradalign.training.local import build_split_network

    info = image_set_info(cfg.datasets[0])
    spec = cfg.table3().spec(network, "sgr", cfg.modules, cfg.datasets[0], cfg.seed)
    _, modules, _ = build_split_network(spec, info)
    h, features = torch.zeros(1, info.channels, info.image_size, info.image_size), []
    with torch.no_grad():
        for module in modules:
            features.append(h[0].numel())
            h = module.eval()(h)
    return features[1:]


def term_ratio(sgr_runs: list[dict], layerwise_runs: list[dict], features: list[int], reduction: str) -> float | None:
    """SGR's term at the last epoch (mean over modules 2 … K and seeds, in its own reduction) over layer-wise
    training's, converted to that reduction module by module (× D_k for the sum)."""
    sgr = [r["history"]["sgr"][-1] for r in sgr_runs if r["diverged"] is None]
    ref = []
    for r in (r for r in layerwise_runs if r["diverged"] is None):
        per_module = r["history"]["sgr_by_module"][-1][1:]
        ref.append(sum(v * (d if reduction == "sum" else 1) for v, d in zip(per_module, features)) / len(features))
    if not sgr or not ref or not sum(ref):
        return None
    return sig((sum(sgr) / len(sgr)) / (sum(ref) / len(ref)))


def reading_row(sgr: list[dict], layerwise: list[dict], features: list[int], reduction: str) -> dict:
    """One reading's row on one network: SGR's and layer-wise's final test accuracies over seeds, SGR − layer-wise
    (`rules.decide`) and the term ratio."""
    row = {"sgr": summary_with_values(sgr), "layerwise": summary_with_values(layerwise)}
    row["difference"] = decide(row["sgr"], row["layerwise"], higher_is_better=True)
    row["term_ratio"] = term_ratio(sgr, layerwise, features, reduction)
    return row


def lambda_checks(rows: dict[str, dict], chosen: dict[str, str], modules: int) -> dict:
    """`rows[network][reading]` = {"sgr": summary, "layerwise": summary, ...}; `chosen[network]` = the reading chosen
    on validation: SGR at it beats layer-wise, on every network."""
    checks = {}
    for net, reading in chosen.items():
        ours, theirs = PAPER[net]
        checks[f"sgr_beats_layerwise_{net}"] = compare(
            rows[net][reading]["sgr"],
            rows[net][reading]["layerwise"],
            relation="beats",
            higher_is_better=True,
            quantity="final test accuracy",
            names=(f"SGR at {reading} (chosen on validation)", "layer-wise"),
            claim=f"SGR outperforms layer-wise training of {NETWORKS[net]} at K = {modules} (Table 3, K = 16: {ours} "
            f"vs {theirs}), at the λ chosen on validation",
        )
    return checks


def lambda_mechanism(rows: dict[str, dict], chosen: dict[str, str]) -> dict:
    """The mechanism precondition at the chosen reading: SGR's term ratio at most `ACTIVE_RATIO` on every network."""
    values = {net: rows[net][reading]["term_ratio"] for net, reading in chosen.items()}
    ok = all(v is not None and v <= ACTIVE_RATIO for v in values.values())
    return mechanism_active(
        ok,
        values,
        f"SGR's term at the last epoch <= {ACTIVE_RATIO:g} x layer-wise training's, at the reading chosen on "
        "validation, on every network",
        "SGR's term fell well below that of training without it",
    )


def choice(cfg: LambdaStudyConfig, device) -> tuple[dict, dict[str, list[str]]]:
    """Validation accuracy of every reading's choice run, per network, and the readings whose run diverged, per
    network: a diverged run scores chance (as a comparison run does) and is kept as a result (`diverged_runs`),
    never trained again, so that one divergence cannot leave the choice unmade."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.errors import DivergenceError
    from gradalign.experiments.diverged_runs import diverged, keep_diverged
    from gradalign.progress import progress
    from gradalign.training.local import local_unit

    stopped, failed = diverged("sgr.lamfull"), {net: [] for net in cfg.networks}
    chance = round(100.0 / image_set_info(cfg.datasets[0]).num_classes, 2)
    val_acc = {net: {} for net in cfg.networks}
    for net, (reduction, lam) in progress(
        [(n, r) for n in cfg.networks for r in cfg.readings()], desc="λ study: the choice"
    ):
        name = reading_name(reduction, lam)
        if not is_table3(reduction, lam) and cfg.n_train > 0:  # the first seed's comparison run (a divergence: chance)
            value = cfg.sgr_units(net, reduction, lam, device)[0].run()
            val_acc[net][name] = round(value["final_val_acc"], 2)
            failed[net] += [name] if value["diverged"] is not None else []
            continue
        unit = local_unit(cfg.choice_spec(net, reduction, lam), device)
        if unit.key not in stopped:
            try:
                val_acc[net][name] = round(unit.run()["final_test_acc"], 2)
                continue
            except DivergenceError as err:
                stopped[unit.key] = keep_diverged("sgr.lamfull", unit, str(err), device)
        val_acc[net][name] = chance
        failed[net].append(name)
    return val_acc, failed


def lambda_study(cfg: LambdaStudyConfig, device) -> dict:
    """The choice on validation (or the one given, `chosen`: the study at half its budget reads B's), then every
    reading against layer-wise training on test (only the given ones when the choice is given)."""
    given = cfg.chosen_readings()
    if given:
        val_acc, failed = "given: the choice made at the full budget", {}
        chosen = {net: reading_name(*r) for net, r in given.items()}
    else:
        val_acc, failed = choice(cfg, device)
        chosen = {net: choose_reading(accs) for net, accs in val_acc.items()}
    d = cfg.datasets[0]
    layerwise = run_group(cfg.table3(), [(n, "layerwise", cfg.modules, d) for n in cfg.networks], device)
    features = {net: input_features(cfg, net) for net in cfg.networks}
    rows, curves, seconds = {}, {}, 0.0
    for reduction, lam in cfg.readings():
        name = reading_name(reduction, lam)
        nets = [n for n in cfg.networks if not given or given[n] == (reduction, lam)]
        if not nets:
            continue
        for net in nets:
            sgr = [unit.run() for unit in cfg.sgr_units(net, reduction, lam, device)]
            ref = layerwise[(net, "layerwise", cfg.modules, d)]
            row = reading_row(sgr, ref, features[net], reduction)
            rows.setdefault(net, {})[name] = row
            curves[f"{d}/{net}/sgr/{name}"] = curves_of(sgr)
            seconds += row["sgr"]["train_seconds"]
    for net in cfg.networks:
        ref = layerwise[(net, "layerwise", cfg.modules, d)]
        curves[f"{d}/{net}/layerwise"] = curves_of(ref)
        seconds += sum(r["train_seconds"] for r in ref)
    metrics = {
        "rows": rows,
        "validation_acc": val_acc,
        "choice_diverged": failed,
        "chosen": chosen,
        "table3_reading": reading_name(CALIBRATED["reduction"], CALIBRATED["lam"]),
        "modules": cfg.modules,
        "mechanism": lambda_mechanism(rows, chosen),
        "train_seconds": seconds,
    }
    return outcome(lambda_checks(rows, chosen, cfg.modules), metrics, curves, scope=scope(cfg, ("cifar10",)))


def choice_units(cfg: LambdaStudyConfig) -> list:
    """The runs the choice reads (none where it is given): Table 3's reading's own choice runs, then the other
    readings' first seeds, which score the held-out images."""
    from gradalign.training.local import local_unit
    from gradalign.training.local_heldout import RUN_KIND as HELDOUT

    if cfg.chosen_readings():
        return []
    table3 = [r for r in cfg.readings() if is_table3(*r) or not cfg.n_train]  # own choice runs
    own = [local_unit(cfg.choice_spec(n, *r)) for n in cfg.networks for r in table3]
    return own + [u for r in cfg.readings() for n in cfg.networks for u in cfg.sgr_units(n, *r) if u.kind == HELDOUT]


def committed_choice(cfg: LambdaStudyConfig) -> dict | None:
    """The choice as the record will make it, from the committed runs, read and never trained: {"validation_acc",
    "choice_diverged", "chosen"} once every run it reads is committed (or kept as diverged); None before that."""
    from gradalign.experiments.diverged_runs import diverged
    from gradalign.store.run_unit import committed_runs, read_entry
    from gradalign.store.store_root import results_root

    folder, kept = results_root() / "runs", diverged("sgr.lamfull")
    needed = choice_units(cfg)
    if not needed or any(u.key not in kept and read_entry(folder, u) is None for u in needed):
        return None
    with committed_runs(folder, write=False):
        val_acc, failed = choice(cfg, "cpu")
    chosen = {net: choose_reading(accs) for net, accs in val_acc.items()}
    return {"validation_acc": val_acc, "choice_diverged": failed, "chosen": chosen}


def units(cfg: LambdaStudyConfig) -> list:
    """The choice's runs, layer-wise's (Table 3's) and SGR's at every reading (λ = 10³'s are Table 3's)."""
    from gradalign.experiments.sgr.local_runs import group_units
    from gradalign.training.local_heldout import RUN_KIND as HELDOUT

    d, given = cfg.datasets[0], cfg.chosen_readings()
    sgr = [u for r in cfg.readings() for n in cfg.networks if not given or given[n] == r for u in cfg.sgr_units(n, *r)]
    layerwise = group_units(cfg.table3(), [(n, "layerwise", cfg.modules, d) for n in cfg.networks])
    return choice_units(cfg) + layerwise + [u for u in sgr if u.kind != HELDOUT]


def half_budget(record: dict) -> dict:
    """What the study at half its budget adds to halving it (`Experiment.half_budget`): B's choice, given, so that
    B/2 compares the same reading (a choice made again at B/2 could differ under the same check's name) and trains
    no choice run and no other reading."""
    return {"chosen": [[net, name] for net, name in record["metrics"]["chosen"].items()]}


PRESETS = {
    "smoke": {**TABLE3_PRESETS["smoke"], "methods": ("layerwise", "sgr"), "validation": 128, "mean_lams": (1.0, 1e3)},
    # cpu: Table 3's cpu scale (60 epochs, 3 seeds). 20 runs beyond Table 3's at B (Table 3's reading's 2 choice
    # runs, SGR's 18 at the three new readings, whose first seeds are their choice runs), each 20 to 45 min of one
    # CPU thread where Table 3's SGR runs trained, 55 to 70 min on an AVX2 EPYC (2026-11-28/29): over the two-core
    # budget, a GPU window's too (`pilots.OVER_CPU_BUDGET`); at B/2 only the chosen readings' (at most 6).
    # The paper preset trains the whole split (n_train = 0): nothing is held out after it, so every reading there
    # gets its own choice run.
    "cpu": {**TABLE3_CPU, "methods": ("layerwise", "sgr")},
    "gpu": {**TABLE3_PRESETS["gpu"], "methods": ("layerwise", "sgr")},
    "paper": {**TABLE3_PRESETS["paper"], "methods": ("layerwise", "sgr")},
}

EXPERIMENTS = [
    Experiment(
        "sgr.lamfull",
        lambda_study,
        LambdaStudyConfig,
        PRESETS,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        unused=never_used("each reading sets its own λ and reduction (`mean_lams`, `sum_lams`)", "lam", "reduction"),
        half_budget=half_budget,
        note="cpu: Table 3's cpu scale, SGR at four readings of λ against layer-wise training, the reading chosen on "
        "held-out training images",
        choices={
            "readings": "λ = 1 with Algorithm 1's mean (App. E), λ = 1 with Eq. 6's sum, λ = 10² and 10³ with the mean "
            "(10³: Table 3's runs)",
            "choice": "one run per reading and network (the first seed) at the full budget, scored on 1,000 training "
            "images held out from its training subset; the highest validation accuracy wins (ties: the smaller λ). "
            "Outside Table 3's reading that run is the first seed's comparison run, scoring both splits",
            "question": "ours: whether any reading of λ makes SGR beat layer-wise training at Table 3's scale",
        },
    ),
]
