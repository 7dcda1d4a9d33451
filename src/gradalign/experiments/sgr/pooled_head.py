"""SGR part, a lighter local head (our study `sgr.poolhead`, issue 46 item 4; notebook sgr/03).

At K = 16 the local heads weigh in SGR's activation memory: `sgr.mem` measures SGR's peak on ResNet-32 at 0.396 of
global BP's, of which the heads add 0.106, and a variant head, Belilovsky et al.'s after a 4×4 average pool
(`models.local_heads.pooled_belilovsky_head`, our choice), brings it to 0.299. A memory saving is worth reporting only
with what it costs in accuracy. This study trains SGR with that head at Table 3's `cpu` scale (ResNet-32, K = 16, the
calibrated λ, the same images, seeds and schedule) and compares it with Table 3's own SGR runs, the paper's head,
which it reads from the run cache (the same run keys: it trains none of them again).

The question (ours, not the paper's): is SGR with the pooled head at least as accurate as with the paper's head
(`rules.compare`, "at least": Welch's t, a tie passes and shows the smallest difference it could have detected)? At
the `cpu` preset's 60 epochs with the runs at 30 epochs committed too, the claim-level budget check decides it at both
budgets (`records.assess`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from gradalign.config import require
from gradalign.experiments.base import Experiment, never_used, outcome
from gradalign.experiments.rules import compare
from gradalign.experiments.sgr.local_bp import TABLE3_CPU, TABLE3_PRESETS, Table3Config
from gradalign.experiments.sgr.local_runs import curves_of, half_budget, run_group, scope, summary
from gradalign.training.local import RUN_VERSION

NOTEBOOK = "notebooks/sgr/03_memory.ipynb"
ARMS = {"paper_head": "the paper's head", "pooled_head": "the pooled head"}
"""The two arms (curve key suffix -> name in words): Table 3's SGR runs and SGR with the variant head."""


@dataclass(frozen=True)
class PooledHeadConfig(Table3Config):
    """Table 3's config for SGR alone, with the variant head of its second arm."""

    networks: tuple[str, ...] = ("resnet32",)  # where sgr.mem measures the variant's 0.299
    methods: tuple[str, ...] = ("sgr",)
    head: str = "belilovsky_pool4"  # `models.local_heads.HEADS`: the pooled arm's local head

    def validate(self) -> None:
        from gradalign.models.local_heads import HEADS

        super().validate()
        require(self, "methods", self.methods == ("sgr",), "must be ('sgr',): the study compares SGR's two heads")
        require(self, "head", self.head in HEADS, f"must be one of {sorted(HEADS)}")
        require(self, "head", self.head != "belilovsky", "must differ from the paper's head (belilovsky)")

    def method(self, name: str, modules: int):
        return replace(super().method(name, modules), head=self.head)

    def paper_head(self) -> Table3Config:
        """Table 3's config of the same runs with the paper's head: its run keys are Table 3's."""
        return Table3Config(**{f.name: getattr(self, f.name) for f in fields(Table3Config)})


def jobs(cfg: PooledHeadConfig) -> list[tuple[str, str, int, str]]:
    return [(net, "sgr", cfg.modules, d) for d in cfg.datasets for net in cfg.networks]


def arm_configs(cfg: PooledHeadConfig) -> dict[str, Table3Config]:
    return {"paper_head": cfg.paper_head(), "pooled_head": cfg}


NETWORKS = {"resnet32": "ResNet-32", "plainnet32": "PlainNet-32"}


def pooled_head_checks(table: dict, modules: int) -> dict:
    """`table[dataset][network][arm]` = summary: the pooled head at least as accurate as the paper's, everywhere."""
    checks = {}
    for d, by_net in table.items():
        for net, arms in by_net.items():
            name = "pooled_head_keeps_accuracy" + (f"_{d}_{net}" if len(table) * len(by_net) > 1 else "")
            checks[name] = compare(
                arms["pooled_head"],
                arms["paper_head"],
                relation="at_least",
                higher_is_better=True,
                quantity="final test accuracy",
                names=("SGR with the pooled head", "SGR with the paper's head"),
                claim=f"a 4×4 average pool before SGR's local heads (our variant) keeps SGR's accuracy at "
                f"K = {modules} on {NETWORKS.get(net, net)} (our question: what its smaller memory peak costs)",
            )
    return checks


