"""A stored record's checks, derived again from its stored metrics when it is read (issue 48, item 6).

The store derives a record's verdict from its checks (`results`), and its digest says only that nobody edited it
without recomputing the digest, which anyone can do (`schema`). So a record whose checks were all set to "passed"
(its digest recomputed) would show "reproduced". `checks_problem` says why a record's checks do not follow from
what it measured, and the store then treats it as an edited record (reported, recomputed):

- an empirical element whose claims are derived from its per-seed metrics (`experiments.validity`): each claim is
  derived again (`claims(record)`) and must agree, passed and within noise, with the stored one (a claim the budget
  check left undecided, `budget_unstable`, must not be passed);
- an analytic element with a re-derivation here (`ANALYTIC`, from the experiment's own check function): each check
  derived again from the metrics and curves must agree;
- every check: one marked passed whose measured number breaks its own rule's closing threshold (`x < 1e-2`,
  `> 0.4`, `<= 1`) does not follow from its value.

What the metrics themselves say is not checked: a forger who edits the metrics consistently, checks and digest
alike, is not caught here (a digest proves no origin: book/appendix/design.md, "Records").
"""

from __future__ import annotations

import re
from typing import Callable

_ERRORS = (KeyError, TypeError, IndexError, ValueError, ZeroDivisionError, AttributeError)
# the closing threshold of a rule: `< 1e-2`, `<= 1`, `> 0.4` at the end or before `;`, `,`, `(` or ` at ...`
_THRESHOLD = re.compile(r"(<=|>=|<|>|≤|≥)\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=$|[\s;,)(])")
_COMPARE = {
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "≤": lambda a, b: a <= b,
    "≥": lambda a, b: a >= b,
}


def _figure1(record: dict) -> dict:
    """lga.fig1: the checks of `linear.figure1_checks` from the stored steps to each level, c at the last step
    (metrics) and c at step 0 (the first point of each stored curve)."""
    from gradalign.experiments.lga.linear import LEVELS, figure1_checks

    metrics, config = record["metrics"], record["config"]
    times = {level: metrics[f"steps_to_{level}"] for level in LEVELS}
    c0 = [curve[0] for curve in record["curves"]["c"]]
    return figure1_checks(times, len(config["lambda_l"]), len(config["lambda_u"]), metrics["c_final"], c0)


ANALYTIC: dict[str, Callable[[dict], dict]] = {"lga.fig1": _figure1}


def derived_checks(record: dict) -> dict | None:
    """The record's checks derived again from its metrics, or None where they cannot be (no re-derivation for
    its element, or a record of earlier rules that lacks what they need: `rederive` says so)."""
    from gradalign.experiments.validity import EMPIRICAL

    element_id = record["id"]
    if element_id in EMPIRICAL:
        claims = EMPIRICAL[element_id][1]
        if claims is None or "evaluated" in record.get("preconditions", {}):
            return None
        derive = claims
    elif element_id in ANALYTIC:
        derive = ANALYTIC[element_id]
    else:
        return None
    try:
        return derive(record) or None
    except _ERRORS:
        return None


def checks_problem(record: dict) -> str | None:
    """Why the record's stored checks do not follow from its stored metrics, or None (see the module's text)."""
    stored = record["checks"]
    for name, check in stored.items():
        broken = _breaks_own_rule(check)
        if broken:
            return f"has the check {name!r} passed where its value breaks its rule ({broken})"
    derived = derived_checks(record)
    for name, check in (derived or {}).items():
        kept = stored.get(name)
        if kept is None:
            return f"lacks the check {name!r} that its metrics give"
        if kept.get("budget_unstable"):
            if kept["passed"]:
                return f"has the check {name!r} passed where its budget check left it undecided"
            continue
        if kept["passed"] != check["passed"] or bool(kept.get("within_noise")) != bool(check.get("within_noise")):
            return (
                f"has checks that do not follow from its metrics ({name!r} is stored {_state(kept)}, its metrics "
                f"give {_state(check)})"
            )
    return _preconditions_problem(record)


def _preconditions_problem(record: dict) -> str | None:
    """A precondition stored as met that the record's metrics measure as unmet (the forger's direction: an unmet
    one only makes the verdict inconclusive). Measured where the element measures them (`experiments.validity`)."""
    from gradalign.experiments.validity import EMPIRICAL

    stored = record.get("preconditions", {})
    if record["id"] not in EMPIRICAL or "evaluated" in stored or not any(c["passed"] for c in stored.values()):
        return None
    try:
        measured = EMPIRICAL[record["id"]][0](record)
    except _ERRORS:
        return None
    for name, check in measured.items():
        kept = stored.get(name, {})
        if isinstance(kept.get("value"), dict) and "arms_checked" in kept["value"]:
            continue  # replaced by the claim-level budget check (`assess`), which reads the half-budget runs
        if kept.get("passed") and not check["passed"]:
            return f"has the precondition {name!r} met where its metrics measure it unmet"
    return None


def _state(check: dict) -> str:
    return "passed" if check["passed"] else "within noise" if check.get("within_noise") else "failed"


def _breaks_own_rule(check: dict) -> str | None:
    """`value op threshold` when a check marked passed has a number that breaks its rule's closing threshold."""
    value, rule = check.get("value"), check.get("rule")
    if not check.get("passed") or not isinstance(rule, str) or isinstance(value, bool):
        return None
    if not isinstance(value, (int, float)):
        return None
    found = list(_THRESHOLD.finditer(rule))
    if not found:
        return None
    op, threshold = found[-1].group(1), float(found[-1].group(2))
    if _COMPARE[op](value, threshold):
        return None
    return f"measured {value:g}, rule {op} {threshold:g}"
