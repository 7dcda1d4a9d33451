"""SGR part, Table 7 without BatchNorm (our study `sgr.tab7nobn`, issue 46; notebook sgr/02).

Table 7's claim is that global BP collapses as a plain VGG deepens while SGR keeps its accuracy. Our `sgr.tab7`
runs put BatchNorm after every conv (`training.local.build_split_network`: without it neither method trained
VGG-12 at App. E's lr 0.1 here), and BatchNorm is what lets a 50-layer plain network train end to end: it may
remove the very collapse the claim is about. This study runs the reading that tests the claim, the VGG without
BatchNorm:

0. **The initialisation.** With torchvision's VGG init (`models.vgg_deep`, `init="torchvision"`) and no BN,
   global BP leaves VGG-12 at chance at every rate of the grid: the study records those runs
   (`init_check`) and trains with He et al. (2015)'s fan-in init (`init="fan_in"`, our choice), under which
   a plain VGG-12 trains, as the paper's 90.8 % at d = 12 says it must.
1. **Global BP's learning rate**, chosen on validation at each depth: `lrs` (our grid; App. E's 0.1 did not
   train VGG-12 without BN here), seed 0, scored on training images held out from the training subset
   (`validation`; the test split is not read).
2. **SGR and layer-wise training at the deepest VGG**, at the rate global BP chose there; where global BP stayed
   near chance at every rate (within `NEAR_CHANCE` points), at the rate it chose at the shallowest depth (ours).
   A local arm whose run diverges at that rate trains at the next lower rate of the grid (`deepest_arm`).

**The geometry** (`pad_to`, ours). Each stage ends with a 2×2 max-pool, so 28-pixel Fashion-MNIST images put the
last stage's convs on 1×1 maps, where a 3×3 conv reads a ninth of the fan-in its init is scaled for and the signal
shrinks by 3 per conv (`analysis.signal_at_init`); CIFAR's 32-pixel images end on 2×2 maps. `pad_to=32` pads the
images to CIFAR's geometry, the reading that separates depth from that artefact (`--set pad_to=32`).

The claim, read without BN: no rate trains the deepest VGG under global BP (its best accuracy is below halfway
between its best at the shallowest depth and chance, `local_bp.table7_checks`'s mark), while SGR trains it (above
that mark). At `cpu` one seed: a study that locates the collapse, inconclusive by the seed count; 3 seeds at two
budgets are the GPU backlog's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradalign.config import require
from gradalign.data.image_sets import image_set_info
from gradalign.experiments.base import Experiment, check, never_used, outcome
from gradalign.experiments.sgr.local_runs import Table7Config, curves_of, run_group, summary
from gradalign.models.vgg_deep import INITS
from gradalign.store.run_unit import without_defaults
from gradalign.training.local import RUN_VERSION

NOTEBOOK = "notebooks/sgr/02_local_bp.ipynb"
NEAR_CHANCE = 5.0  # accuracy points above chance within which a depth counts as untrained at every rate (ours)
ARMS = ("sgr", "layerwise")  # trained at the deepest depth, beside global BP at its chosen rate
UNUSED_LAM = 100.0
"""The λ a global-BP or layer-wise run's spec carries, whatever the study's: neither reads λ (`methods.local`), and
this is the value their committed runs were keyed with (the smoke, cpu and gpu presets' λ), so that a reading of λ
(`--set lam=1`) trains SGR alone and reads the other arms' committed runs. (The paper preset's λ is 1: its global-BP
and layer-wise keys took 10² on 2026-12-07, with no run of it committed.)"""


@dataclass(frozen=True)
class NoBNConfig(Table7Config):
    """Table 7's VGG without BatchNorm: global BP's rate grid, the held-out images that score it."""

    lrs: tuple[float, ...] = (0.003, 0.01, 0.03)  # global BP's grid (our choice)
    validation: int = 1000  # held-out training images scoring every run
    init: str = "fan_in"  # the VGG's init (`models.vgg_deep.INITS`); the init check runs torchvision's
    pad_to: int = 0  # > 0: images zero-padded to pad_to px (32: CIFAR's geometry for Fashion-MNIST; our reading)

    def validate(self) -> None:
        super().validate()
        require(self, "datasets", len(self.datasets) == 1, "must name one data set (the study reads one)")
        require(self, "lrs", len(self.lrs) >= 2, "must name at least two rates (a sweep)")
        require(self, "lrs", all(lr > 0 for lr in self.lrs), "must be > 0")
        require(self, "lrs", list(self.lrs) == sorted(set(self.lrs)), "must be strictly increasing")
        require(self, "validation", self.validation >= 1, "must be >= 1 (the rates are chosen on it)")
        require(self, "init", self.init in INITS, f"must be one of {', '.join(INITS)}")
        size = image_set_info(self.datasets[0]).image_size if len(self.datasets) == 1 else 0
        require(self, "pad_to", self.pad_to == 0 or self.pad_to >= size, f"must be 0 or >= the image size ({size})")

    def to_dict(self) -> dict:
        """The record's key leaves `pad_to` out at its default (0): the 28-pixel record was stored before the field."""
        return without_defaults(self, super().to_dict(), ("pad_to",))

    def at_rate(self, lr: float) -> "NoBNConfig":
        return replace(self, protocol=replace(self.protocol, lr=lr))

    def spec(self, network: str, method: str, modules: int, dataset: str, seed: int):
        base = super().spec(network, method, modules, dataset, seed)
        if method in ("global_bp", "layerwise"):  # neither reads λ (Eq. 5 is SGR's): see `UNUSED_LAM`
            base = replace(base, method=replace(base.method, lam=UNUSED_LAM))
        return replace(base, vgg_batch_norm=False, validation=self.validation, vgg_init=self.init, pad_to=self.pad_to)