def pooled_head(cfg: PooledHeadConfig, device) -> dict:
    """SGR with the paper's head (Table 3's runs) and with the pooled head, at Table 3's config."""
    runs = {arm: run_group(c, jobs(cfg), device) for arm, c in arm_configs(cfg).items()}
    table, curves = {}, {}
    for net, method, k, d in jobs(cfg):
        for arm in ARMS:
            group = runs[arm][(net, method, k, d)]
            table.setdefault(d, {}).setdefault(net, {})[arm] = summary(group)
            curves[f"{d}/{net}/{arm}"] = curves_of(group)
    seconds = sum(s["train_seconds"] for t in table.values() for row in t.values() for s in row.values())
    metrics = {"table": table, "head": cfg.head, "modules": cfg.modules, "train_seconds": seconds}
    return outcome(pooled_head_checks(table, cfg.modules), metrics, curves, scope=scope(cfg, ("cifar10",)))


def committed_comparison(cfg: PooledHeadConfig) -> dict[str, dict]:
    """Before the record: each arm's final test accuracy from the committed runs only (never trained here), at the
    config's budget and at half of it, and the comparison's decision (`rules.decide`) where both arms have every
    seed; an arm with a run not committed yet has {"committed": k, "of": n}."""
    from gradalign.experiments.rules import decide
    from gradalign.experiments.seed_stats import stats
    from gradalign.experiments.sgr.local_runs import group_units
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    out = {}
    for c in (cfg, half_budget(cfg)):
        arms = {}
        for arm, arm_cfg in arm_configs(c).items():
            entries = [read_entry(results_root() / "runs", u) for u in group_units(arm_cfg, jobs(c))]
            done = [e["value"]["final_test_acc"] for e in entries if e is not None]
            arms[arm] = {"committed": len(done), "of": len(entries)}
            if len(done) == len(entries):
                arms[arm] |= {**stats(done), "values": done}
        both = all("mean" in a for a in arms.values())
        decision = decide(arms["pooled_head"], arms["paper_head"], higher_is_better=True) if both else None
        out[f"{c.protocol.epochs} epochs"] = {"arms": arms, "comparison": decision}
    return out


def units(cfg: PooledHeadConfig) -> list:
    from gradalign.experiments.sgr.local_runs import group_units

    return [u for c in arm_configs(cfg).values() for u in group_units(c, jobs(cfg))]


PRESETS = {
    "smoke": {**TABLE3_PRESETS["smoke"], "networks": ("resnet32",), "methods": ("sgr",)},
    # cpu: Table 3's cpu scale (60 epochs, the calibrated λ, 3 seeds): its paper-head arm is Table 3's SGR runs
    "cpu": {**TABLE3_CPU, "networks": ("resnet32",), "methods": ("sgr",)},
    "gpu": {**TABLE3_PRESETS["gpu"], "networks": ("resnet32",), "methods": ("sgr",)},
    "paper": {**TABLE3_PRESETS["paper"], "networks": ("resnet32",), "methods": ("sgr",)},
}

EXPERIMENTS = [
    Experiment(
        "sgr.poolhead",
        pooled_head,
        PooledHeadConfig,
        PRESETS,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        unused=never_used("the study trains SGR alone (its two heads)", "methods"),
        note="cpu: Table 3's cpu scale, SGR on ResNet-32 at K = 16 with the paper's head (Table 3's runs) and the "
        "pooled head",
        choices={
            "head": "Belilovsky et al.'s k = 2 head after a 4×4 average pool (stride 4, ceil mode): the variant "
            "sgr.mem measures (SGR's K = 16 peak 0.299 of global BP's against 0.396 with the paper's head)",
            "question": "ours, not the paper's: whether the lighter head keeps SGR's accuracy",
        },
    ),
]
