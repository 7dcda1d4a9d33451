"""SGR part: the preconditions of its empirical elements and their claims re-derived from a stored record.

Preconditions (`experiments.rules`): at least 3 seeds per arm; the runs finished learning (final test accuracy,
the number the paper reports, in 80 % of runs: it rose by less than `TOLERANCE` points over the last 20 % of
epochs, or, where an arm of Tables 3, 6 and 7 has its runs at half the epochs, the full budget's mean beat theirs
by less than `TOLERANCE`: `experiments.budget_rule`); and the mechanism acted: the SGR term (Eq. 2, mean over
modules 2 … K) at the last epoch of the SGR runs is at most half of layer-wise training's (Greedy's in Table 6,
whose modules train alone as layer-wise ones do).
"""

from __future__ import annotations

from gradalign.experiments.budget_rule import finished_with_budget
from gradalign.experiments.claim_budget import replaces_finished_learning, stabilise
from gradalign.experiments.rules import (
    enough_seeds,
    sig,
    summary,
    mechanism_active,
    not_evaluated,
    not_recorded,
    per_column,
    tuned_inside_grid,
)

TOLERANCE = 0.5  # accuracy points over the last 20 % of epochs (our choice)
ACTIVE_RATIO = 0.5  # SGR's term at most half of layer-wise training's (issue rule)


def _last_mean(rows: list[list]) -> float | None:
    values = [row[-1] for row in rows if row and row[-1] is not None]
    return sum(values) / len(values) if values and len(values) == len(rows) else None


def _finished(record: dict, keys: list[str]) -> dict:
    """Over the runs that did not diverge (a diverged run's result is stored at chance: it has no curve to judge).
    Tables 3, 6 and 7 decay the rate to zero, so an arm whose every seed has its run at half the epochs committed is
    judged by that budget check instead (`experiments.budget_rule`, `experiments.sgr.budget`)."""
    from gradalign.experiments.sgr.budget import pairs

    checked = _budget_tables(record)
    if checked is not None:
        full, half, budgets = checked
        gains = {k: sig(full[k]["mean"] - half[k]["mean"]) for k in sorted(full)}
        return replaces_finished_learning(len(full), budgets, gains)
    curves = record["curves"]
    arms = {k: [f"{k}/seed{i}" for i in range(len(curves[k]["test_acc"]))] for k in keys}
    runs = {name: row for k in keys for name, row in zip(arms[k], curves[k]["test_acc"])}
    budget = {k: pair for k, pair in pairs(record).items() if k in arms}
    out = finished_with_budget(runs, arms, budget, True, TOLERANCE, "test accuracy (%)")
    if record.get("id") in ("sgr.tab3", "sgr.tab6", "sgr.tab7"):  # what the claim-level budget check still lacks
        missing = sorted(k for k in keys if budget.get(k, (None, None))[1] is None)
        out["value"]["half_budget_runs_missing"] = missing
    return out


def _seeds(curves: dict, keys: list[str]) -> dict:
    """Seeds per arm, those that diverged included (their divergence is their result: `training.local_divergence`)."""
    return enough_seeds({k: len(curves[k]["test_acc"]) + curves[k].get("diverged", 0) for k in keys})


def _active(curves: dict, pairs: dict[str, tuple[str, str]], reference: str = "layer-wise") -> dict:
    """`pairs[name]` = (SGR run key, reference run key): the term at the last epoch, SGR against the reference."""
    values, ok = {}, True
    for name, (sgr, other) in pairs.items():
        a, b = _last_mean(curves[sgr]["sgr"]), _last_mean(curves[other]["sgr"])
        if a is None or b is None:
            return not_recorded("the mechanism acted", "the SGR term at the last epoch")
        values[name] = {"sgr": round(a, 6), reference: round(b, 6), "ratio": round(a / b, 3) if b else None}
        ok = ok and b > 0 and a <= ACTIVE_RATIO * b
    return mechanism_active(
        ok,
        values,
        f"mean SGR term at the last epoch with SGR <= {ACTIVE_RATIO:g} x {reference} training's, in every setting",
        "SGR's term fell well below that of training without it",
    )


def _datasets(record: dict) -> list[str]:
    return list(record["config"]["datasets"])


def tab3(record: dict) -> dict:
    c, cfg = record["curves"], record["config"]
    keys = [f"{d}/{n}/{m}" for d in _datasets(record) for n in cfg["networks"] for m in cfg["methods"]]
    pairs = {
        f"{d}/{n}": (f"{d}/{n}/sgr", f"{d}/{n}/layerwise")
        for d in _datasets(record)
        for n in cfg["networks"]
        if {"sgr", "layerwise"} <= set(cfg["methods"])
    }
    active = _active(c, pairs) if pairs else not_recorded("the mechanism acted", "an SGR and a layer-wise arm")
    return {"enough_seeds": _seeds(c, keys), "finished_learning": _finished(record, keys), "mechanism_active": active}


