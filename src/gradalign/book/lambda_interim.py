"""The λ study's answer before its record (`sgr.lamfull`, page sgr/02): the readings chosen on validation, compared
with layer-wise training at the full budget and at half of it, by the study's own functions, from committed runs only.

The record needs every reading at 3 seeds; its verdict rests on the chosen readings, whose runs at both budgets are
committed first. Here, only once every run they read is committed (else None: that check is what keeps it from
training anything), inside `committed_runs(write=False)`: at the full budget, the chosen readings' rows as the
record computes them (`lambda_study.reading_row` on the same units: the first seed's run is the one that also
scored the choice) and their claim checks (`lambda_checks`); at half the budget, the study itself given the choice
(as the record's budget check runs it); then the record's budget check (`claim_budget.stabilise`). Nothing is
stored: the page labels it interim.
"""

from __future__ import annotations


def interim(preset: str = "cpu") -> dict | None:
    """{"metrics", "checks", "half_metrics", "budgets"} of the chosen readings, as the record will hold them for
    those readings (metrics with the choice's validation accuracies; checks with their budget check); None until the
    choice's runs and the chosen readings' runs at both budgets are all committed."""
    from gradalign.compute.pilots import uncommitted
    from gradalign.experiments import get
    from gradalign.experiments.claim_budget import half_overrides, stabilise
    from gradalign.experiments.sgr import lambda_study as study
    from gradalign.experiments.sgr.local_runs import group_units, run_group
    from gradalign.experiments.units import units_of
    from gradalign.store.run_unit import committed_runs
    from gradalign.store.store_root import results_root

    exp = get("sgr.lamfull")
    full = exp.resolve(preset, {})
    made = study.committed_choice(full)
    if made is None:
        return None
    by_name = {study.reading_name(*r): r for r in full.readings()}
    chosen = {net: by_name[name] for net, name in made["chosen"].items()}
    d, arms = full.datasets[0], [(net, "layerwise", full.modules, full.datasets[0]) for net in full.networks]
    sgr_units = {net: full.sgr_units(net, *reading) for net, reading in chosen.items()}
    given = [[net, name] for net, name in made["chosen"].items()]
    halved = exp.resolve(preset, {**half_overrides(full.to_dict()), "chosen": given})
    needed = [*group_units(full.table3(), arms), *(u for us in sgr_units.values() for u in us)]
    if uncommitted(needed + units_of("sgr.lamfull", halved)):
        return None
    with committed_runs(results_root() / "runs", write=False):
        layerwise = run_group(full.table3(), arms, "cpu")
        rows = {
            net: {
                made["chosen"][net]: study.reading_row(
                    [u.run() for u in sgr_units[net]],
                    layerwise[(net, "layerwise", full.modules, d)],
                    study.input_features(full, net),
                    reading[0],
                )
            }
            for net, reading in chosen.items()
        }
        at_half = exp.run(halved, "cpu")
    budgets = (f"{full.protocol.epochs} epochs", f"{halved.protocol.epochs} epochs")
    metrics = {
        "rows": rows,
        "validation_acc": made["validation_acc"],
        "choice_diverged": made["choice_diverged"],
        "chosen": made["chosen"],
        "table3_reading": study.reading_name(study.CALIBRATED["reduction"], study.CALIBRATED["lam"]),
        "modules": full.modules,
    }
    checks = stabilise(study.lambda_checks(rows, made["chosen"], full.modules), at_half["checks"], budgets)
    return {"metrics": metrics, "checks": checks, "half_metrics": at_half["metrics"], "budgets": budgets}


def interim_rows(result: dict) -> dict[tuple[str, str, str], dict[str, str]]:
    """The page's table of `interim`, a row per network, chosen reading and budget: SGR and layer-wise (mean ± sd
    over seeds), SGR − layer-wise with its 95 % interval, and its decision (`rules.decide`). Whether the decisions
    are budget-stable and the term ratio are in `lambda_words.in_words`' sentences."""
    from gradalign.book.page_helpers import mean_std_cell, network_title

    out = {}
    for net, by_reading in result["metrics"]["rows"].items():
        for name, row in by_reading.items():
            half = result["half_metrics"]["rows"][net][name]
            for budget, r in zip(result["budgets"], (row, half)):
                d = r["difference"]
                out[(network_title(net), name, budget)] = {
                    "SGR (%)": mean_std_cell(r["sgr"]),
                    "layer-wise (%)": mean_std_cell(r["layerwise"]),
                    "SGR − layer-wise [95 % interval]": f"{d['diff']:+.2f} "
                    + (f"[{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]" if "ci95" in d else "(too few seeds)"),
                    "decision": d["decision"],
                }
    return out
