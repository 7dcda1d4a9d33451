"""A reproduction's verdict, derived from its checks and its scope, never typed in.

It lives apart from the experiments so that the results store can derive a stored record's verdict
again and reject one that was edited by hand.
"""

from __future__ import annotations

SCOPES = ("exact", "reduced")  # the paper's setting as published, or a reduced one (data, steps, seeds)


def derive_verdict(checks: dict[str, dict], scope: str) -> dict:
    """{"status", "failed"}: not reproduced when a check failed, else reproduced (qualitatively when reduced)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    failed = [name for name, c in checks.items() if not c["passed"]]
    if failed:
        return {"status": "not reproduced", "failed": failed}
    if scope == "exact":
        return {"status": "reproduced", "failed": []}
    return {"status": "reproduced qualitatively at reduced scale", "failed": []}