def tab6(record: dict) -> dict:
    c, cfg = record["curves"], record["config"]
    keys = [f"{d}/{m}/K={k}" for d in _datasets(record) for m in cfg["methods"] for k in cfg["splits"]]
    keys += [f"{d}/global_bp" for d in _datasets(record) if f"{d}/global_bp" in c]
    pairs = {
        f"{d}/K={k}": (f"{d}/sgr/K={k}", f"{d}/greedy/K={k}")
        for d in _datasets(record)
        for k in cfg["splits"]
        if {"sgr", "greedy"} <= set(cfg["methods"])
    }
    active = _active(c, pairs, "Greedy") if pairs else not_recorded("the mechanism acted", "an SGR and a Greedy arm")
    return {"enough_seeds": _seeds(c, keys), "finished_learning": _finished(record, keys), "mechanism_active": active}


def tab7(record: dict) -> dict:
    """The mechanism against layer-wise training at SGR's split, at each depth (records before that arm was added
    have none: not recorded)."""
    c = record["curves"]
    keys = sorted(c)
    pairs = {}
    for key in keys:
        dataset, method, depth = key.split("/")
        if method == "sgr" and f"{dataset}/layerwise/{depth}" in c:
            pairs[f"{dataset}/{depth}"] = (key, f"{dataset}/layerwise/{depth}")
    active = _active(c, pairs) if pairs else not_recorded("the mechanism acted", "a layer-wise VGG at each depth")
    return {"enough_seeds": _seeds(c, keys), "finished_learning": _finished(record, keys), "mechanism_active": active}


def bp_free(record: dict) -> dict:
    """Table 4 and Figures 2 and 4: SGR against layer-wise training of the same MLP; where the record tuned the
    learning rates, every tuned rate inside its grid."""
    c = record["curves"]
    keys = sorted(c)
    pairs = {d: (f"{d}/sgr", f"{d}/layerwise") for d in _datasets(record) if f"{d}/layerwise" in c and f"{d}/sgr" in c}
    active = _active(c, pairs) if pairs else not_recorded("the mechanism acted", "an SGR and a layer-wise arm")
    out = {"enough_seeds": _seeds(c, keys), "finished_learning": _finished(record, keys), "mechanism_active": active}
    tuning = record["metrics"].get("tuning")
    if tuning:
        # the rate the final runs trained at: a chosen rate whose final run diverged falls back to the next lower one,
        # which must be inside the grid too (Table 4's FA on the grid that ended at 0.001: chosen 0.003, diverged, final
        # 0.001 at the grid's end; the grid now starts at 0.0003)
        arms = {
            f"{d}/{m}" if len(tuning) > 1 else m: {**e, "chosen": e.get("final", e["chosen"])}
            for d, by in tuning.items()
            for m, e in by.items()
        }
        out["tuned_inside_grid"] = tuned_inside_grid(arms)
    return out


def lam(record: dict) -> dict:
    """The λ pilot: one seed of short runs per setting, so its claim check stays inconclusive by design."""
    seeds = {f"{r['network']}/K={r['K']}/{r['reduction']} λ={r['lam']:g}": 1 for r in record["metrics"]["rows"]}
    return {"enough_seeds": enough_seeds(seeds)}


def no_bn(record: dict) -> dict:
    """Table 7 without BN (`sgr.tab7nobn`): the deepest VGG's three arms, SGR's term against layer-wise's there."""
    c, depth = record["curves"], record["metrics"]["deepest"]["depth"]
    keys = [f"{m}/d={depth}" for m in ("global_bp", "sgr", "layerwise")]
    active = _active(c, {f"d={depth}": (f"sgr/d={depth}", f"layerwise/d={depth}")})
    return {"enough_seeds": _seeds(c, keys), "mechanism_active": active}


def pooled_head(record: dict) -> dict:
    """The pooled-head study (`sgr.poolhead`): SGR with each head; no mechanism precondition (its question is what a
    lighter head costs, not whether SGR's term acts)."""
    c = record["curves"]
    keys = sorted(c)
    return {"enough_seeds": _seeds(c, keys), "finished_learning": _finished(record, keys)}


def pooled_head_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.pooled_head import pooled_head_checks

    return pooled_head_checks(record["metrics"]["table"], record["metrics"]["modules"])


