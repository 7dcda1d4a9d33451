"""SGR part, Table 4 on a conv PlainNet (our study `sgr.tab4conv`, issue 46 item 3; notebook sgr/04).

Table 4 (`sgr.tab4`) reads the paper's BP-free "PlainNet" as a 4-block fully connected MLP of 1,024 units. The paper
does not state that network. What it says (Yang et al. 2024): "In BP-free training, we use PlainNet where each block is
only a linear-nonlinear transformation and the local classifier is a fixed ETF structure" (§4.2); its PlainNet
elsewhere is ResNet-32 without identity connections, a conv net (§4.1, Table 3); Figure 3 uses "a 4-layer PlainNet";
and Table 4's FA / DRTP / PEPITA rows are quoted from Dellaferrera & Kreiman (2022), whose conv network is one conv
(3 → 32, 5 × 5), ReLU, max-pool 2 and a linear layer. This study is the conv reading: every block one convolution and a
ReLU (`models.plain_conv`: 4 blocks, 16-32-32-64 channels at width 1, our choice), with the same six methods, the
same tuning on validation and the same claims as Table 4 (`bp_free.table4`, `bp_free.table4_checks`); the baselines
run their rules on the same conv blocks plus a trained linear output layer (`methods.bp_free`, conv form).

Every final arm is trained again at half the budget (B/2: the same rate, seeds and data, the cosine over half the
epochs), so that each claim is decided at both budgets (`claim_budget.stabilise`, paired by seed; the per-run
finished-learning rule is then replaced by that check, as `records.assess` does for other elements).
"""

from __future__ import annotations


from gradalign.experiments.base import Experiment
from gradalign.experiments.rules import per_column, sig
from gradalign.experiments.sgr.bp_free import BPFreeConfig, table4, table4_checks, table4_unused, table4_units
from gradalign.experiments.sgr.bp_free_presets import NO_AUGMENTATION, NOTE, PRESETS as MLP_PRESETS, TUNED, WIDE
from gradalign.experiments.sgr.local_runs import (  # half_budget: tune_epochs kept
    CALIBRATED,
    half_budget,
    local_scale,
    summary_with_values,
)
from gradalign.training.local import RUN_VERSION

NOTEBOOK = "notebooks/sgr/04_bp_free.ipynb"
PAPER_LINES = (
    "§4.2: 'In BP-free training, we use PlainNet where each block is only a linear-nonlinear transformation and the "
    "local classifier is a fixed ETF structure'; §4.1: PlainNet is ResNet-32 without identity connections; Figure 3: "
    "'a 4-layer PlainNet'; Table 4's FA / DRTP / PEPITA rows: Dellaferrera & Kreiman (2022), whose conv network is "
    "conv 3 -> 32 (5 x 5), ReLU, max-pool 2, linear"
)


def _final_rates(out: dict, cfg: BPFreeConfig, dataset: str) -> dict[str, float | None]:
    """Each arm of the B table and the rate its final runs trained at (None: untuned, the default rate)."""
    tuning = out["metrics"].get("tuning", {}).get(dataset, {})
    return {m: tuning[m]["final"] if m in tuning else None for m in out["metrics"]["table"][dataset]}


def table4_conv(cfg: BPFreeConfig, device) -> dict:
    """Table 4 (`bp_free.table4`) on the conv blocks, then every arm again at B/2 at the rate its B runs trained at.
    An arm that diverges at B/2 is left out of the B/2 table (its claims are then not decided at both budgets)."""
    from gradalign.errors import DivergenceError
    from gradalign.progress import progress

    out = table4(cfg, device)
    half, seeds = half_budget(cfg), range(cfg.seed, cfg.seed + cfg.seeds)
    tables, diverged = {}, {}
    for d in cfg.datasets:
        rates = _final_rates(out, cfg, d)
        table = out["metrics"]["table"][d]
        for m in rates:  # the B runs again, for their per-seed values (read from the run cache)
            table[m]["values"] = [cfg.unit(m, d, s, rates[m], device=device).run()["final_test_acc"] for s in seeds]
        tables[d] = {}
        for m in progress(list(rates), desc="B/2 runs"):
            try:
                runs = [half.unit(m, d, s, rates[m], device=device).run() for s in seeds]
            except DivergenceError as err:
                diverged.setdefault(d, {})[m] = str(err).split(";")[0]
                continue
            tables[d][m] = summary_with_values(runs)
    out["metrics"]["half"] = {"epochs": half.protocol.epochs, "table": tables, "diverged": diverged}
    out["metrics"]["train_seconds"] += sum(s["train_seconds"] for t in tables.values() for s in t.values())
    return out


def budgets(record: dict) -> tuple[str, str]:
    """The two budgets' names for the page: ("20 epochs", "10 epochs")."""
    return f"{record['config']['protocol']['epochs']} epochs", f"{record['metrics']['half']['epochs']} epochs"


