"""SGR part, BP-free training (notebook sgr/04): Table 4 of Yang et al. (2024), §4.2, and the runs of Figures 2-4.

Every block of the BP-free PlainNet (`models.plain_mlp`: Linear → ReLU) is a local module with a fixed ETF
classifier (Eq. 7), so the gradient at each block's output is analytic and nothing back-propagates across
blocks. The local steps are those of local-BP training (`methods.local`) with the `etf` head: layer-wise,
reforward and SGR (Eq. 5–6). The three figures and the table read the same runs (run cache kind `sgr.local`,
network `mlp<L>`).

- `sgr.tab4`: final test accuracy of layer-wise, reforward and SGR. Claim: SGR beats both (Table 4: by more
  than 3 points on CIFAR-10 and 1 on CIFAR-100). The FA, DRTP and PEPITA rows of the paper are quoted from
  Dellaferrera & Kreiman (2022), not run by its authors; the page shows them as the paper gives them.
- `sgr.fig2`, `fig3`, `fig4`: the figures on the same runs (`bp_free_figures`).

Decision rules as for local-BP (`local_runs.beats`, means over seeds); "throughout training" = at every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradalign.config import require
from gradalign.experiments.base import Experiment, outcome
from gradalign.experiments.rules import all_of, compare
from gradalign.experiments.sgr.bp_free_presets import CHOICES, NOTE, PRESETS, SHARES
from gradalign.experiments.sgr.local_runs import LocalBPConfig, curves_of, local_scale, run_group
from gradalign.experiments.sgr.local_runs import scope, summary_with_values
from gradalign.methods.local import TITLES
from gradalign.store.run_unit import without_defaults
from gradalign.training.local import RUN_VERSION

NOTEBOOK = "notebooks/sgr/04_bp_free.ipynb"
BP_FREE_METHODS = ("layerwise", "reforward", "sgr")
BASELINES = ("fa", "dfa", "drtp", "pepita")
BASELINE_ACTIVATIONS = {"fa": "relu", "dfa": "relu", "drtp": "tanh", "pepita": "relu"}  # DRTP's own networks: tanh
FIGURE_METHODS = ("layerwise", "sgr")  # what Figures 2-4 compare
MLP_ONLY = "Table 4 and Figures 2-4 read the MLP; the conv reading is sgr.tab4conv"


@dataclass(frozen=True)
class BPFreeConfig(LocalBPConfig):
    depth: int = 4  # blocks of the PlainMLP, each a module (our choice: the paper's depth is not stated)
    blocks: str = "mlp"  # "mlp": Linear blocks (sgr.tab4); "conv": conv blocks (models.plain_conv, sgr.tab4conv)
    methods: tuple[str, ...] = BP_FREE_METHODS
    baselines: tuple[str, ...] = BASELINES  # Table 4 only: FA, DFA, DRTP, PEPITA on the same hidden blocks
    # every baseline's learning rate (our choice, from a 3-epoch probe, see CHOICES; the PEPITA code's rate: at
    # 0.1, the probe's pick, all 3 cpu seeds of PEPITA diverged in epoch 1)
    baseline_lr: float = 0.01
    # learning rates tuned on validation (issue 28): each method's final runs use the rate of its grid with the
    # highest validation accuracy of a `tune_epochs` run (seed `seed`) scored on `validation` held-out training
    # images; empty grids: no tuning (lr = protocol.lr for SGR's methods, baseline_lr for the baselines)
    lrs: tuple[float, ...] = ()  # layer-wise, reforward, SGR
    baseline_lrs: tuple[float, ...] = ()  # FA, DFA, DRTP, PEPITA
    tune_epochs: int = 3
    validation: int = 5000

    def to_dict(self) -> dict:
        """The fields added later only when not their defaults: records stored before them keep their keys."""
        later = ("baseline_lr", "lrs", "baseline_lrs", "tune_epochs", "validation", "blocks")
        return without_defaults(self, super().to_dict(), later)

    def validate(self) -> None:
        super().validate()
        from gradalign.models.plain_conv import MAX_DEPTH

        require(self, "depth", self.depth >= 2, "must be >= 2 (local learning needs two modules)")
        require(self, "blocks", self.blocks in ("mlp", "conv"), "must be 'mlp' or 'conv'")
        if self.blocks == "conv":
            require(self, "depth", self.depth <= MAX_DEPTH, f"must be <= {MAX_DEPTH} for the conv PlainNet")
        require(self, "methods", "sgr" in self.methods, "must include sgr (the claims compare it with the others)")
        require(self, "methods", set(self.methods) <= set(BP_FREE_METHODS), f"must be among {BP_FREE_METHODS}")
        require(self, "baselines", set(self.baselines) <= set(BASELINES), f"must be among {BASELINES}")
        require(self, "baseline_lr", self.baseline_lr > 0, "must be > 0")
        require(self, "lrs", all(v > 0 for v in self.lrs), "must be > 0")
        require(self, "baseline_lrs", all(v > 0 for v in self.baseline_lrs), "must be > 0")
        require(self, "tune_epochs", self.tune_epochs >= 1, "must be >= 1")
        require(self, "validation", self.validation >= 1, "must be >= 1")
        if self.lrs or self.baseline_lrs:
            from gradalign.data.image_sets import TRAIN_SIZES

            room = min(TRAIN_SIZES[d] for d in self.datasets) - self.validation
            require(self, "n_train", 0 < self.n_train <= room, f"must be in 1 … {room:,} to hold out the validation")
        if "cifar100" in self.datasets and self.blocks == "mlp":
            require(self, "width", round(1024 * self.width) >= 100, "must give >= 100 units for CIFAR-100's ETF")
        if self.blocks == "conv":
            from gradalign.data.image_sets import image_set_info
            from gradalign.models.plain_conv import geometry

            for d in self.datasets:
                info = image_set_info(d)
                smallest = min(b.features for b in geometry(self.depth, info.channels, info.image_size, self.width))
                ok = smallest >= info.num_classes
                require(self, "width", ok, f"must give every block >= {info.num_classes} features for {d}'s ETF")

    @property
    def network(self) -> str:
        return f"{self.blocks}{self.depth}"

    def method(self, name: str, modules: int):
        return replace(super().method(name, modules), head="etf")

    def baseline_spec(self, method: str, dataset: str, seed: int, lr: float | None = None, tune: bool = False):
        """A baseline's run at `lr` (None: `baseline_lr`); `tune`: the tuning run (validation, tune_epochs)."""
        from gradalign.training.bp_free import BPFreeRunSpec

        protocol = replace(self.protocol, lr=self.baseline_lr if lr is None else lr)
        return BPFreeRunSpec(
            method=method,
            protocol=replace(protocol, epochs=self.tune_epochs) if tune else protocol,
            dataset=dataset,
            network=self.blocks,
            depth=self.depth,
            width=self.width,
            activation=BASELINE_ACTIVATIONS[method],
            n_train=self.n_train,
            n_test=0 if tune else self.n_test,
            seed=seed,
            data_seed=self.data_seed,
            validation=self.validation if tune else 0,
        )

    def local_spec(self, method: str, dataset: str, seed: int, lr: float | None = None, tune: bool = False):
        """A layer-wise / reforward / SGR run at `lr` (None: protocol.lr); `tune` as for `baseline_spec`."""
        spec = self.spec(self.network, method, self.depth, dataset, seed)
        protocol = replace(spec.protocol, lr=spec.protocol.lr if lr is None else lr)
        if tune:
            protocol = replace(protocol, epochs=self.tune_epochs)
            return replace(spec, protocol=protocol, n_test=0, validation=self.validation)
        return replace(spec, protocol=protocol)

    def unit(self, method: str, dataset: str, seed: int, lr: float | None = None, tune: bool = False, device=None):
        from gradalign.training.bp_free import bp_free_unit
        from gradalign.training.local import local_unit

        if method in BASELINES:
            return bp_free_unit(self.baseline_spec(method, dataset, seed, lr, tune), device)
        return local_unit(self.local_spec(method, dataset, seed, lr, tune), device)

    def grid(self, method: str) -> tuple[float, ...]:
        return self.baseline_lrs if method in BASELINES else self.lrs


