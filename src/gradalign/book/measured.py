"""What a check or precondition measured, in words and numbers: the "measured" column of the book's check and
precondition tables, the command line's check lines, and the reasons beside a verdict.

One formatter, `format_value`, for every kind of value a record stores (tests/test_report.py runs it on every
kind in the committed records): a number (`number`: three significant digits, a power of ten for a small one), a
list, a comparison between two arms (`rules.compare`: means, difference, Welch's t, interval, decision), a
finished-learning count, each precondition kind by what it measures ("worst run 4.53 % error (18 runs)"), and any
other mapping as "name value; name value" with its names in words (`label`), never as a Python dict.
"""

from __future__ import annotations

import math

from gradalign.experiments.verdict import reason, undecided

SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")
NAMES = {"fashion_mnist": "Fashion-MNIST", "global_bp": "global BP", "layer-wise": "layer-wise"}


def breakable(name: str) -> str:
    """A name that may wrap after its underscores (zero-width spaces), so narrow columns fit."""
    return name.replace("_", "_\u200b")


def _signed(x: float) -> str:
    return f"{x:+.3g}"


def number(x: float | int) -> str:
    """An int with thousands separators; a float to three significant digits, a small one (below 0.01) as a
    power of ten ("7.98×10⁻⁴", not "0.000798"); NaN and infinities in words."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if math.isnan(x):
        return "not a number"
    if math.isinf(x):
        return "infinite" if x > 0 else "minus infinite"
    if x != 0 and abs(x) < 0.01:
        mantissa, exponent = f"{x:.2e}".split("e")
        return f"{float(mantissa):.3g}×10{str(int(exponent)).translate(SUPERSCRIPT)}"
    return f"{x:.3g}"


def label(name: object) -> str:
    """A key of a stored value in words: `worst_run` -> "worst run", `fashion_mnist/K=2` -> "Fashion-MNIST/K=2"."""
    text = str(name)
    for raw, words in NAMES.items():
        text = text.replace(raw, words)
    return text.replace("_", " ")


def _g(x: float, digits: int = 3) -> str:
    """`digits` significant digits; a small number as a power of ten (`number`)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x != 0 and abs(x) < 0.01:
        return number(float(x))
    return f"{x:.{digits}g}"


def _comparison(value: dict) -> str:
    """A comparison between two arms (`rules.compare`)."""
    n = f", n = {value['n_a']}/{value['n_b']}" if "n_a" in value else ""
    tie = " (tie)" if value.get("tie") else ""
    diff = ("+" if value["diff"] >= 0 else "") + _g(value["diff"])
    text = f"{_g(value['a'], 4)} vs {_g(value['b'], 4)}: d = {diff} ± {_g(value['se'])} SE{n}{tie}"
    if "ci95" in value:  # rules version 4: Welch's t, its degrees of freedom, the interval and the decision
        low, high = value["ci95"]
        t = value["t"] if isinstance(value["t"], str) else _g(value["t"])
        text += f", t = {t}, ν = {_g(value['nu'])}, 95 % CI [{_g(low)}, {_g(high)}]: {value['decision']}"
        if "detectable" in value:
            text += f" (detectable at 80 % power: {_g(value['detectable'])})"
    return text


def _finished_words(value: dict, page: bool) -> str:
    """A finished-learning precondition's value (`rules.finished_learning`, `budget_rule.finished_with_budget`)."""
    still = value["still_improving"]
    text = f"{value['finished']} of {value['runs']} runs finished; still improving: {format_value(still, page)}"
    if value.get("too_few_evaluations"):
        text += f"; too few evaluations: {format_value(value['too_few_evaluations'], page)}"
    if value.get("half_budget_runs_missing"):
        text += f"; runs at half the budget missing: {format_value(value['half_budget_runs_missing'], page)}"
    checked = value.get("budget_checked") or {}
    if checked:
        arms = [
            f"{label(k)} {c['full']:.4g} vs {c['half']:.4g} ({_signed(c['gain'])}"
            + (f" ± {c['se']:.2g} SE" if c.get("se") is not None else "")
            + ": "
            f"{'finished' if c['finished'] else 'not finished'})"
            for k, c in checked.items()
        ]
        text += "; budget check, full budget vs half: " + ", ".join(arms)
    return text


