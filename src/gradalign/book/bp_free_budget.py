"""Table 4's two budgets on the BP-free page: each reading at half its budget, each claim's decision at both, and
the budget named as the leading alternative explanation where halving it changes a decision.

The conv reading (`sgr.tab4conv`) trains its half-budget runs itself and keeps them in `metrics["half"]`; the MLP
reading (`sgr.tab4`) is read at half its budget from its committed runs and kept divergences by
`claim_budget.at_half_budget`, as its verdict is (nothing is trained here)."""

from __future__ import annotations


def half_reading(record: dict) -> dict | None:
    """{"epochs", "table", "diverged", "final"} of a Table 4 record at half its budget, in the shape of
    `sgr.tab4conv`'s `metrics["half"]` ("final": {dataset: {method: the final runs' lr}}: the same tuning serves
    both budgets, but a final run that diverges moves to the next rate at its own budget); None where the record
    has no such reading (no claim of it carries a budget check). Read again at each call: runs committed after the
    record's last `rederive` show here before its checks."""
    from gradalign.experiments.claim_budget import at_half_budget

    if "half" in record["metrics"]:
        return record["metrics"]["half"]
    if not any("budget" in check for check in record["checks"].values()):
        return None
    found = at_half_budget(record)
    if found is None:
        return None
    half = found[0]
    tuning = half["metrics"].get("tuning", {})
    return {
        "epochs": half["config"]["protocol"]["epochs"],
        "table": half["metrics"]["table"],
        "diverged": {
            d: {m: "every rate" for m, e in by.items() if e.get("final", 0) is None} for d, by in tuning.items()
        },
        "final": {d: {m: e.get("final", e["chosen"]) for m, e in by.items()} for d, by in tuning.items()},
    }


def _parts(record: dict, names: dict) -> list[tuple[str, dict, dict, list]]:
    """(label, the comparison at B, its budget check, the two budgets' names) of every comparison with one; the
    label names the arm SGR is compared with (Table 4's checks: `sgr_beats_<arm>`, or one part per baseline)."""
    out = []
    for name, check in record["checks"].items():
        budget = check.get("budget")
        if not budget:
            continue
        value = check.get("value") if isinstance(check.get("value"), dict) else {}
        for part, c in (budget.get("comparisons") or {"": {}}).items():
            at_full = value if not part else value.get(part, {})
            prefix, _, arm = name.partition("sgr_beats_")  # [<dataset>_]sgr_beats_<arm>; the baselines' parts
            other = part or arm
            label = f"SGR against {names.get(other, other)}" + (f" ({prefix.rstrip('_')})" if prefix else "")
            out.append((label, at_full, {"stable": budget["stable"], **c}, budget["budgets"]))
    return out


def budget_table(record: dict, names: dict):
    """A DataFrame, one row per comparison: its decision at B and at B/2, the change of its difference with its SE,
    whether it was paired by seed and whether it is stable; None where no claim carries a budget check."""
    import pandas as pd

    rows = {}
    for label, _, c, budgets in _parts(record, names):
        rows[label] = {
            f"decision at {budgets[0]}": c.get("full", "—"),
            f"decision at {budgets[1]}": c.get("half", "—"),
            "change of the difference (points)": f"{c['change']:+.2f} ± {c['se']:.2f} SE" if "change" in c else "—",
            "paired by seed": "yes" if c.get("paired") else "no",
            "stable": "yes" if c["stable"] else "no",
        }
    return pd.DataFrame(rows).T if rows else None


def _rates(record: dict, half: dict | None) -> dict[str, tuple]:
    """arm -> (its final runs' rate at B, at B/2), for the arms whose final rate differs between the budgets (one
    tuning serves both; a final run that diverged at one budget moved on to the next rate there)."""
    if not half or not half.get("final"):
        return {}
    out = {}
    for d, by in record["metrics"].get("tuning", {}).items():
        for m, e in by.items():
            full, at_half = e.get("final", e["chosen"]), half["final"].get(d, {}).get(m)
            if full is not None and at_half is not None and full != at_half:
                out[m] = (full, at_half)
    return out


