"""Claim-level budget stability (rules version 4): a comparison is decided only when halving the budget leaves it be.

A claim of the papers compares arms ("SGR beats layer-wise training"). Whether each run had finished learning is a
stricter question than the claim asks: at Table 3's scale every arm still gains 1.7 to 3.5 points from 30 to 60
epochs, while SGR − layer-wise barely moves (ResNet-32: −6.05, then −5.90). The budget check trains every seed of
every arm again with the whole schedule compressed into half the epochs or steps (the same specs otherwise), and
decides each claim at both budgets B and B/2:

- each comparison's decision (`rules.decide`: beats, within noise, loses) at B and at B/2;
- the change of its difference, c = d(B) − d(B/2), with its standard error: paired by seed where both budgets
  carry the per-seed values of both arms (the same seeds: c_s = (a_s − b_s)(B) − (a_s − b_s)(B/2), SE = sd(c_s)/√n),
  else sqrt(SE(B)² + SE(B/2)²);
- the comparison is **budget-stable** when its decision is the same at both budgets and |c| < max(`MIN_CHANGE`,
  2 SE(c)); a claim over several comparisons is stable when every one is;
- a claim about a level (a check with no comparison: "global BP collapses at depth 57") is stable when it passes
  or fails alike at both budgets.

A budget-stable claim is decided at B, even when its arms still gain. An unstable one is not decided: its check is
marked `budget_unstable` (and `within_noise`, so that no verdict rests on it), and keeps both decisions and the
change in `budget` for the page. Fixed before any new half-budget run was seen (issue 43).
"""

from __future__ import annotations

import math

from gradalign.experiments.rules import sig

MIN_CHANGE = 0.5  # points: a change of the difference below this is stable whatever its SE (the rule)


def comparisons(check: dict) -> dict[str, dict]:
    """The comparison values in a check: {"": value} for one `rules.compare`, its parts for `rules.all_of`, {} for a
    check of a level."""
    value = check.get("value")
    if isinstance(value, dict) and "decision" in value:
        return {"": value}
    if isinstance(value, dict) and value and all(isinstance(v, dict) and "decision" in v for v in value.values()):
        return value
    return {}


def change(full: dict, half: dict) -> dict:
    """The budget check of one comparison (`rules.decide` values at B and at B/2)."""
    c = full["diff"] - half["diff"]
    seeds = [full.get(k) for k in ("values_a", "values_b")] + [half.get(k) for k in ("values_a", "values_b")]
    paired = all(isinstance(v, list) for v in seeds) and len({len(v) for v in seeds}) == 1 and len(seeds[0]) > 1
    if paired:
        per_seed = [(fa - fb) - (ha - hb) for fa, fb, ha, hb in zip(*seeds)]
        mean = sum(per_seed) / len(per_seed)
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_seed) / (len(per_seed) - 1))
        se = sd / math.sqrt(len(per_seed))
    else:
        se = math.sqrt(full["se"] ** 2 + half["se"] ** 2)
    same = full["decision"] == half["decision"]
    return {
        "full": full["decision"],
        "half": half["decision"],
        "diff_half": half["diff"],
        "change": sig(c),
        "se": sig(se),
        "paired": paired,
        "stable": bool(same and abs(c) < max(MIN_CHANGE, 2 * se)),
    }


def stabilise(full: dict[str, dict], half: dict[str, dict], budgets: tuple[str, str]) -> dict[str, dict]:
    """`full`'s claim checks (decided at B), each with its budget check against `half` (the same claims at B/2);
    `budgets` names them for the page ("60 epochs", "30 epochs"). A claim missing at B/2 is not stable."""
    out = {}
    for name, check in full.items():
        other = half.get(name)
        parts = comparisons(check)
        if other is None:
            budget = {"stable": False, "why": f"no decision at {budgets[1]}"}
        elif parts:
            halves = comparisons(other)
            rows = {p: change(v, halves[p]) if p in halves else {"stable": False} for p, v in parts.items()}
            budget = {"stable": all(r["stable"] for r in rows.values()), "comparisons": rows}
        else:
            budget = {"stable": check["passed"] == other["passed"], "half_passed": other["passed"]}
        budget["budgets"] = list(budgets)
        decided = check["passed"] or not check.get("within_noise", False)
        updated = {**check, "budget": budget}
        if decided and not budget["stable"]:
            updated.update(passed=False, within_noise=True, budget_unstable=True)
        out[name] = updated
    return out