def _precondition(value: dict, page: bool) -> str | None:
    """A precondition's value by what it measures (`experiments.validity`); None for any other mapping."""
    keys = set(value)
    if keys == {"runs", "worst", "worst_run"}:  # fits_labels: error on the run's own labeled set
        return f"worst run {number(value['worst'])} % error ({value['worst_run']}; {value['runs']} runs)"
    if keys == {"arms", "fewest"}:  # enough_seeds
        return f"fewest seeds in an arm: {value['fewest']} ({value['arms']} arm{'s' if value['arms'] != 1 else ''})"
    if keys == {"arms"}:
        return f"{value['arms']} arm{'s' if value['arms'] != 1 else ''} checked"
    if keys == {"least", "mean", "trials"}:
        return f"mean {number(value['mean'])}, least {number(value['least'])} over {value['trials']} trials"
    if keys == {"control", "control_runs_missing"}:
        missing = value["control_runs_missing"]
        return f"control ({value['control']}): {missing} run{'s' if missing != 1 else ''} missing"
    if keys == {"arms_checked", "gain_from_half"}:
        gains = "; ".join(f"{label(k)} {_signed(v)}" for k, v in value["gain_from_half"].items())
        if not gains:  # `records.assess`'s claim-level check: it counts the runs it read at both budgets
            return f"{value['arms_checked']} runs at both budgets"
        return f"{value['arms_checked']} arms checked; gain from half the budget to the full one: {gains}"
    if value and all(isinstance(v, dict) and {"baseline", "reference"} <= set(v) for v in value.values()):
        return "; ".join(_near_reference(label(k), v) for k, v in value.items())  # per label count
    return None


def _near_reference(name: str, v: dict) -> str:
    """One label count of `near_reference`; without a usable reference its value holds why (a string)."""
    baseline = "not recorded" if v["baseline"] is None else _g(v["baseline"], 4)
    if isinstance(v["reference"], str):
        return f"{name}: baseline {baseline}; no reference ({v['reference']})"
    gap = f" (gap {_signed(v['gap'])})" if "gap" in v else ""
    return f"{name}: baseline {baseline} vs reference {_g(v['reference'], 4)}{gap}"


def format_value(value, page: bool = True) -> str:
    """A check's or precondition's measured value in words and numbers; `page`: names may wrap after their
    underscores (a narrow table column), not in a terminal."""
    if isinstance(value, (bool, int, float)):
        return number(value)
    if value is None:
        return "—"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value) if value else "none"
    if isinstance(value, list) and len(value) <= 12 and all(isinstance(v, (int, float, type(None))) for v in value):
        return ", ".join("—" if v is None else number(v) for v in value)
    if isinstance(value, list):
        return f"{len(value)} values (in the record)"
    if isinstance(value, dict) and {"a", "b", "diff", "se"} <= set(value):
        return _comparison(value)
    if isinstance(value, dict) and {"finished", "runs", "still_improving"} <= set(value):
        return _finished_words(value, page)
    if isinstance(value, dict):
        known = _precondition(value, page)
        if known is not None:
            return known
        key = (lambda k: breakable(label(k))) if page else label
        parts = []
        for k, v in value.items():
            inner = format_value(v, page)
            nested = isinstance(v, dict) and not {"a", "b", "diff", "se"} <= set(v) and len(v) > 1
            parts.append(f"{key(k)}: ({inner})" if nested else f"{key(k)}: {inner}")
        return "; ".join(parts) if parts else "none"
    return str(value)


def claim_of(record: dict, name: str) -> str:
    """A check's or precondition's claim in words (its id where the record has no claim for it)."""
    for key in ("checks", "preconditions"):
        if name in (record.get(key) or {}):
            return record[key][name].get("claim") or label(name)
    return label(name)


def reason_text(record: dict) -> str:
    """Why the record's element is inconclusive or not reproduced, naming each check by its claim
    (`verdict.reason` names them by id); "" when reproduced."""
    verdict = record["verdict"]
    words = lambda names: "; ".join(claim_of(record, n) for n in names)  # noqa: E731
    if verdict["status"] == "inconclusive" and not verdict.get("unmet"):
        parts = []
        if verdict.get("unstable"):
            parts.append("decision not the same at half the budget: " + words(verdict["unstable"]))
        noise, unmeasured = undecided(verdict, record.get("checks"))
        if noise:
            parts.append("difference within noise: " + words(noise))
        if unmeasured:  # listed with within_noise by the verdict (undecided); in words, what it is
            parts.append("not measured by these runs: " + words(unmeasured))
        return "; ".join(parts)
    if verdict["status"] == "not reproduced":
        return "failed: " + words(verdict["failed"])
    return reason(verdict, record.get("preconditions"))
