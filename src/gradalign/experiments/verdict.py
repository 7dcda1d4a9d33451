"""A reproduction's verdict, derived from its checks, its preconditions and its evidence, never typed in.

Two kinds of element (`EVIDENCE`):

- **analytic**: a derivation, a definition or a closed form checked numerically. Reproduced when every check
  passes, not reproduced otherwise.
- **empirical**: a claim about trained models or simulated dynamics. Its verdict is decided only by a valid
  test. Its *preconditions* (the runs finished learning, the baseline fits its labels, the method's own term
  acted, the baseline is near the book's reference, enough seeds) are checks of the test itself:

  - any two-sided precondition unmet: **inconclusive**, naming it;
  - else a claim that failed beyond noise (a check whose `passed` is false and that is not `within_noise`):
    **not reproduced**;
  - else a claim not decided: its difference within noise (`within_noise`), or its decision not the same at the
    full budget and at half of it (`budget_unstable`, `experiments.claim_budget`): **inconclusive**;
  - else **reproduced**;
  - a *one-sided* precondition (`one_sided`: the status it blocks) makes only that status inconclusive: a baseline
    that cannot fit its labels flatters the method and blocks "reproduced", and leaves a decided loss standing; a
    method's arm that cannot fit its labels handicaps the method and blocks "not reproduced".

"Not run here" belongs to an element with no record. The scale (`scope`: the paper's setting, `exact`, or a
`reduced` one the experiment names) is shown beside the status and never changes it. The verdict lives apart
from the experiments so that the results store can derive a stored record's verdict again and reject one
that was edited.
"""

from __future__ import annotations

RULES = 4  # version of these rules; a stored record names the rules its verdict was derived under
SCOPES = ("exact", "reduced")  # the paper's setting as published, or a reduced one (data, steps, seeds)
EVIDENCE = ("analytic", "empirical")
STATUSES = ("reproduced", "not reproduced", "inconclusive", "not run here")


def derive_verdict(
    checks: dict[str, dict], scope: str, preconditions: dict[str, dict] | None = None, evidence: str = "analytic"
) -> dict:
    """{"status", "failed", "unmet", "within_noise", "unstable"} from the checks (the paper's claims), the
    preconditions (empirical elements only) and the scope.

    `failed`: claims that failed beyond noise; `within_noise`: claims not decided (difference within noise, or too
    few seeds); `unstable`: claims whose decision differs between the full budget and half of it; `unmet`:
    preconditions that do not hold and block the status (a one-sided one blocks only the status it names).
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    if evidence not in EVIDENCE:
        raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}; got {evidence!r}")
    preconditions = preconditions or {}
    if evidence == "analytic" and preconditions:
        raise ValueError("an analytic element has no preconditions")
    undecided = {n for n, c in checks.items() if not c["passed"] and c.get("within_noise", False)}
    unstable = sorted(n for n in undecided if checks[n].get("budget_unstable", False))
    noise = sorted(undecided - set(unstable))
    failed = sorted(n for n, c in checks.items() if not c["passed"] and n not in undecided)
    if evidence == "analytic":
        failed = sorted(failed + noise + unstable)  # an analytic check has no noise to hide in
        noise, unstable = [], []
    status = "not reproduced" if failed else "inconclusive" if noise or unstable else "reproduced"
    unmet = sorted(n for n, c in preconditions.items() if not c["passed"] and c.get("one_sided", status) == status)
    if unmet:
        status = "inconclusive"
    return {"status": status, "failed": failed, "unmet": unmet, "within_noise": noise, "unstable": unstable}


def undecided(verdict: dict, checks: dict[str, dict] | None = None) -> tuple[list[str], list[str]]:
    """The claims the verdict lists as within noise, split: (those whose difference is within noise, those whose
    runs did not measure their quantity: `not_recorded`, known only from `checks`)."""
    checks = checks or {}
    unmeasured = [n for n in verdict.get("within_noise", []) if (checks.get(n) or {}).get("not_recorded")]
    return [n for n in verdict.get("within_noise", []) if n not in unmeasured], unmeasured


def reason(verdict: dict, preconditions: dict[str, dict] | None = None, checks: dict[str, dict] | None = None) -> str:
    """Why an element is inconclusive or not reproduced, in words ("" when reproduced). With `checks`, a claim its
    runs did not measure (`not_recorded`, listed with `within_noise`) is named as not measured."""
    preconditions, checks = preconditions or {}, checks or {}
    if verdict["status"] == "inconclusive":
        if verdict["unmet"]:
            return "precondition not met: " + "; ".join(
                preconditions.get(n, {}).get("claim", n) if preconditions else n for n in verdict["unmet"]
            )
        parts = []
        if verdict.get("unstable"):
            parts.append("decision not the same at half the budget: " + ", ".join(verdict["unstable"]))
        noise, unmeasured = undecided(verdict, checks)
        if noise:
            parts.append("difference within noise: " + ", ".join(noise))
        if unmeasured:
            parts.append("not measured by these runs: " + ", ".join(unmeasured))
        return "; ".join(parts)
    if verdict["status"] == "not reproduced":
        return "failed: " + ", ".join(verdict["failed"])
    return ""
