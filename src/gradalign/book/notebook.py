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
    passed, ≈ within noise, – not measured, ✘ failed; full claims, rounded values), then its verdict with the reason,
    followed by the project's own targets when it has any (shown apart: they do not enter the verdict)."""
    from IPython.display import Markdown

    from gradalign.book.comparison import paper_vs_ours
    from gradalign.book.report import cell, checks_markdown, preconditions_markdown, targets_markdown, verdict_text

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
    from gradalign.book.measured import format_value

    failed = {k: c for k, c in record["checks"].items() if not c["passed"]}
    if failed:
        lines = "; ".join(
            f"{k}: {c['rule']} (measured {format_value(c['value'], page=False)})" for k, c in failed.items()
        )
        raise AssertionError(f"{record['id']} at preset {record['preset']}: {lines}")


def verdict_markdown(records: list[dict]):
    """The page's verdict: one row per element, its status with its reason and the scale it was measured at,
    its claims and preconditions, whether the code has changed since, and what computed it; then the rules."""
    from IPython.display import Markdown

    from gradalign.book.report import verdict_rows

    rules = RULES_TEXT if any(r.get("evidence") == "empirical" for r in records) else ""
    return Markdown(verdict_rows(records) + (f"\n\n{rules}" if rules else ""))


RULES_TEXT = (
    "*How an empirical verdict is decided (rules version 4):* every comparison uses at least 3 seeds and Welch's t "
    'test of the difference of means (Welch–Satterthwaite degrees of freedom ν); "A beats B" needs t beyond its '
    "two-sided 5 % critical value t₀.₉₇₅(ν) (≈: within noise, not decided; –: not measured by the runs, not "
    'decided); "A is at least as good as B" passes '
    "unless A loses beyond it (a tie shows the smallest difference the test could detect at 80 % power). Where "
    "every arm also ran at half the budget, a claim is decided only when its decision is the same at both budgets "
    "(budget-stable). A baseline that cannot fit its labels blocks only a win of the method; a method arm that "
    "cannot fit its labels blocks only a loss. A claim is *not reproduced* only when the preconditions that bear "
    "on it hold and it fails beyond noise; otherwise the verdict is *inconclusive*."
)