def budget_alternative(record: dict, names: dict, reading: str, half: dict | None = None) -> str | None:
    """Markdown naming the budget as the leading alternative explanation of `reading`'s verdict, with every
    comparison the budget check found unstable (and, from `half_reading`, where the arm's tuned rate differs
    between the budgets); None where no decided claim was made undecided by it."""
    from gradalign.experiments.claim_budget import MIN_CHANGE

    unstable = sorted(n for n, check in record["checks"].items() if check.get("budget_unstable"))
    rates = _rates(record, half)
    moved, real, seeds = [], 0, set()
    for label, at_full, c, budgets in _parts(record, names):
        if "change" not in c or c["stable"] or "diff" not in at_full:
            continue
        beyond = abs(c["change"]) > 2 * c["se"]  # the difference itself moved with the budget, beyond its noise
        real += beyond
        seeds |= {at_full.get("n_a"), at_full.get("n_b")} - {None}
        moved.append(
            f"{label}: {c['full']} at {budgets[0]} ({at_full['diff']:+.2f} points), {c['half']} at {budgets[1]} "
            f"({c['diff_half']:+.2f}); the difference moved by {c['change']:+.2f} ± {c['se']:.2f} SE"
            + (" (paired by seed)" if c.get("paired") else "")
            + (", beyond its noise" if beyond else ", within its noise")
            + "".join(
                f"; {names.get(m, m)}'s final runs at lr {r[0]:g} at {budgets[0]} and {r[1]:g} at {budgets[1]}"
                for m, r in rates.items()
                if m == "sgr" or label.split(" (")[0].endswith(names.get(m, m))
            )
        )
    if not unstable or not moved:
        return None
    if real:
        after = (
            f"{real} of these differences moved beyond their noise ({min(seeds, default='?')} seeds per arm): the "
            "budget changes the comparison itself, so more seeds would not settle it. A longer budget is the next "
            "test: whether the gap keeps growing with the epochs or levels off."
        )
    else:
        after = "Each moved within its noise: more seeds at both budgets, or a longer budget, is the next test."
    return (
        f"**The leading alternative explanation** of the {reading}'s result is its budget. Halving the epochs moves "
        f"{len(moved)} comparison(s) past the budget rule (a changed decision, or a difference that moved by more "
        f"than max({MIN_CHANGE:g}, 2 SE)):\n\n"
        + "\n".join(f"- {line}" for line in moved)
        + f"\n\nSo {len(unstable)} of its {len(record['checks'])} claims are not decided (rules version 4's "
        f"claim-level budget check). {after}"
    )


def longer_budget_view(record: dict) -> None:
    """SGR − layer-wise at 20, 40 and 80 epochs (`experiments.sgr.bp_free_longer`: the same final runs at half and
    twice Table 4's budget, read from committed runs): a table of each budget's arms and decision (Welch's t), and
    a figure of the difference per seed and its mean, paired by seed. A budget whose runs are not all committed
    yet is said so."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import Markdown, display

    from gradalign.book.page_helpers import mean_std_cell
    from gradalign.book.plotting import METHOD_COLORS, SMALL_PT, panels
    from gradalign.experiments.rules import decide, summary
    from gradalign.experiments.sgr.bp_free_longer import LONGER_EPOCHS, trend

    full = record["config"]["protocol"]["epochs"]
    budgets = (full // 2, full, LONGER_EPOCHS)
    runs = trend(record, budgets)
    rows, done = {}, {}
    for epochs, arms in runs.items():
        if arms["sgr"] is None or arms["layerwise"] is None:
            rows[f"{epochs} epochs"] = {
                "SGR": "not trained yet",
                "Layer-wise": "not trained yet",
                "SGR − layer-wise": "—",
            }
            continue
        a, b = summary(arms["sgr"]), summary(arms["layerwise"])
        value = decide(a, b, higher_is_better=True)
        rows[f"{epochs} epochs"] = {
            "SGR": mean_std_cell(a),
            "Layer-wise": mean_std_cell(b),
            "SGR − layer-wise": f"{value['diff']:+.2f} ± {value['se']:.2f} SE: {value['decision']}",
        }
        done[epochs] = [sgr - lw for sgr, lw in zip(arms["sgr"], arms["layerwise"])]
    display(
        Markdown(f"**SGR against layer-wise at half, once and twice the budget** ({record['config']['seeds']} seeds):")
    )
    display(pd.DataFrame(rows).T)
    if len(done) < 2:
        return
    fig, ax = panels(1, height=2.4)
    xs = sorted(done)
    for seed, _ in enumerate(done[xs[0]]):
        label = "each seed" if seed == 0 else None
        ax.plot(xs, [done[x][seed] for x in xs], color=METHOD_COLORS["sgr"], alpha=0.3, lw=0.8, marker=".", label=label)
    means = [sum(done[x]) / len(done[x]) for x in xs]
    ax.plot(xs, means, color=METHOD_COLORS["sgr"], lw=2, marker="o", label="mean over seeds")
    ax.axhline(0, color="k", lw=0.8, ls="--")
    ax.set_xticks(xs)
    ax.set_xlabel("epochs")
    ax.set_ylabel("SGR − layer-wise (points)")
    ax.legend(fontsize=SMALL_PT, frameon=False)
    plt.show()
