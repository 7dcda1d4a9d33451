"""The λ study's conclusions in words (`sgr.lamfull`, `experiments.sgr.lambda_study`; page sgr/02): per network, the
reading chosen on validation and SGR − layer-wise there at both budgets, and whether Tables 3 and 6 are to be rerun.
"""

from __future__ import annotations

from gradalign.experiments.sgr.lambda_study import ACTIVE_RATIO, NETWORKS


def in_words(metrics: dict, checks: dict | None = None) -> list[str]:
    """What the study says, a sentence per network and one on Tables 3 and 6. Per network: the reading chosen on
    validation (every reading's validation accuracy beside it), SGR − layer-wise there at the full budget and, from
    the record's `checks` (`records.assess`), at half of it or that those runs are not all in yet; whether its term
    acts; and the readings validation did not choose where SGR beat layer-wise at the full budget (no ground for a
    rerun: choosing them would choose λ on the test split). Tables 3 and 6 are to be rerun only at a chosen reading
    other than theirs whose claim holds at both budgets with its term acting."""
    lines, rerun, pending, table3_wins = [], [], False, False
    checks, table3 = checks or {}, metrics["table3_reading"]
    for net, name in metrics["chosen"].items():
        by_reading = metrics["rows"][net]
        d, ratio = by_reading[name]["difference"], by_reading[name]["term_ratio"]
        acts = ratio is not None and ratio <= ACTIVE_RATIO
        accs = metrics["validation_acc"].get(net) if isinstance(metrics["validation_acc"], dict) else None
        scores = f" (validation: {', '.join(f'{r} {a:.2f} %' for r, a in accs.items())})" if accs else ""
        text = f"{NETWORKS[net]}: validation chose {name}{scores}; there SGR − layer-wise is {d['diff']:+.2f} points"
        check = checks.get(f"sgr_beats_layerwise_{net}")
        budget = (check or {}).get("budget")
        half = (budget or {}).get("comparisons", {}).get("")
        if budget is None:  # its runs at half the budget are not all committed: the check stands at B alone
            text += f" at the full budget ({d['decision']}); at half the budget its runs are not all in yet"
            pending = pending or (d["decision"] == "beats" and acts and name != table3)  # a rerun still possible
        elif half is None or "diff_half" not in half:  # decided at B/2 without this comparison (`stabilise`)
            text += f" at the full budget ({d['decision']}); {budget.get('why', 'not decided at half the budget')}"
        else:
            full_name, half_name = budget.get("budgets", ["the full budget", "half of it"])
            text += f" at {full_name} ({d['decision']}), {half['diff_half']:+.2f} at {half_name} ({half['half']}): " + (
                "the same decision at both budgets" if budget["stable"] else "not budget-stable, so not decided"
            )
        if ratio is None:
            text += (
                ". Its term ratio was not measured (no SGR or layer-wise run without a divergence kept its term), so "
                "the mechanism precondition is unmet"
            )
        elif not acts:
            text += (
                f". Its term does not act (ratio {ratio:.3g} > {ACTIVE_RATIO:g}): the mechanism precondition is unmet "
                "and the verdict inconclusive"
            )
        measured = {r: each["term_ratio"] for r, each in by_reading.items() if each["term_ratio"] is not None}
        if ratio is not None and len(measured) > 1 and ratio == max(measured.values()):
            text += "; validation chose the reading whose term acts least"
        others = [r for r, each in by_reading.items() if r != name and each["difference"]["decision"] == "beats"]
        if others:
            text += (
                f". SGR {'also ' if d['decision'] == 'beats' else ''}beats layer-wise at {', '.join(others)} at the "
                f"full budget: {'readings' if len(others) > 1 else 'a reading'} validation did not choose, not "
                "budget-checked, so no ground for a rerun"
            )
        won = check is not None and check["passed"] and half is not None and acts  # `passed`: at both budgets
        rerun += [name] if won and name != table3 else []
        table3_wins = table3_wins or (won and name == table3)
        lines.append(text + ".")
    tail = f"Table 3's and Table 6's verdicts rest on {table3}"
    if rerun:
        tail += (
            f"; at {', '.join(sorted(set(rerun)))}, chosen on validation, SGR beats layer-wise at both budgets with "
            "its term acting, so Tables 3 and 6 are to be rerun there"
        )
    elif table3_wins:
        tail += "; validation chose that reading, where SGR beats layer-wise at both budgets: no rerun is needed"
    elif pending:
        tail += "; whether they are rerun waits for the chosen readings' runs at half the budget"
    else:
        tail += (
            "; at no reading chosen on validation does SGR beat layer-wise at both budgets with its term acting, so "
            "they are not rerun"
        )
    return lines + [tail + "."]