def half_budget_checks(record: dict) -> dict | None:
    """Table 4's claims (`bp_free.table4_checks`, per data set as `validity.tab4_claims` names them) on the record's
    B/2 table, or None where the record has none. `validity.tab4conv_claims` decides each claim at both budgets
    (`claim_budget.stabilise`: the same decision, the difference moved by less than max(0.5, 2 SE), paired by seed)."""
    half = record["metrics"].get("half")
    if not half:
        return None
    return per_column(half["table"], table4_checks, len(record["config"]["datasets"]) > 1)


def budget_gains(record: dict) -> dict[str, float] | None:
    """{data set/arm: mean gain from B/2 to B} when every arm of the B table is at B/2 with its per-seed values (the
    finished-learning rule is then replaced by the claim-level budget check); None otherwise."""
    half = record["metrics"].get("half")
    if not half:
        return None
    full, halved = record["metrics"]["table"], half["table"]
    for d, table in full.items():
        if set(halved.get(d, {})) != set(table) or any("values" not in s for s in table.values()):
            return None
    return {f"{d}/{m}": sig(s["mean"] - halved[d][m]["mean"]) for d, t in full.items() for m, s in t.items()}


def units(cfg: BPFreeConfig) -> list:
    """Every run the study may read (`gradalign sweep`): Table 4's units on the conv blocks at B, and the final runs
    at B/2 (every rate of each grid: which one the study reads depends on the tuning)."""
    return table4_units(cfg) + table4_units(half_budget(cfg))  # the tuning runs twice: units_of lists them once


def unused(cfg: BPFreeConfig) -> dict[str, str]:
    out = {k: v for k, v in table4_unused(cfg).items() if k != "blocks"}
    return out | {"blocks": "the conv reading: its blocks are convolutions (sgr.tab4 is the MLP reading)"}


CONV = {"blocks": "conv", "depth": 4}
PRESETS = {
    # width 0.25: 4-8-8-16 channels (3,136 to 256 features, every ETF's d >= 10)
    "smoke": {**MLP_PRESETS["smoke"], **CONV, "width": 0.25},
    # cpu: one epoch on 6,400 images took, on one thread of the loaded two-core machine (measured 2026-11-28): FA
    # 3.1 s, DRTP 2.5, PEPITA 1.8, layer-wise 2.2, reforward 2.4, SGR 4.8 (plus the per-epoch test pass). 20 epochs,
    # 3 seeds, at B and B/2, and 4-epoch tuning runs over Table 4's cpu grids (centred on what its MLP chose): about
    # 50-60 min of one thread. Everything else as Table 4's cpu (no crop or flip, the calibrated λ)
    "cpu": {
        **CONV,
        "width": 1.0,
        "n_train": 6400,
        "seeds": 3,
        "protocol.epochs": 20,
        **NO_AUGMENTATION,
        "baselines": ("fa", "drtp", "pepita"),
        **TUNED,
        **WIDE,
        "tune_epochs": 4,
        "lam": CALIBRATED["lam"],
        "reduction": CALIBRATED["reduction"],
    },
    "gpu": {**MLP_PRESETS["gpu"], **CONV},  # estimated, not timed
    "paper": {**MLP_PRESETS["paper"], **CONV},
}
CHOICES = {
    "network": "our conv reading of the BP-free PlainNet: 4 blocks, each Conv2d 3 x 3 (padding 1; strides 1, 2, 2, 2 "
    "in place of pooling layers) -> ReLU, no BN, 16-32-32-64 channels x width (sized to two CPU cores), every block a "
    f"module with a fixed ETF head on its flattened output. The paper states neither depth nor width ({PAPER_LINES})",
    "baselines": "FA, DRTP, PEPITA on the same conv blocks plus a trained linear output layer, without weight "
    "transport: FA's signal through the transposed conv at its fixed B (W's shape), DRTP's projected onto the "
    "flattened pre-activation, PEPITA's input modulation reshaped to the image (methods.bp_free)",
    "protocol": "as Table 4's cpu (sgr.tab4): Fashion-MNIST, 6,400 training images, no crop or flip, the calibrated "
    "lambda = 1e3 (mean); 20 epochs (sized to the CPU budget: measured epoch times in the preset), 3 seeds",
    "tuning": "every method's lr chosen on 5,000 held-out training images after a 4-epoch run (seed 0) over Table "
    "4's cpu grids (layer-wise, reforward, SGR 0.003 to 0.3; FA, DRTP, PEPITA 0.0003 to 10, steps of about 3x)",
    "budget": "every final arm also at half the epochs (B/2, the same rate and seeds): each claim decided only where "
    "it is the same at both budgets (claim_budget)",
}

EXPERIMENTS = [
    Experiment(
        "sgr.tab4conv",
        table4_conv,
        BPFreeConfig,
        PRESETS,
        RUN_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note=NOTE,
        choices=CHOICES,
        shares="the conv runs: run cache sgr.local (network conv4) and sgr.bpfree (network conv)",
        scale=local_scale,
        unused=unused,
    )
]
