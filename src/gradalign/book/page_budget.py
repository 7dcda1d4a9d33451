"""A page's view of a local-BP table's budget check (`experiments.sgr.budget`): its runs at half the epochs beside
its runs at the full budget, from the committed runs only (never trained here)."""

from __future__ import annotations


def budget_view(element: str, overrides: dict | None = None) -> None:
    """Each arm's final test accuracy at the table's budget and at half of it, by seed; where an arm has every seed at
    both budgets and none diverged, the gain (`budget_rule.budget_gain`) and whether the arm finished learning by
    the budget check (an arm with a diverged run is judged by its runs' tails). A figure sets each seed's accuracy
    at the full budget against half of it: above the dashed line, doubling the budget gained more than the
    tolerance. `overrides`: of the `cpu` preset whose check it shows (a pending rerun's, `pilots.RERUNS`)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import Markdown, display

    from gradalign.experiments import get
    from gradalign.experiments.budget_rule import budget_gain
    from gradalign.experiments.seed_stats import stats
    from gradalign.experiments.sgr.budget import half_budget
    from gradalign.experiments.sgr.validity import TOLERANCE
    from gradalign.experiments.units import units_of
    from gradalign.methods.local import TITLES
    from gradalign.book.page_helpers import mean_std_cell, network_title
    from gradalign.compute.pilots import stored_units
    from gradalign.book.plotting import METHOD_COLORS, SMALL_PT, legend_below, panels

    def arm(spec: dict) -> tuple:
        return spec["network"], spec["method"]["method"], spec["method"]["modules"]

    full = get(element).resolve("cpu", overrides or {})
    budgets = {"full": units_of(element, full), "half": units_of(element, half_budget(full))}
    epochs = {w: units[0].spec["protocol"]["epochs"] for w, units in budgets.items()}
    finals: dict[tuple, dict[str, dict[int, float | None]]] = {}
    for which, units in budgets.items():
        for unit, row in zip(units, stored_units(units, arm, "test_acc", True, TOLERANCE)):
            seeds = finals.setdefault(arm(unit.spec), {"full": {}, "half": {}, "diverged": 0})[which]
            seeds[unit.spec["seed"]] = row["final"] if row["done"] and row["diverged"] is None else None
            finals[arm(unit.spec)]["diverged"] += bool(row["done"] and row["diverged"] is not None)
    committed = sum(v is not None for f in finals.values() for v in f["half"].values())
    total = sum(len(f["half"]) for f in finals.values())
    display(
        Markdown(
            f"**The budget check of {element}:** {committed} of {total} runs at {epochs['half']} epochs committed, "
            f"beside the runs at {epochs['full']}."
        )
    )
    table = {}
    for (net, method, k), f in finals.items():
        full = [v for v in f["full"].values() if v is not None]
        half = [v for v in f["half"].values() if v is not None]
        complete = len(full) == len(f["full"]) and len(half) == len(f["half"])  # and none diverged
        gain = budget_gain(full, half, True) if complete else None
        verdict = "yes" if gain is not None and gain < TOLERANCE else "no" if gain is not None else "waits for its runs"
        table[(network_title(net), TITLES[method] + ("" if method == "global_bp" else f", K = {k}"))] = {
            f"at {epochs['full']} epochs (%)": mean_std_cell(stats(full)) if full else "—",
            f"at {epochs['half']} epochs (%)": mean_std_cell(stats(half)) if half else "—",
            f"runs at {epochs['half']}": f"{len(half)} of {len(f['half'])}",
            "gain": "—" if gain is None else f"{gain:+.2f}",
            "finished learning": "not checked: a run diverged" if f["diverged"] else verdict,
        }
    display(pd.DataFrame(table).T)
    said = {word: [name for name, row in table.items() if row["finished learning"] == word] for word in ("yes", "no")}
    if said["yes"] or said["no"]:
        names = {w: "; ".join(f"{net}, {arm} ({table[(net, arm)]['gain']})" for net, arm in said[w]) for w in said}
        display(
            Markdown(
                f"By the budget check, {len(said['yes'])} arm(s) had finished learning at {epochs['full']} epochs"
                + (f" ({names['yes']})" if said["yes"] else "")
                + f" and {len(said['no'])} had not, gaining at least {TOLERANCE:g} points from {epochs['half']} "
                + "epochs"
                + (f" ({names['no']})" if said["no"] else "")
                + f"; {len(table) - len(said['yes']) - len(said['no'])} wait for their runs or are judged by their "
                "tails."
            )
        )
    pairs = [
        (method, net, f["full"][s], f["half"][s])
        for (net, method, _), f in finals.items()
        for s in f["half"]
        if f["half"][s] is not None and f["full"].get(s) is not None
    ]
    if not pairs:
        return
    fig, ax = panels(1, height=3.0)
    markers = dict(zip(dict.fromkeys(net for _, net, _, _ in pairs), "osD^v"))
    for method in dict.fromkeys(m for m, _, _, _ in pairs):
        for net in markers:
            xy = [(h, f) for m, n, f, h in pairs if (m, n) == (method, net)]
            if xy:
                label = f"{TITLES[method]}" + (f", {network_title(net)}" if len(markers) > 1 else "")
                ax.scatter(*zip(*xy), marker=markers[net], color=METHOD_COLORS.get(method), label=label, s=18)
    low = min(min(h, f) for _, _, f, h in pairs) - 1
    high = max(max(h, f) for _, _, f, h in pairs) + 1
    ax.plot([low, high], [low, high], color="0.6", lw=0.8)
    ax.plot([low, high], [low + TOLERANCE, high + TOLERANCE], "--", color="0.3", lw=0.8)
    ax.set(
        xlabel=f"final test accuracy (%) at {epochs['half']} epochs",
        ylabel=f"at {epochs['full']} epochs",
        xlim=(low, high),
        ylim=(low, high),
    )
    ax.text(low + 0.3, high - 0.3, f"dashed: + {TOLERANCE:g} points", va="top", fontsize=SMALL_PT)
    legend_below(fig, ax, columns=3)
    plt.show()
