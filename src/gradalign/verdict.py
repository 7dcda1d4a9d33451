"""A reproduction's verdict, derived from its checks and its scope, never typed in.

DESIGN.md's verdicts: reproduced / reproduced qualitatively at reduced scale / not reproduced / not
reproduced at reduced scale / not run here. The first four follow from a record's checks (the paper's
claims only; the project's own speed targets are stored apart as `targets`) and its scope: `exact` (the
paper's setting as published) or `reduced` (other data, fewer steps or seeds; the experiment names the
scale). "Not run here" belongs to an element with no record. The verdict lives apart from the experiments
so that the results store can derive a stored record's verdict again and reject one that was edited.
"""

from __future__ import annotations

SCOPES = ("exact", "reduced")  # the paper's setting as published, or a reduced one (data, steps, seeds)
STATUSES = (
    "reproduced",
    "reproduced qualitatively at reduced scale",
    "not reproduced",
    "not reproduced at reduced scale",
    "not run here",
)


def derive_verdict(checks: dict[str, dict], scope: str) -> dict:
    """{"status", "failed"}: a failed check means not reproduced, at reduced scale when the scope is reduced."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    failed = [name for name, c in checks.items() if not c["passed"]]
    reduced = scope == "reduced"
    if failed:
        return {"status": "not reproduced at reduced scale" if reduced else "not reproduced", "failed": failed}
    return {"status": "reproduced qualitatively at reduced scale" if reduced else "reproduced", "failed": []}
