"""A reproduction's verdict, derived from its checks, its preconditions and its evidence, never typed in.

Two kinds of element (`EVIDENCE`):

- **analytic**: a derivation, a definition or a closed form checked numerically. Reproduced when every check
  passes, not reproduced otherwise.
- **empirical**: a claim about trained models or simulated dynamics. Its verdict is decided only by a valid
  test. Its *preconditions* (the runs finished learning, the baseline fits its labels, the method's own term
  acted, the baseline is near the book's reference, enough seeds) are checks of the test itself:

  - any precondition unmet: **inconclusive**, naming it;
  - else a claim that failed beyond noise (a check whose `passed` is false and that is not `within_noise`):
    **not reproduced**;
  - else a claim whose difference lies within 2 standard errors (`within_noise`): **inconclusive**;
  - else **reproduced**.

"Not run here" belongs to an element with no record. The scale (`scope`: the paper's setting, `exact`, or a
`reduced` one the experiment names) is shown beside the status and never changes it. The verdict lives apart
from the experiments so that the results store can derive a stored record's verdict again and reject one
that was edited.
"""

from __future__ import annotations

RULES = 3  # version of these rules; a stored record names the rules its verdict was derived under
SCOPES = ("exact", "reduced")  # the paper's setting as published, or a reduced one (data, steps, seeds)
EVIDENCE = ("analytic", "empirical")
STATUSES = ("reproduced", "not reproduced", "inconclusive", "not run here")


def derive_verdict(
    checks: dict[str, dict], scope: str, preconditions: dict[str, dict] | None = None, evidence: str = "analytic"
) -> dict:
    """{"status", "failed", "unmet", "within_noise"} from the checks (the paper's claims), the preconditions
    (empirical elements only) and the scope.

    `failed`: claims that failed beyond noise; `within_noise`: claims not decided (difference within 2 standard
    errors, or too few seeds); `unmet`: preconditions that do not hold.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    if evidence not in EVIDENCE:
        raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}; got {evidence!r}")
    preconditions = preconditions or {}
    if evidence == "analytic" and preconditions:
        raise ValueError("an analytic element has no preconditions")
    noise = sorted(n for n, c in checks.items() if not c["passed"] and c.get("within_noise", False))
    failed = sorted(n for n, c in checks.items() if not c["passed"] and n not in noise)
    unmet = sorted(n for n, c in preconditions.items() if not c["passed"])
    if evidence == "analytic":
        failed = sorted(failed + noise)  # an analytic check has no noise to hide in
        noise = []
    if unmet or (noise and not failed):
        status = "inconclusive"
    else:
        status = "not reproduced" if failed else "reproduced"
    return {"status": status, "failed": failed, "unmet": unmet, "within_noise": noise}


def reason(verdict: dict, preconditions: dict[str, dict] | None = None) -> str:
    """Why an element is inconclusive or not reproduced, in words ("" when reproduced)."""
    preconditions = preconditions or {}
    if verdict["status"] == "inconclusive":
        if verdict["unmet"]:
            return "precondition not met: " + "; ".join(
                preconditions.get(n, {}).get("claim", n) if preconditions else n for n in verdict["unmet"]
            )
        return "difference within noise: " + ", ".join(verdict["within_noise"])
    if verdict["status"] == "not reproduced":
        return "failed: " + ", ".join(verdict["failed"])
    return ""