def unused_settings(cfg: BPFreeConfig) -> dict[str, str]:
    """Figures 2-4 compare layer-wise training with SGR only, at each one's rate tuned as Table 4 tunes it
    (`figure_config`), so they read Table 4's runs of those two methods (`Experiment.unused`)."""
    why = f"the figures compare {' and '.join(FIGURE_METHODS)} only"
    out = {"methods": why, "baselines": why, "baseline_lr": why, "baseline_lrs": why, "blocks": MLP_ONLY}
    if cfg.lrs:
        out["protocol.lr"] = "the local methods' rate is tuned on validation (lrs)"
    else:
        out |= dict.fromkeys(("tune_epochs", "validation"), "no lr grid: nothing is tuned")
    return out


def table4_unused(cfg: BPFreeConfig) -> dict[str, str]:
    """With an lr grid, the untuned rate of those methods is not used; without grids, the tuning settings."""
    out = {"blocks": MLP_ONLY}
    if cfg.lrs:
        out["protocol.lr"] = "the local methods' rate is tuned on validation (lrs)"
    if cfg.baseline_lrs:
        out["baseline_lr"] = "the baselines' rate is tuned on validation (baseline_lrs)"
    if not (cfg.lrs or cfg.baseline_lrs):
        out |= dict.fromkeys(("tune_epochs", "validation"), "no lr grid: nothing is tuned")
    return out


