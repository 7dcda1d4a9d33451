"""Small helpers the notebooks call: preset resolution, check tables, verdicts."""

from __future__ import annotations

import os

from gradalign.config import check_preset


def resolve_preset(preset: str) -> str:
    """`$GRADALIGN_PRESET` overrides the notebook's parameter (nbval runs everything at `smoke`)."""
    return check_preset(os.environ.get("GRADALIGN_PRESET") or preset, allow_auto=True)


def interactive_session() -> bool:
    """False in batch runs (papermill, nbval): `GRADALIGN_BATCH=1`. Widgets are built only in live
    sessions, because executing `ipywidgets.interact` under nbclient can deadlock (jupyter/nbclient#312)."""
    return os.environ.get("GRADALIGN_BATCH", "0") != "1"


def checks_table(record: dict):
    """The record's checks as a MyST table (pass mark first, full claims, rounded values), followed by the
    project's own targets when it has any (shown apart: they do not enter the verdict)."""
    from IPython.display import Markdown

    from gradalign.report import checks_markdown, targets_markdown

    targets = targets_markdown(record)
    return Markdown(checks_markdown(record) + (f"\n\n{targets}" if targets else ""))


def assert_checks(record: dict) -> None:
    """Fail the notebook when a derivation check fails."""
    failed = {k: c for k, c in record["checks"].items() if not c["passed"]}
    if failed:
        lines = "; ".join(f"{k}: {c['rule']} (measured {c['value']})" for k, c in failed.items())
        raise AssertionError(f"{record['id']} at preset {record['preset']}: {lines}")


def verdict_markdown(records: list[dict]):
    """The page's verdict: one row per element, its status with the scale it was measured at (reduced
    scope), its checks, whether the code has changed since, and what computed it."""
    from IPython.display import Markdown

    from gradalign.report import verdict_rows

    return Markdown(verdict_rows(records))
