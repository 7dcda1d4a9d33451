"""A record's evidence, claims, preconditions and verdict under the current rules (`gradalign.experiments.verdict`).

`assess` runs after every experiment (`runner.run`) and on stored records made under earlier rules
(`gradalign.records.rederive`): for an empirical element it re-derives the claim checks from the record's per-seed
metrics (`experiments.validity`) and measures the preconditions of a valid test; an analytic element keeps its checks.
When a stored record lacks what the current rules need, its own checks stand and the precondition
"not yet evaluated under these rules" fails, so its verdict is inconclusive until the experiment is rerun.
"""

from __future__ import annotations

from gradalign.experiments.claim_budget import at_half_budget, replaces_finished_learning, stabilise
from gradalign.experiments.rules import not_evaluated
from gradalign.experiments.validity import EMPIRICAL, evidence_of
from gradalign.experiments.verdict import RULES, derive_verdict


def _budget_checked(record: dict, checks: dict, preconditions: dict, claims) -> tuple[dict, dict]:
    """Claim-level budget stability (`experiments.claim_budget`) wherever every run of the record's experiment at
    half its budget is committed: each claim decided at both budgets, and the per-run finished-learning rule
    replaced. (Tables 3, 6 and 7 do it in `sgr.validity`, pairing each arm's seeds.) Unchanged otherwise."""
    half = at_half_budget(record)
    if half is None:
        return checks, preconditions
    half_record, budgets, runs = half
    half_checks = (claims(half_record) if claims else None) or half_record["checks"]
    preconditions = {**preconditions, "finished_learning": replaces_finished_learning(runs, budgets, {})}
    return stabilise(checks, half_checks, budgets), preconditions


def assess(record: dict) -> dict:
    """`record` with "evidence", "checks", "preconditions", "verdict" and "rules" set under the current rules."""
    evidence = evidence_of(record["id"])
    checks, preconditions = record["checks"], {}
    if evidence == "empirical":
        measure, claims = EMPIRICAL[record["id"]]
        try:
            derived = claims(record) if claims else None
            preconditions = measure(record)
        except (KeyError, TypeError, IndexError, ValueError, ZeroDivisionError):
            derived, preconditions = None, {"evaluated": not_evaluated()}
        if derived:
            checks = derived
        if "evaluated" not in preconditions and not any("budget" in c for c in checks.values()):
            checks, preconditions = _budget_checked(record, checks, preconditions, claims)
    if not checks:
        raise ValueError(f"{record['id']}: a record with no checks has no verdict; the experiment checked nothing")
    record.update(
        evidence=evidence,
        checks=dict(sorted(checks.items())),
        preconditions=dict(sorted(preconditions.items())),
        verdict=derive_verdict(checks, record["scope"], preconditions, evidence),
        rules=RULES,
    )
    return record