def lambda_study(record: dict) -> dict:
    """λ at the full budget (`sgr.lamfull`): every reading's SGR runs and layer-wise's; the mechanism at the reading
    chosen on validation (`lambda_study.lambda_mechanism`, from the rows the record keeps)."""
    from gradalign.experiments.sgr.lambda_study import lambda_mechanism

    c, m = record["curves"], record["metrics"]
    keys = sorted(c)
    return {
        "enough_seeds": _seeds(c, keys),
        "finished_learning": _finished(record, keys),
        "mechanism_active": lambda_mechanism(m["rows"], m["chosen"]),
    }


def lambda_study_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.lambda_study import lambda_checks

    m = record["metrics"]
    return lambda_checks(m["rows"], m["chosen"], m["modules"])


def fig3(record: dict) -> dict:
    """Figure 3 reads the runs of Figures 2 and 4: their preconditions, once the record keeps their curves."""
    return bp_free(record) if record.get("curves") else {"evaluated": not_evaluated()}


# --- claims from a stored record ----------------------------------------------------------------------------


def _prefixed(record: dict, dataset: str, checks: dict) -> dict:
    return {n if len(_datasets(record)) == 1 else f"{dataset}_{n}": c for n, c in checks.items()}


def _budget_tables(record: dict) -> tuple[dict, dict, tuple[str, str]] | None:
    """(summaries at the record's budget B, at B/2, the two budgets' names), by arm key and with the per-seed
    values, when every arm of a Table 3, 6 or 7 record has every seed committed at both budgets and none diverged
    (`sgr.budget.pairs`); None otherwise (the per-run rule then stands)."""
    from gradalign.experiments.sgr.budget import pairs

    found = pairs(record)
    if not found or set(found) != set(record["curves"]) or any(h is None for _, h in found.values()):
        return None
    epochs = record["config"]["protocol"]["epochs"]
    full = {k: {**summary(f), "diverged": 0} for k, (f, _) in found.items()}
    half = {k: {**summary(h), "diverged": 0} for k, (_, h) in found.items()}
    return full, half, (f"{epochs} epochs", f"{max(1, epochs // 2)} epochs")


def _at_both_budgets(record: dict, claims_of) -> dict:
    """`claims_of(arms)` (arm key -> summary) at the record's budget, each claim with its budget check
    (`claim_budget.stabilise`) when every arm has its runs at half the budget; from the stored table otherwise."""
    checked = _budget_tables(record)
    if checked is None:
        return claims_of(None)
    full, half, budgets = checked
    return stabilise(claims_of(full), claims_of(half), budgets)


def tab3_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.local_bp import table3_checks

    def claims_of(arms: dict | None) -> dict:
        tables = record["metrics"]["table"]
        if arms is not None:
            tables = {d: {n: {m: arms[f"{d}/{n}/{m}"] for m in t[n]} for n in t} for d, t in tables.items()}
        return per_column(tables, table3_checks, len(_datasets(record)) > 1)

    return _at_both_budgets(record, claims_of)


def tab6_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.local_bp import table6_checks

    def claims_of(arms: dict | None) -> dict:
        out = {}
        for d, table in record["metrics"]["table"].items():
            by_k = {m: {int(k): s for k, s in row.items()} for m, row in table.items()}
            global_bp = record["metrics"]["global_bp"][d]
            if arms is not None:
                by_k = {m: {k: arms[f"{d}/{m}/K={k}"] for k in row} for m, row in by_k.items()}
                global_bp = arms.get(f"{d}/global_bp")
            out.update(_prefixed(record, d, table6_checks(by_k, global_bp)))
        return out

    return _at_both_budgets(record, claims_of)


def tab7_claims(record: dict) -> dict:
    """Table 7's level claims (`local_bp.table7_checks`), at both budgets where the runs at half the epochs exist."""
    from gradalign.data.image_sets import image_set_info
    from gradalign.experiments.sgr.local_bp import table7_checks

    def claims_of(arms: dict | None) -> dict:
        out = {}
        for ds, table in record["metrics"]["table"].items():
            bp = {int(d): s for d, s in table["global_bp"].items()}
            sgr = {int(d): s for d, s in table["sgr"].items()}
            if arms is not None:
                bp = {d: arms[f"{ds}/global_bp/d={d}"] for d in bp}
                sgr = {d: arms[f"{ds}/sgr/d={d}"] for d in sgr}
            checks = table7_checks(bp, sgr, image_set_info(ds).chance_accuracy)
            out.update({n if len(_datasets(record)) == 1 else f"{ds}_{n}": c for n, c in checks.items()})
        return out

    return _at_both_budgets(record, claims_of)


def tab4_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.bp_free import table4_checks

    return per_column(record["metrics"]["table"], table4_checks, len(_datasets(record)) > 1)


def tab4conv(record: dict) -> dict:  # Table 4's preconditions, finished learning by the budget check once B/2 is in
    from gradalign.experiments.sgr.bp_free_conv import budget_gains, budgets

    out, gains = bp_free(record), budget_gains(record)
    if gains is not None:
        out["finished_learning"] = replaces_finished_learning(len(gains), budgets(record), gains)
    return out


