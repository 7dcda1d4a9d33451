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
    import pandas as pd

    rows = []
    for name, c in record["checks"].items():
        value = c["value"]
        shown = (
            f"{value:.3g}"
            if isinstance(value, float)
            else ("(per curve, see metrics)" if isinstance(value, list) else value)
        )
        rows.append(
            {
                "check": name,
                "claim": c["claim"],
                "rule": c["rule"],
                "measured": shown,
                "passed": "✔" if c["passed"] else "✘",
            }
        )
    return pd.DataFrame(rows).set_index("check")


def assert_checks(record: dict) -> None:
    """Fail the notebook when a derivation check fails."""
    failed = {k: c for k, c in record["checks"].items() if not c["passed"]}
    if failed:
        lines = "; ".join(f"{k}: {c['rule']} (measured {c['value']})" for k, c in failed.items())
        raise AssertionError(f"{record['id']} at preset {record['preset']}: {lines}")


def verdict_markdown(records: list[dict]):
    """The page's verdict: one row per element, its status, and the scale it was measured at."""
    from IPython.display import Markdown

    from gradalign.plotting import scale_caption

    lines = ["| element | verdict | checks passed | measured with |", "| --- | --- | --- | --- |"]
    for r in records:
        passed = sum(c["passed"] for c in r["checks"].values())
        lines.append(
            f"| `{r['id']}` | **{r['verdict']['status']}** | {passed}/{len(r['checks'])} | {scale_caption(r)} |"
        )
    return Markdown("\n".join(lines))