def sweep_jobs(cfg: NoBNConfig) -> list[tuple[str, str, int, str]]:
    from gradalign.training.local import vgg_name

    return [(vgg_name(d), "global_bp", 1, cfg.datasets[0]) for d in cfg.depths]


def init_check_jobs(cfg: NoBNConfig) -> list[tuple[str, str, int, str]]:
    return sweep_jobs(cfg)[:1]  # global BP at the shallowest depth


def deepest_jobs(cfg: NoBNConfig) -> list[tuple[str, str, int, str]]:
    from gradalign.training.local import vgg_name

    d = cfg.depths[-1]
    return [
        (vgg_name(d), m, 1 if m == "global_bp" else cfg.sgr_modules(d), cfg.datasets[0]) for m in ("global_bp", *ARMS)
    ]


def choose_rates(sweep: dict[int, dict[float, float]], chance: float) -> dict[int, float]:
    """Each depth's rate: its best validation accuracy (ties: the smaller rate); a depth near chance at every rate
    takes the shallowest depth's."""
    best = {d: max(sorted(by), key=lambda lr: by[lr]) for d, by in sweep.items()}
    shallow = min(sweep)
    return {d: best[d] if max(sweep[d].values()) > chance + NEAR_CHANCE else best[shallow] for d in sweep}


def no_bn_checks(sweep: dict[int, dict[float, float]], sgr_deep: float, chance: float) -> dict:
    shallow, deep = min(sweep), max(sweep)
    halfway = (max(sweep[shallow].values()) + chance) / 2
    best_deep = max(sweep[deep].values())
    return {
        "global_bp_collapses_without_bn": check(
            best_deep < halfway,
            {"best_at_deepest": round(best_deep, 2), "halfway_to_chance": round(halfway, 2)},
            "global BP's best validation accuracy over the rate grid at the deepest VGG (no BN) < halfway between "
            "its best at the shallowest and chance",
            "global BP fails to converge on the deepest plain VGG (Table 7: fail at d = 57)",
        ),
        "sgr_trains_deepest_without_bn": check(
            sgr_deep >= halfway,
            {"sgr_at_deepest": round(sgr_deep, 2), "halfway_to_chance": round(halfway, 2)},
            "SGR's mean validation accuracy at the deepest VGG (no BN) >= that halfway mark",
            "SGR keeps a stable accuracy in very deep networks (Table 7: 84.81 % at d = 57)",
        ),
    }