def tab4conv_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.bp_free_conv import budgets, half_budget_checks

    half = half_budget_checks(record)  # Table 4's claims at B/2: each claim at B with its budget check against them
    return tab4_claims(record) if half is None else stabilise(tab4_claims(record), half, budgets(record))


def _figure_claims(record: dict, checks_of) -> dict:
    c, out = record["curves"], {}
    for d in _datasets(record):
        out.update(_prefixed(record, d, checks_of(c[f"{d}/sgr"], c[f"{d}/layerwise"])))
    return out


def fig2_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.bp_free_figures import figure2_checks

    return _figure_claims(record, figure2_checks)


def fig4_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.bp_free_figures import figure4_checks

    return _figure_claims(record, figure4_checks)


def fig3_claims(record: dict) -> dict:
    from gradalign.experiments.sgr.bp_free_figures import figure3_checks

    effects = record["metrics"]["input_effect"]
    out = {}
    for d in _datasets(record):
        out.update(_prefixed(record, d, figure3_checks(effects[d])))
    return out


VALIDITY = {
    "sgr.tab3": (tab3, tab3_claims),
    "sgr.tab6": (tab6, tab6_claims),
    "sgr.tab7": (tab7, tab7_claims),
    "sgr.tab4": (bp_free, tab4_claims),
    "sgr.tab4conv": (tab4conv, tab4conv_claims),
    "sgr.fig2": (bp_free, fig2_claims),
    "sgr.fig4": (bp_free, fig4_claims),
    "sgr.fig3": (fig3, fig3_claims),
    "sgr.lam": (lam, None),
    "sgr.lam7": (lam, None),
    "sgr.tab7nobn": (no_bn, None),
    "sgr.poolhead": (pooled_head, pooled_head_claims),
    "sgr.lamfull": (lambda_study, lambda_study_claims),
}


# --- the mechanism-active precondition, as every SGR training page shows it ----------------------------------


def mechanism_summary(record: dict) -> tuple[str, dict]:
    """(one sentence, {setting: {SGR's term, the reference's, ratio}}) of a record's mechanism-active precondition
    (`_active`), with the λ and reduction it was measured at and whether that λ is the pilot's calibrated one."""
    from gradalign.experiments.sgr.local_runs import CALIBRATED

    pre = record.get("preconditions", {}).get("mechanism_active")
    cfg = record["config"]
    if pre is None:
        return f"{record['id']}: the mechanism-active precondition is not part of this record.", {}
    setting = (cfg.get("reduction", "mean"), float(cfg.get("lam", 1.0)))
    which = "a λ of its config"
    if setting == (CALIBRATED["reduction"], CALIBRATED["lam"]):
        which = "the calibrated λ of our pilot, sgr.lam"
    if setting == ("mean", 1.0):
        which = "App. E's uncalibrated λ"
    status = "met" if pre["passed"] else "not met"
    if pre.get("value") == "not recorded":
        status = "not met: not measured by these runs"
    text = (
        f"{record['id']}, λ = {setting[1]:g} with the {setting[0]} reduction ({which}): the mechanism-active "
        f"precondition is {status}. Rule: {pre['rule']}."
    )
    value = pre.get("value")
    rows = {k: v for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}
    if not rows and value not in (None, "not recorded"):
        text += f" Measured: {value}."
    return text, rows


def pilot_accuracy(pilot: dict, record: dict) -> str:
    """What the record's λ did to accuracy in the λ pilot (`sgr.lam`, `sgr.lam7`: one seed of short runs), beside
    layer-wise training's, for the page to show next to the mechanism-active precondition: the term ratio says
    whether the term acted, this says what acting cost."""
    cfg = record["config"]
    lam, reduction = float(cfg.get("lam", 1.0)), cfg.get("reduction", "mean")
    rows = [r for r in pilot["metrics"]["rows"] if r["lam"] == lam and r["reduction"] == reduction]
    reference = pilot["metrics"]["layerwise"]
    arm = lambda r: f"{r['network']}/K={r['K']}"  # noqa: E731
    parts = [
        f"{r['network']} at K = {r['K']}: SGR {r['val_acc']:.1f} %, layer-wise {reference[arm(r)]['val_acc']:.1f} %"
        for r in rows
        if arm(r) in reference
    ]
    if not parts:
        return f"The pilot `{pilot['id']}` did not try λ = {lam:g} with the {reduction} reduction."
    return (
        f"What λ = {lam:g} ({reduction} reduction) did to accuracy in the pilot (`{pilot['id']}`, one seed of short "
        f"runs, validation accuracy): {'; '.join(parts)}."
    )