def figure_jobs(cfg: BPFreeConfig, methods=FIGURE_METHODS) -> list[tuple[str, str, int, str]]:
    return [(cfg.network, m, cfg.depth, d) for d in cfg.datasets for m in methods]


def baseline_jobs(cfg: BPFreeConfig) -> list[tuple[str, str, int]]:
    return [(m, d, s) for d in cfg.datasets for m in cfg.baselines for s in range(cfg.seed, cfg.seed + cfg.seeds)]


def table4_units(cfg: BPFreeConfig) -> list:
    """Every run Table 4 may read, as run-cache units (`gradalign sweep`): the tuning runs of each method's lr grid
    and the final runs at every rate of the grid (which of them the table reads depends on the tuning; a sweep
    computes them all), or at the untuned rate where a method has no grid."""
    methods = (*cfg.baselines, *cfg.methods)
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    units = [cfg.unit(m, d, cfg.seed, lr, tune=True) for d in cfg.datasets for m in methods for lr in cfg.grid(m)]
    for d in cfg.datasets:
        for m in methods:
            units += [cfg.unit(m, d, s, lr) for lr in (cfg.grid(m) or (None,)) for s in seeds]
    return units


def figure_config(cfg: BPFreeConfig) -> BPFreeConfig:
    """Figures 2-4's runs: Table 4's layer-wise and SGR runs, tuned the same way (the same keys)."""
    return replace(cfg, baselines=(), methods=FIGURE_METHODS)


def figure_units(cfg: BPFreeConfig) -> list:
    """The runs Figures 2-4 may read (`gradalign sweep`): `table4_units` of layer-wise and SGR."""
    return table4_units(figure_config(cfg))


def figure_runs(cfg: BPFreeConfig, device) -> tuple[dict, dict]:
    """(runs, tuning) of Figures 2-4: layer-wise and SGR at their rates tuned on validation (`tune`), or at
    protocol.lr where the preset has no grid."""
    cfg = figure_config(cfg)
    tuning = tune(cfg, device) if cfg.lrs else {}
    return (_tuned_runs(cfg, tuning, device) if tuning else _runs(cfg, FIGURE_METHODS, device)), tuning


