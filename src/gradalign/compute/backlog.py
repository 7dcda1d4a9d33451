"""The backlog of GPU runs (`BACKLOG`, most valuable first) and, as a window reads it, the work that waits on a stored
record.

Some work can only be named once a record exists: the rerun a study chose (Figure 7 at `lga.tune`'s settings), or
an element's runs at half its budget given the choice made at the full one (`sgr.lamfull`). `full_backlog` adds them
when a window starts (and when the compute page lists the backlog), never at import: reading records there would make
importing the package read the results store.
"""

from __future__ import annotations

from gradalign.compute.pilots import CLOSED, ON_GPU, OVER_CPU_BUDGET, PILOTS, RUNS_LOST, queued
from gradalign.experiments.claim_budget import HALF_BUDGET_QUEUE, half_budget_item
from gradalign.experiments.lga.validity import CONTROL, CONTROLLED
from gradalign.experiments.sgr.deep_seeds import BACKLOG_ITEMS as DEEP_SEEDS

PADDED_NO_BN = ("sgr.tab7nobn", "cpu", {"pad_to": 32})
"""Table 7 without BN on Fashion-MNIST padded to CIFAR's 32 pixels: whether the collapse at 28 pixels is depth's or the
1×1 maps' (`analysis.signal_at_init`); its `cpu` scale (one seed), then its `gpu` preset (3 seeds), in the backlog."""

PADDED_LAMBDAS = tuple(("sgr.tab7nobn", "cpu", {"pad_to": 32, "lam": lam}) for lam in (1.0, 10.0))
"""The padded reading at other λ (mean reduction): its layer-wise arm (SGR at λ = 0) trained VGG-57 to 42 % where
SGR at the presets' λ = 10² (chosen on the BN VGG, `sgr.lam7`) stayed at chance, so λ is the leading alternative
explanation of SGR's half. Only SGR's run at VGG-57 trains (`vgg_without_bn.UNUSED_LAM`): about 60 min on one AVX512
EPYC thread (λ = 10²); on the AVX512 Xeon without bf16, 5,824 and 5,816 s (λ = 1 and 10, side by side, one thread
each, 2026-12-07); minutes on a GPU. Both records are stored: SGR 57.6 and 54.5 % (`padded_choice`: λ = 1)."""


def choose_lambda(accs: dict[float, float | None]) -> float | None:
    """The λ with the best validation accuracy ({λ: accuracy (%), None where every rate diverged}); a diverged λ is
    never chosen, a tie goes to the smaller λ; None when every λ diverged."""
    trained = {lam: acc for lam, acc in accs.items() if acc is not None}
    return max(trained, key=lambda lam: (trained[lam], -lam)) if trained else None


def padded_records(preset: str = "cpu") -> dict[float, dict] | None:
    """{λ: stored record} of the padded reading at the study's own λ (`PADDED_NO_BN`) and at `PADDED_LAMBDAS`'; None
    until every one of them is stored (a committed run is not enough: where it diverged, its record moves down the
    rates)."""
    from gradalign.records.runner import stored_record

    out = {}
    for _, _, overrides in (PADDED_NO_BN, *PADDED_LAMBDAS):
        record = stored_record("sgr.tab7nobn", preset, overrides)
        if record is None:
            return None
        out[float(record["config"]["lam"])] = record
    return out


def padded_choice(preset: str = "cpu") -> float | None:
    """The λ for SGR at the padded reading's deepest VGG: the study's own where SGR reached the record's mark there
    (nothing to choose), else the one validation chooses (`choose_lambda`, seed 0) among `padded_records`; None until
    they are all stored, or where every rate diverged at every λ."""
    records = padded_records(preset)
    if records is None:
        return None
    own = next(iter(records))  # the study's own λ comes first
    if records[own]["checks"]["sgr_trains_deepest_without_bn"]["passed"]:
        return own
    arms = {lam: record["metrics"]["deepest"]["arms"]["sgr"] for lam, record in records.items()}
    return choose_lambda({lam: None if arm.get("lr") is None else arm["mean"] for lam, arm in arms.items()})