def replaces_finished_learning(checked: int, budgets: tuple[str, str], gains: dict) -> dict:
    """The finished-learning precondition where every arm has its runs at half the budget: replaced by the
    claim-level check, which every claim carries (`stabilise`); `checked` counts the arms (or runs) at half the
    budget, and `gains` (arm -> mean gain from B/2 to B) is shown where known."""
    from gradalign.experiments.base import check

    return check(
        True,
        {"arms_checked": checked, "gain_from_half": gains},
        f"every arm has every seed at {budgets[1]} as well as at {budgets[0]}: each claim is decided only where its "
        f"decision is the same at both budgets and its difference moved by less than max({MIN_CHANGE:g}, 2 SE) "
        "(claim-level budget stability; the arms may still gain)",
        "the claims are stable under halving the budget (checked claim by claim)",
    )


def half_overrides(config: dict) -> dict | None:
    """The overrides that halve a record's budget with the whole schedule compressed into it (every schedule here is
    a fraction of the run, or a cosine over it): `protocol.epochs`, `protocol.steps`, or Table 1's per-data-set
    `epochs`; None for an element with no budget to halve."""
    protocol = config.get("protocol") if isinstance(config.get("protocol"), dict) else {}
    for name in ("epochs", "steps"):
        if isinstance(protocol.get(name), int) and protocol[name] > 1:
            return {f"protocol.{name}": protocol[name] // 2}
    epochs = config.get("epochs")
    if isinstance(epochs, list) and epochs and all(isinstance(e, int) and e > 1 for e in epochs):
        return {"epochs": [e // 2 for e in epochs]}
    return None


def _budget_name(overrides: dict, config: dict) -> tuple[str, str]:
    ((name, half),) = overrides.items()
    unit = "steps" if name.endswith("steps") else "epochs"
    full = config["protocol"][name.split(".")[-1]] if name.startswith("protocol.") else config["epochs"]
    words = (lambda v: f"{', '.join(map(str, v))} {unit}") if isinstance(half, list) else (lambda v: f"{v:,} {unit}")
    return words(full), words(half)


class _NotCommitted(Exception):
    """A run the experiment reads at half its budget is neither committed nor kept as diverged."""


def at_half_budget(record: dict) -> tuple[dict, tuple[str, str], int] | None:
    """The record's experiment at half its budget (`half_overrides`, and what its `Experiment.half_budget` adds: B's
    choice where the experiment makes one), assembled from its committed runs and never trained: a record-shaped
    dict (config, metrics, curves, checks), the two budgets' names and how many of its own runs it read (not those
    it shares with the full budget); None unless every run it reads is committed (`committed.entries`) or kept as
    diverged.

    It reads what the experiment reads at B/2, as `gradalign run` would: a tuning's candidates and the final runs at
    the rates it chooses, not every unit a sweep may compute (Table 4's finals at every rate of the grid). A run
    kept as diverged (`diverged_runs`, with its commit and hardware) is read as its divergence, which the
    experiment's own rule scores (a tuning candidate scores 0; a final run moves to the next rate)."""
    from gradalign.errors import DivergenceError
    from gradalign.experiments import get
    from gradalign.experiments.committed import entries, resolved, units
    from gradalign.experiments.diverged_runs import every_diverged
    from gradalign.store.run_unit import committed_runs
    from gradalign.store.store_root import results_root

    budget = half_overrides(record.get("config", {}))
    if budget is None:
        return None
    exp = get(record["id"])
    overrides = {**budget, **(exp.half_budget(record) if exp.half_budget else {})}
    shared = {unit.key for unit in units(record)}  # the full budget's runs (a tuning's are the same at both)
    own = [(unit, entry) for unit, entry in entries(record, overrides) if unit.key not in shared]
    kept = every_diverged()
    if not any(entry is not None or unit.key in kept for unit, entry in own):
        return None  # no run of its own at half the budget yet: the experiment is not even opened
    cfg = resolved(record, overrides)
    divergences: set[str] = set()

    def missing(unit):
        if unit.key not in kept:
            raise _NotCommitted(unit.label)
        divergences.add(unit.key)
        raise DivergenceError(f"{kept[unit.key]['why']} (kept as diverged, {kept[unit.key]['hardware']})")

    try:
        with committed_runs(results_root() / "runs", write=False, missing=missing) as committed:
            out = exp.run(cfg, "cpu")  # reads committed runs and kept divergences; trains nothing
    except (_NotCommitted, DivergenceError):  # a run not there yet, or a divergence the experiment does not score
        return None
    half = {**record, "config": cfg.to_dict(), "metrics": out["metrics"], "curves": out["curves"]}
    read = len({key for _, key in committed.read} - shared) + len(divergences - shared)  # its own runs
    return {**half, "checks": out["checks"]}, _budget_name(budget, record["config"]), read


HALF_BUDGET_QUEUE = (
    "lga.fig7",
    "lga.tab1",
    "metagrad.tab4",
    "metagrad.tab1",
    "metagrad.fig2",
    "isoloss.tab1",
)
"""Elements whose runs at half their `cpu` budget a GPU window trains (runs only: `at_half_budget` reads them), so
that their claims are decided at both budgets; Figures 5 and 6 of LGA read Figure 7's runs, metagrad's Figure 3
Table 1's. SGR's Table 4 (and Figures 2-4, which read its runs) left the queue once every run its experiment reads
at 20 epochs was committed or kept as diverged (on a Xeon CPU, stops 69-70; its 5 seeds since stop 70):
`at_half_budget` reads only those (its 8-epoch tuning is the full budget's), not the finals at rates the tuning did
not choose. Tables 3, 6 and 7's are `pilots.BUDGET_CHECKS`."""


def half_budget_item(element_id: str) -> tuple[str, str, dict]:
    """The backlog item (element, "cpu", overrides) of an element's runs at half its `cpu` budget."""
    from gradalign.experiments import get

    overrides = half_overrides(get(element_id).resolve("cpu", {}).to_dict())
    if overrides is None:
        raise ValueError(f"{element_id} has no budget to halve")
    return element_id, "cpu", overrides


def is_half_budget(element_id: str, preset: str, overrides: dict) -> bool:
    """Whether a backlog item is an element's runs at half its `cpu` budget (`HALF_BUDGET_QUEUE`)."""
    return element_id in HALF_BUDGET_QUEUE and (element_id, preset, overrides) == half_budget_item(element_id)


def choice_half_item(record: dict) -> tuple[str, str, dict]:
    """The backlog item of a stored `cpu` record's runs at half its budget where its experiment gives B/2 its choice
    (`Experiment.half_budget`: `sgr.lamfull`): queued only once the record, and so the choice, exists."""
    from gradalign.experiments import get

    given = get(record["id"]).half_budget(record)
    return record["id"], "cpu", {**half_overrides(record["config"]), **given}


def is_choice_half(element_id: str, preset: str, overrides: dict) -> bool:
    """Whether a backlog item is `choice_half_item`'s (its overrides carry the choice, `chosen`)."""
    from gradalign.experiments import get

    return preset == "cpu" and "chosen" in overrides and get(element_id).half_budget is not None