def tune(cfg: BPFreeConfig, device) -> dict:
    """{dataset: {method: {"grid": {lr: validation accuracy}, "chosen": lr}}} for every method with a grid: the
    highest validation accuracy of a `tune_epochs` run at seed `seed` (ties: the smaller lr; a diverged run
    scores 0)."""
    from gradalign.errors import DivergenceError
    from gradalign.progress import progress

    jobs = [(d, m, lr) for d in cfg.datasets for m in (*cfg.baselines, *cfg.methods) for lr in cfg.grid(m)]
    out: dict = {}
    for d, m, lr in progress(jobs, desc="lr tuning on validation"):
        try:
            run = cfg.unit(m, d, cfg.seed, lr, tune=True, device=device).run()
            acc, seconds = round(run["final_test_acc"], 2), run["train_seconds"]
        except DivergenceError:
            acc, seconds = 0.0, 0.0
        entry = out.setdefault(d, {}).setdefault(m, {"grid": {}, "seconds": 0.0})
        entry["grid"][f"{lr:g}"] = acc
        entry["seconds"] += seconds
    for by_method in out.values():
        for entry in by_method.values():
            entry["chosen"] = float(max(entry["grid"], key=lambda lr: (entry["grid"][lr], -float(lr))))
    return out


def _tuned_runs(cfg: BPFreeConfig, tuning: dict, device) -> dict:
    """{(network, method, K, dataset): [one run per seed]} at each method's tuned lr (its default where untuned).
    A final run that diverges at the tuned lr (the tuning runs are shorter) moves the method to the next rate of
    its grid by validation accuracy (our rule; rates whose tuning run diverged are not tried), noted in `tuning` as
    `diverged` and `final`. A baseline that diverges at every rate tried is left out of the table with `final`
    None (the record says so); one of SGR's own methods that does stops the experiment."""
    from gradalign.errors import DivergenceError
    from gradalign.progress import progress

    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    runs: dict[tuple, list[dict]] = {}
    for d, m in progress([(d, m) for d in cfg.datasets for m in (*cfg.baselines, *cfg.methods)], desc="BP-free"):
        entry = tuning.get(d, {}).get(m)
        rates = [None] if entry is None else sorted(entry["grid"], key=lambda r: (-entry["grid"][r], float(r)))
        rates = [r for r in rates if r is None or entry["grid"][r] > 0]
        if not rates and m not in BASELINES:  # every tuning run diverged: nothing to train SGR's own method at
            from gradalign.methods.local import TITLES

            grid = ", ".join(map(str, entry["grid"]))
            raise DivergenceError(f"{TITLES[m]} diverged at every rate of its tuning grid ({grid}); lower the rates")
        for rate in rates:
            lr = None if rate is None else float(rate)
            try:
                group = [cfg.unit(m, d, s, lr, device=device).run() for s in seeds]
            except DivergenceError as err:
                if entry is None or (rate == rates[-1] and m not in BASELINES):
                    raise
                entry.setdefault("diverged", {})[rate] = str(err).split(";")[0]
                continue
            if entry is not None:
                entry["final"] = lr
            runs[(cfg.network, m, cfg.depth, d)] = group
            break
        else:
            if entry is not None:
                entry["final"] = None  # diverged at every rate tried
    return runs


def _baseline_runs(cfg: BPFreeConfig, device) -> dict:
    from gradalign.progress import progress
    from gradalign.training.bp_free import bp_free_unit

    runs: dict[tuple, list[dict]] = {}
    for m, d, s in progress(baseline_jobs(cfg), desc="BP-free baseline runs"):
        runs.setdefault((m, d), []).append(bp_free_unit(cfg.baseline_spec(m, d, s), device).run())
    return runs