def deepest_arm(cfg: NoBNConfig, job: tuple, rate: float, chance: float, device) -> tuple[list[dict], dict]:
    """(runs, summary) of one arm at the deepest VGG: at `rate`, or, where a local arm's run diverges there (its
    validation runs stop on a divergence, `training.local_divergence`), at the next lower rate of the grid (as
    Table 4's tuned runs do). An arm that diverges at every rate counts at chance, every seed diverged."""
    from gradalign.errors import DivergenceError

    diverged_at = []
    for lr in sorted((lr for lr in cfg.lrs if lr <= rate), reverse=True):
        try:
            runs = run_group(cfg.at_rate(lr), [job], device)[job]
        except DivergenceError as err:
            diverged_at.append({"lr": lr, "why": str(err)})
            continue
        return runs, {**summary(runs), "lr": lr, "diverged_at": diverged_at}
    at_chance = {"mean": chance, "std": 0.0, "n": cfg.seeds, "diverged": cfg.seeds, "still_improving": 0}
    return [], {**at_chance, "train_seconds": 0.0, "epoch_seconds": 0.0, "lr": None, "diverged_at": diverged_at}


def no_bn(cfg: NoBNConfig, device) -> dict:
    """The rate sweep of global BP at every depth, then global BP, SGR and layer-wise at the deepest."""
    from gradalign.training.local import vgg_name

    chance = image_set_info(cfg.datasets[0]).chance_accuracy
    one_seed = replace(cfg, seeds=1)
    torchvision = replace(one_seed, init="torchvision")
    init_check = {}
    for lr in cfg.lrs:
        job = init_check_jobs(cfg)[0]
        init_check[f"{lr:g}"] = summary(run_group(torchvision.at_rate(lr), [job], device)[job])
    sweep, curves, rows = {}, {}, {}
    for lr in cfg.lrs:
        runs = run_group(one_seed.at_rate(lr), sweep_jobs(cfg), device)
        for job, d in zip(sweep_jobs(cfg), cfg.depths):
            s = summary(runs[job])
            sweep.setdefault(d, {})[lr] = s["mean"]
            rows[f"d={d}/lr={lr:g}"] = s
            curves[f"sweep/global_bp/d={d}/lr={lr:g}"] = curves_of(runs[job])
    chosen = choose_rates(sweep, chance)
    deep = cfg.depths[-1]
    arms = {}
    for job in deepest_jobs(cfg):
        runs, arms[job[1]] = deepest_arm(cfg, job, chosen[deep], chance, device)
        curves[f"{job[1]}/d={deep}"] = {**curves_of(runs), "diverged": arms[job[1]]["diverged"]}
    checks = no_bn_checks(sweep, arms["sgr"]["mean"], chance)
    seconds = sum(s["train_seconds"] for s in [*rows.values(), *init_check.values()]) + sum(
        s["train_seconds"] for m, s in arms.items() if m != "global_bp" or cfg.seeds > 1
    )
    metrics = {
        "sweep": {str(d): {f"{lr:g}": round(v, 4) for lr, v in by.items()} for d, by in sweep.items()},
        "sweep_runs": rows,
        "init_check": {"depth": cfg.depths[0], "init": "torchvision", "by_lr": init_check},
        "chosen_lr": {str(d): lr for d, lr in chosen.items()},
        "deepest": {"depth": deep, "network": vgg_name(deep), "lr": chosen[deep], "arms": arms},  # each arm's own "lr"
        "chance": chance,
        "train_seconds": seconds,
    }
    return outcome(checks, metrics, curves, scope="reduced")