BACKLOG: tuple[tuple[str, str, dict], ...] = (
    tuple((element_id, "cpu", {}) for element_id in RUNS_LOST)
    + tuple((element_id, "cpu", CONTROL) for element_id in CONTROLLED)
    + tuple(half_budget_item(element_id) for element_id in HALF_BUDGET_QUEUE)
    + queued()
    + tuple((element_id, "cpu", {}) for element_id in OVER_CPU_BUDGET)
    + tuple((PILOTS[name].element, "cpu", PILOTS[name].overrides) for name in ON_GPU if name not in CLOSED)
    + (PADDED_NO_BN,)
    + PADDED_LAMBDAS
    + DEEP_SEEDS
    + ((PADDED_NO_BN[0], "gpu", PADDED_NO_BN[2]),)
    + tuple(
        (element_id, "gpu", {})
        for element_id in (
            "sgr.tab7nobn",
            "lga.fig7",
            "lga.fig5",
            "lga.fig6",
            "lga.tab1",
            "metagrad.tab1",
            "metagrad.tab2",
            "metagrad.tab4",
            "sgr.tab3",
            "isoloss.tab1",
            "sgr.tab6",
        )
    )
)
"""(element id, preset, overrides) in priority order (the backlog of GPU runs): first the `cpu` runs lost with a
machine's cache (`pilots.RUNS_LOST`, seconds each on a GPU), then LGA's mechanism controls (α_w = 0,
`experiments.lga.validity.CONTROL`: about 2.5 min each there), then the other elements' runs at half their budget
(`claim_budget.HALF_BUDGET_QUEUE`), then the reruns of the `cpu` scales that the pilots chose (`pilots.RERUNS`) and the
budget checks (`pilots.BUDGET_CHECKS`: runs at half the epochs), in `pilots.QUEUE`'s order, then the `cpu` presets over
the two-core budget (`OVER_CPU_BUDGET`), then the pilots over it (`ON_GPU`, less the `CLOSED`), then Table 7 without BN
at 32 pixels (`PADDED_NO_BN`) and at other λ (`PADDED_LAMBDAS`), then SGR's VGG-57 at 5 seeds in both readings
(`experiments.sgr.deep_seeds`), then the padded reading's `gpu` preset, then the `gpu` presets (Table 7 without BN
first: its deepest arms at 3 seeds, then LGA's Figure 7 and its subsets after it; the meta-gradient Tables 1, 2, 4 in
that order). Units already committed are read, not trained."""


def full_backlog() -> tuple[tuple[str, str, dict], ...]:
    """`BACKLOG` with the work that waits on a stored record, read when a window starts (never at import): Figure 7
    at the settings `lga.tune` chose (`lga_rerun.items`), right after the study; and an element's runs at half its
    budget where B/2 is given B's choice (`claim_budget.choice_half_item`: `sgr.lamfull`), right after it; and the
    padded reading's `gpu` preset at the λ validation chose on that network (`padded_choice`), once it is known and
    differs from the study's own."""
    from gradalign.compute.lga_rerun import items
    from gradalign.experiments import EXPERIMENTS, get
    from gradalign.experiments.claim_budget import choice_half_item
    from gradalign.records.runner import stored_record

    out = list(BACKLOG)
    at = out.index(("lga.tune", "cpu", {})) + 1
    out[at:at] = items()
    for element_id in [e for e, exp in EXPERIMENTS.items() if exp.half_budget and (e, "cpu", {}) in out]:
        record = stored_record(element_id, "cpu")
        if record is not None:
            out.insert(out.index((element_id, "cpu", {})) + 1, choice_half_item(record))
    lam = padded_choice()
    if lam is not None and lam != get("sgr.tab7nobn").resolve("gpu", PADDED_NO_BN[2]).lam:
        at = out.index((PADDED_NO_BN[0], "gpu", PADDED_NO_BN[2]))
        out[at] = (PADDED_NO_BN[0], "gpu", {**PADDED_NO_BN[2], "lam": lam})
    return tuple(out)