def _runs(cfg: BPFreeConfig, methods, device) -> dict:
    return run_group(cfg, figure_jobs(cfg, methods), device)


def _prefixed(cfg, dataset, checks):
    return {name if len(cfg.datasets) == 1 else f"{dataset}_{name}": c for name, c in checks.items()}


# --- Table 4 -----------------------------------------------------------------------------------------------


def _accuracy(a: dict, b: dict, other: str, claim: str) -> dict:
    return compare(
        a,
        b,
        relation="beats",
        higher_is_better=True,
        quantity="final test accuracy",
        names=("SGR", TITLES.get(other, other)),
        claim=claim,
    )


def table4_checks(table: dict) -> dict:
    """`table[method]` = summary of the final test accuracy: SGR beats layer-wise, reforward, and every BP-free
    baseline present (`rules.compare`: Welch's t)."""
    paper = {"layerwise": "72.40 vs 69.17 and 49.41 vs 48.30", "reforward": "72.40 vs 69.05 and 49.41 vs 47.12"}
    baselines = [b for b in BASELINES if b in table]
    checks = {}
    if baselines:
        claim = (
            "SGR with fixed ETF heads does significantly better than the BP-free methods of Table 1 (§3.3; Table 4, "
            "CIFAR-10: 72.40 vs FA 57.51, DRTP 50.53, PEPITA 56.33, quoted from Dellaferrera & Kreiman 2022)"
        )
        parts = {b: _accuracy(table["sgr"], table[b], b, claim) for b in baselines}
        seeds = min(table[m]["n"] for m in ("sgr", *baselines))
        checks["sgr_beats_bp_free_baselines"] = all_of(
            parts, f"SGR beats each baseline: higher final test accuracy by Welch's t; {seeds} seeds each", claim
        )
    return checks | {
        f"sgr_beats_{other}": _accuracy(
            table["sgr"],
            table[other],
            other,
            f"in BP-free training SGR outperforms {TITLES[other].lower()} training (Table 4, CIFAR-10 and "
            f"CIFAR-100: {paper[other]})",
        )
        for other in BP_FREE_METHODS
        if other != "sgr" and other in table
    }


def table4(cfg: BPFreeConfig, device) -> dict:
    tuning = tune(cfg, device) if cfg.lrs or cfg.baseline_lrs else {}
    if tuning:
        runs = _tuned_runs(cfg, tuning, device)
    else:
        runs = _runs(cfg, cfg.methods, device)
        runs.update({(cfg.network, m, cfg.depth, d): group for (m, d), group in _baseline_runs(cfg, device).items()})
    tables, curves, checks = {}, {}, {}
    for d in cfg.datasets:
        methods = [m for m in (*cfg.baselines, *cfg.methods) if (cfg.network, m, cfg.depth, d) in runs]
        tables[d] = {m: summary_with_values(runs[(cfg.network, m, cfg.depth, d)]) for m in methods}
        curves.update({f"{d}/{m}": curves_of(runs[(cfg.network, m, cfg.depth, d)]) for m in methods})
        checks.update(_prefixed(cfg, d, table4_checks(tables[d])))
    seconds = sum(s["train_seconds"] for t in tables.values() for s in t.values())
    metrics = {"table": tables, "train_seconds": seconds, "network": cfg.network}
    if tuning:
        metrics["tuning"] = tuning
    return outcome(checks, metrics, curves, scope=scope(cfg, ("cifar10", "cifar100")))


def _experiment(element_id: str, run, presets: dict, unused=None) -> Experiment:
    return Experiment(
        element_id,
        run,
        BPFreeConfig,
        presets,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note=NOTE,
        choices=CHOICES,
        shares=SHARES,
        scale=local_scale,
        unused=unused,
    )


EXPERIMENTS = [
    _experiment("sgr.tab4", table4, PRESETS, table4_unused),
]