PRESETS = {
    "smoke": {
        "width": 0.125,
        "n_train": 128,
        "n_test": 0,
        "validation": 128,
        "seeds": 1,
        "protocol.epochs": 2,
        "protocol.batch_size": 64,
        "depths": (12, 17),
        "sgr_split": "stage",
        "lrs": (0.01, 0.03),
        "reduction": "mean",
        "lam": 100.0,
    },
    # cpu: Table 7's cpu scale (width ×0.125, 6,400 images, 30 epochs, sgr.lam7's λ) without BN, one seed, its
    # global-BP runs trained here (two threads) on 2026-11-28
    "cpu": {
        "width": 0.125,
        "n_train": 6400,
        "n_test": 0,
        "validation": 1000,
        "seeds": 1,
        "reduction": "mean",
        "lam": 100.0,
        "protocol.epochs": 30,
        "depths": (12, 37, 57),
    },
    # gpu: 3 seeds of the deepest arms (the budget check's half-budget runs are `claim_budget`'s)
    "gpu": {
        "width": 0.125,
        "n_train": 6400,
        "n_test": 0,
        "validation": 1000,
        "seeds": 3,
        "reduction": "mean",
        "lam": 100.0,
        "protocol.epochs": 30,
        "depths": (12, 37, 57),
    },
    "paper": {
        "datasets": ("cifar10",),
        "width": 1.0,
        "n_train": 45000,
        "n_test": 0,
        "validation": 5000,
        "seeds": 3,
        "protocol.epochs": 200,
        "depths": (12, 17, 27, 37, 47, 57),
    },
}


def units(cfg: NoBNConfig) -> list:
    """The runs `no_bn` reads: the init check's and the sweep's; once the sweep is committed, the deepest arms'
    at the rate it chose (before, that rate is not known: a sweep trains the sweep first)."""
    from gradalign.experiments.sgr.local_runs import group_units
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    one_seed = replace(cfg, seeds=1)
    torchvision = replace(one_seed, init="torchvision")
    out = [u for lr in cfg.lrs for u in group_units(torchvision.at_rate(lr), init_check_jobs(cfg))]
    sweep = {lr: group_units(one_seed.at_rate(lr), sweep_jobs(cfg)) for lr in cfg.lrs}
    out += [u for us in sweep.values() for u in us]
    folder = results_root() / "runs"
    stored = {lr: [read_entry(folder, u) for u in us] for lr, us in sweep.items()}
    if all(e is not None for es in stored.values() for e in es):  # the sweep is committed: the chosen rate's runs
        accs = {d: {lr: stored[lr][i]["value"]["final_test_acc"] for lr in cfg.lrs} for i, d in enumerate(cfg.depths)}
        chosen = choose_rates(accs, image_set_info(cfg.datasets[0]).chance_accuracy)
        out += group_units(cfg.at_rate(chosen[cfg.depths[-1]]), deepest_jobs(cfg))
    return out


EXPERIMENTS = [
    Experiment(
        "sgr.tab7nobn",
        no_bn,
        NoBNConfig,
        PRESETS,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        unused=never_used(
            "global BP's rate is chosen from `lrs`, and the other arms train at its choice", "protocol.lr"
        ),
        note="cpu: Table 7's cpu scale without BatchNorm, one seed: global BP's rate on validation, then SGR and "
        "layer-wise at the deepest VGG",
        choices={
            "init": "He et al. (2015)'s fan-in He-normal for every conv and linear layer: torchvision's VGG init "
            "(fan-out convs, a normal(0, 0.01) head) left VGG-12 without BN at chance at every rate (the init check)",
            "batch_norm": "none: the VGG of Table 7 as plain conv → ReLU layers (the `sgr.tab7` record keeps BN)",
            "lrs": "global BP's grid 0.003, 0.01, 0.03 (App. E's 0.1 did not train VGG-12 without BN here), chosen "
            "on 1,000 held-out training images at each depth; SGR and layer-wise at the deepest depth's choice, or "
            "the shallowest's where every rate stayed within 5 points of chance",
            "lam": "sgr.lam7's λ = 10² with the mean reduction (chosen on the BN VGG)",
        },
    ),
]
