"""The GPU windows' reports (`results/windows/`, placed by `gradalign import`) as a section of the compute page.

Each window says what ran on the GPU: the CUDA tests' outcome (with the failing tests' names), how many units each
experiment finished and their wall time on the GPU, with how many units were training at once (`--workers`), and
what was left. These are the only GPU timings the project has: the `gpu` presets are sized from them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from gradalign.compute.gpu_import import diverged_before, left_diverged, stored_windows


def unit_times(report: dict) -> dict[tuple[str, str], list[float]]:
    """(element, preset) -> wall seconds of each unit the window finished."""
    times = defaultdict(list)
    for unit in report.get("units", []):
        if unit.get("status") == "finished":
            times[(unit["element"], unit["preset"])].append(float(unit["seconds"]))
    return dict(times)


def projected_times(report: dict) -> dict[tuple[str, str], list[float]]:
    """(element, preset) -> projected wall seconds of each unit the window's box stopped part-way
    (seconds × total / done steps: `window_pool.stopped_at`)."""
    times = defaultdict(list)
    for unit in report.get("units", []):
        if unit.get("progress") and unit.get("seconds"):
            done, total = unit["progress"]
            times[(unit["element"], unit["preset"])].append(float(unit["seconds"]) * total / done)
    return dict(times)


def windows_markdown(root: Path) -> str:
    reports, bad = stored_windows(root)
    lines = ["## GPU windows", ""]
    if not reports:
        return "\n".join(lines + ["No GPU window has been imported yet.", *bad]) + "\n"
    lines += [
        "What each short GPU window (`gradalign gpu-window`) did, from its report. A unit's wall time is measured "
        "with the window's other workers training beside it on the same GPU, so it is an upper bound on the unit "
        "alone. A unit the window's box stopped part-way projects its full time from the steps it reached (an upper "
        "bound, since its seconds include the run's start); these projections size the `gpu` presets.",
        "",
        "| began (UTC) | device, workers | CUDA tests at `smoke` | units finished: median wall time (range) "
        "| units stopped part-way: median projected time | experiments left |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for report in reports:
        device = _hardware(report)
        tests = tests_in_words(report.get("tests", {}))
        finished = "; ".join(
            f"`{element}` [{preset}] {len(ts)}: {statistics.median(ts):.0f} s ({min(ts):.0f}–{max(ts):.0f})"
            for (element, preset), ts in unit_times(report).items()
        )
        projected = "; ".join(
            f"`{element}` [{preset}] {len(ts)}: {statistics.median(ts) / 60:.1f} min"
            for (element, preset), ts in projected_times(report).items()
        )
        began = str(report.get("began", "?"))[:16].replace("T", " ")
        if report.get("began_from"):
            began += f" ({report['began_from']})"
        left = len(report.get("left", []))
        lines.append(
            f"| {began} | {device}, {report.get('workers', 1)} | {tests} | {finished or 'none'} | "
            f"{projected or '—'} | {left} |"
        )
    return "\n".join(lines + ["", *_measured_lines(reports), *bad]) + "\n"


def tests_in_words(tests: dict) -> str:
    """The CUDA tests' outcome as a reader says it: "85 passed, 1 failed (test_name), in 3.3 min", from pytest's
    summary line and the failures the window kept; "not run" when the window skipped them."""
    import re

    outcome = tests.get("outcome") or ""
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped)", outcome)
    if not counts:
        return "not run" if not outcome else outcome
    order = {"passed": 0, "failed": 1, "error": 2, "errors": 2, "skipped": 3}
    words = ", ".join(f"{n} {kind}" for n, kind in sorted(counts, key=lambda c: order[c[1]]))
    names = [f.split(" ")[1].split("::")[-1] for f in tests.get("failures") or [] if " " in f]
    if names:
        words += f" ({', '.join(names)})"
    elif any(kind == "failed" for _, kind in counts):
        words += " (the window did not keep the failing tests' names)"
    seconds = re.search(r"in ([\d.]+)s", outcome)
    return words + (f", in {float(seconds.group(1)) / 60:.1f} min" if seconds else "")


def _measured_lines(reports: list[dict]) -> list[str]:
    """What the windows measured since they sample (issue 45): GPU utilisation over each phase (`gpu_sampler`) and
    each unit kind's throughput (`window_measure`); the windows before say nothing here."""
    measured = [r for r in reports if r.get("utilisation") or r.get("throughput") or r.get("bench_slot")]
    if not measured:
        return ["No window has sampled GPU utilisation or unit throughput yet.", ""]
    lines = [
        "What the windows measured: GPU utilisation, sampled once a second (mean over each phase: the benchmark "
        "slot, which runs alone first, and the training), the peak GPU memory, and each unit kind's throughput "
        "(median over its finished units, with their range).",
        "",
        "| began (UTC) | sampled by | utilisation: bench slot | utilisation: training | peak memory "
        "| throughput per unit kind |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for report in measured:
        sampled = report.get("utilisation") or {}
        summary, phases = sampled.get("summary") or {}, (sampled.get("summary") or {}).get("by_phase") or {}

        def phase(name: str) -> str:
            got = phases.get(name)
            return f"{got['mean_utilisation']:.0f} % ({got['samples']} s)" if got else "—"

        memory = f"{summary['max_memory_mib'] / 1024:.1f} GiB" if summary.get("max_memory_mib") else "—"
        rates = "; ".join(
            f"`{kind}` {r['units']}: {r['median_per_s']:,.0f}/s ({r['least_per_s']:,.0f}–{r['most_per_s']:,.0f})"
            for kind, r in (report.get("throughput") or {}).items()
        )
        began = str(report.get("began", "?"))[:16].replace("T", " ")
        lines.append(
            f"| {began} | {sampled.get('source') or sampled.get('note') or 'not sampled'} | {phase('bench')} | "
            f"{phase('training')} | {memory} | {rates or '—'} |"
        )
    return lines + [""]


def purpose(element_id: str, preset: str, overrides: dict) -> str:
    """What a backlog item (`backlog.full_backlog`) trains, in words."""
    from gradalign.compute.backlog import PADDED_LAMBDAS, PADDED_NO_BN
    from gradalign.compute.lga_rerun import rerun_purpose
    from gradalign.compute.pilots import (
        OVER_CPU_BUDGET,
        RERUNS,
        RUNS_LOST,
        is_budget_check,
        is_pilot,
    )
    from gradalign.experiments.claim_budget import is_choice_half, is_half_budget
    from gradalign.experiments.lga.validity import CONTROL
    from gradalign.experiments.sgr.deep_seeds import BACKLOG_ITEMS as DEEP_SEEDS

    padded = "Table 7 without BN at 32 pixels (pad_to=32)" if overrides == PADDED_NO_BN[2] else None
    if (element_id, preset, overrides) in PADDED_LAMBDAS:
        padded = f"Table 7 without BN at 32 pixels, SGR at λ = {overrides['lam']:g} (mean): is λ SGR's collapse?"
    elif overrides.get("pad_to") == PADDED_NO_BN[2]["pad_to"] and "lam" in overrides:
        lam = overrides["lam"]
        padded = f"Table 7 without BN at 32 pixels, at the λ validation chose there (λ = {lam:g}, mean reduction)"
    if preset != "cpu":
        return f"{preset} preset" + (f": {padded}" if padded else "")
    for applies, what in (
        (padded is not None, padded),
        (is_budget_check(element_id, preset, overrides), "budget check: its runs at half the epochs"),
        (is_half_budget(element_id, preset, overrides), "budget check: its runs at half the steps or epochs"),
        (is_choice_half(element_id, preset, overrides), "budget check: its runs at half the epochs, B's choice given"),
        (is_pilot(element_id, preset, overrides), "pilot over the CPU budget"),
        (overrides == CONTROL, "mechanism control: the LGA runs with α_w = 0"),
        (element_id in RUNS_LOST, "cpu runs lost with a machine's cache"),
        ((element_id, preset, overrides) in DEEP_SEEDS, "SGR at VGG-57 at 5 seeds: which seeds leave chance"),
        (RERUNS.get(element_id) == overrides, "rerun at the scale its pilots chose"),
        ("tuned" in overrides and element_id == "lga.fig7", rerun_purpose(overrides)),
    ):
        if applies:
            return what
    return "cpu design over the CPU budget" if element_id in OVER_CPU_BUDGET else "cpu preset"


def backlog_markdown(root: Path) -> str:
    """The GPU backlog (`backlog.full_backlog`) in priority order, with how many of each item's units are committed
    under `root/runs`: what the next window trains (a unit already committed is read, not trained)."""
    from gradalign.experiments import get
    from gradalign.experiments.units import UNITS, units_of
    from gradalign.compute.gpu_sizing import TARGET_MINUTES, committed_times, speedups, unit_minutes
    from gradalign.compute.backlog import full_backlog
    from gradalign.store.run_unit import read_entry

    diverged = diverged_before(root)
    lines = [
        "## The GPU backlog",
        "",
        "What the next GPU window trains, most valuable first: the `cpu` runs lost with a machine's cache "
        "(`pilots.RUNS_LOST`), the reruns the pilots chose (`pilots.RERUNS`), the budget checks "
        "(`pilots.BUDGET_CHECKS`: runs at half the epochs that tell whether a table's runs finished learning), the "
        "`cpu` designs over the two-core budget (`pilots.OVER_CPU_BUDGET`), the pilots over it (`pilots.ON_GPU`, "
        "less those closed, `pilots.CLOSED`), "
        "then the `gpu` presets. A `gpu` preset "
        "that extends a `cpu` scale shares its runs, so only what it adds is left to train.",
        "",
        *_sizing_paragraph(speedups(times := committed_times(root / "runs")), TARGET_MINUTES),
        "| # | element | preset | what | units committed | minutes per unit left in a window: median (range) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, (element_id, preset, overrides) in enumerate(full_backlog(), 1):
        what = purpose(element_id, preset, overrides)
        units = units_of(element_id, get(element_id).resolve(preset, overrides)) if element_id in UNITS else []
        missing = [unit for unit in units if read_entry(root / "runs", unit) is None]
        left = [unit for unit in missing if not left_diverged(unit, diverged)]  # a window trains these
        done, lost = len(units) - len(missing), len(missing) - len(left)
        minutes = unit_minutes(left, times)
        size = (
            f"{minutes.median:.1f} ({minutes.least:.1f}–{minutes.most:.1f}; {minutes.how}; {minutes.timed} of "
            f"{len(left)} timed)"
            if minutes
            else "not timed"
        )
        size = size if left else "none left"
        committed = f"{done} of {len(units)}" + (f" ({lost} diverged in a window, not retried)" if lost else "")
        lines.append(f"| {n} | `{element_id}` | `{preset}` | {what} | {committed} | {size} |")
    return "\n".join(lines) + "\n"


def _sizing_paragraph(rows: list[dict], target: float) -> list[str]:
    """What sizes the backlog's units: the CPU / GPU ratios measured on runs trained in both places (`gpu_sizing`)."""
    if not rows:
        return ["No run has been trained both on this CPU and in a GPU window yet: units are not timed.", ""]
    ratios = sorted(r["ratio"] for r in rows)
    return [
        f"A unit's minutes in a window are the median wall time of its settings' runs that a window trained "
        f"(*measured*), or else of those trained on this CPU (one thread per run) divided by the median CPU / GPU "
        f"ratio of the {len(rows)} settings trained in both places: **{statistics.median(ratios):.1f}×** (range "
        f"{ratios[0]:.1f}–{ratios[-1]:.1f}×, {', '.join(sorted({r['kind'] for r in rows}))}; *projected*, an "
        f"estimate, since those are other networks). GPU times are measured with the window's other workers "
        f"sharing the GPU. A unit over {target:g} minutes is stopped by a window's box and resumed by the next "
        f"from its carried checkpoint (`window_carry`).",
        "",
    ]


def _hardware(report: dict) -> str:
    """The window's device, with the accelerator its units name (the first window's LGA units named the machine's
    CPU, a bug fixed since: their values did not carry their device)."""
    names = {u.get("hardware") or "" for u in report.get("units", [])}
    gpus = sorted(name for name in names if name and not name.startswith("CPU"))
    return str(report.get("device", "?")) + (f" ({', '.join(gpus)})" if gpus else "")
