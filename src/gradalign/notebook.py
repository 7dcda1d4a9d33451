"""Small helpers the notebooks call: preset resolution, check tables, verdicts."""

from __future__ import annotations

import os

from gradalign.config import check_preset


def resolve_preset(preset: str) -> str:
    """`$GRADALIGN_PRESET` overrides the notebook's parameter (the test suite builds the book at `smoke`)."""
    return check_preset(os.environ.get("GRADALIGN_PRESET") or preset, allow_auto=True)


def interactive_session() -> bool:
    """False in batch runs (papermill): `GRADALIGN_BATCH=1`. Widgets are built only in live
    sessions, because executing `ipywidgets.interact` under nbclient can deadlock (jupyter/nbclient#312)."""
    return os.environ.get("GRADALIGN_BATCH", "0") != "1"


def checks_table(record: dict):
    """An empirical record's preconditions (is the test valid?), then its claims as a MyST table (mark first: ✔
    passed, ≈ within noise, ✘ failed; full claims, rounded values), then its verdict with the reason, followed by
    the project's own targets when it has any (shown apart: they do not enter the verdict)."""
    from IPython.display import Markdown

    from gradalign.comparison import paper_vs_ours
    from gradalign.report import cell, checks_markdown, preconditions_markdown, targets_markdown, verdict_text

    parts = [preconditions_markdown(record)]
    if record.get("evidence") == "empirical":
        parts.append("*The claims, each decided by its rule:*")
    parts += [checks_markdown(record), f"Verdict: {verdict_text(record)}.", targets_markdown(record)]
    compared = paper_vs_ours(record)
    if compared:
        rows = [f"| {cell(r['quantity'])} | {cell(r['paper'])} | {cell(r['ours'])} |" for r in compared]
        parts.append(
            "*The paper's numbers beside ours:*\n\n| quantity | paper | ours |\n| --- | --- | --- |\n" + "\n".join(rows)
        )
    return Markdown("\n\n".join(p for p in parts if p))


def assert_checks(record: dict) -> None:
    """Fail the notebook when a derivation check fails."""
    failed = {k: c for k, c in record["checks"].items() if not c["passed"]}
    if failed:
        lines = "; ".join(f"{k}: {c['rule']} (measured {c['value']})" for k, c in failed.items())
        raise AssertionError(f"{record['id']} at preset {record['preset']}: {lines}")


def verdict_markdown(records: list[dict]):
    """The page's verdict: one row per element, its status with its reason and the scale it was measured at,
    its claims and preconditions, whether the code has changed since, and what computed it; then the rules."""
    from IPython.display import Markdown

    from gradalign.report import verdict_rows

    rules = RULES_TEXT if any(r.get("evidence") == "empirical" for r in records) else ""
    return Markdown(verdict_rows(records) + (f"\n\n{rules}" if rules else ""))


RULES_TEXT = (
    "*How an empirical verdict is decided:* every comparison uses at least 3 seeds and the standard error (SE) of "
    'the difference of means; "A beats B" needs a difference above 2 SE (≈: within 2 SE, not decided); "A is '
    'at least as good as B" needs A − B > −2 SE (a tie when within 2 SE). A claim is *not reproduced* only when '
    "every precondition holds and it fails beyond 2 SE; an unmet precondition or an undecided difference makes "
    "the verdict *inconclusive*."
)
