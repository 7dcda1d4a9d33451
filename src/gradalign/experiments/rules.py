"""The rules that decide an empirical claim, and the preconditions that make its test valid.

Comparisons between methods (`compare`), over seeds:

- each arm needs at least `MIN_SEEDS` = 3 runs, else the comparison is not decided (within noise);
- the difference d = mean(A) − mean(B) (signed so that d > 0 favours A) has the standard error
  SE = sqrt(s_A²/n_A + s_B²/n_B) (`seed_stats.difference`);
- "A beats B": d > 2 SE passes; d < −2 SE fails; otherwise the difference is within noise;
- "A is at least as good as B": d > −2 SE passes (a tie when |d| < 2 SE); d < −2 SE fails.

Preconditions, computed from the runs and shown before the verdict (`gradalign.verdict`):

- `finished_learning`: the selection metric improved by less than a tolerance over the last 20 % of
  evaluations, in at least 80 % of the runs;
- `fits_labels`: each baseline's eval-mode error on its own labeled training set is below a threshold;
- `mechanism_active`: a measured quantity shows the method's distinctive term acted;
- `near_reference`: the supervised baseline is near the book's own reference for that data and label count;
- `enough_seeds`: every arm has at least 3 runs;
- `tuned_inside_grid`: every tuned learning rate is an inner point of its grid (at an end, a better rate may lie
  beyond it, and the comparison would rest on an untuned arm).

A precondition whose quantity the runs did not record fails with `not_recorded`: a verdict is never decided
by a precondition nobody measured.
"""

from __future__ import annotations

import math
from typing import Iterable

from gradalign.experiments.base import check
from gradalign.experiments.seed_stats import stats

MIN_SEEDS = 3
Z = 2.0  # standard errors a difference must exceed
LAST_SHARE = 0.2  # "the last 20 % of evaluations"
FINISHED_SHARE = 0.8  # "in at least 80 % of runs"
MIN_EVALUATIONS = 5  # fewer evaluations cannot show a flat tail
RELATIONS = ("beats", "at_least")


def compare(
    a: dict,
    b: dict,
    *,
    relation: str,
    higher_is_better: bool,
    quantity: str,
    names: tuple[str, str],
    claim: str,
) -> dict:
    """A check of "A beats B" or "A is at least as good as B" on summaries `a`, `b` ({"mean", "std", "n"}).

    The value carries both means, d = mean(A) − mean(B), its standard error and the counts; `within_noise`
    is true when the rule cannot decide (fewer than 3 seeds, or |d| < 2 SE for "beats").
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {', '.join(RELATIONS)}; got {relation!r}")
    for arm in (a, b):
        if not all(isinstance(arm.get(k), (int, float)) and math.isfinite(arm[k]) for k in ("mean", "std", "n")):
            raise ValueError(f"a summary needs finite mean, std and n; got {arm!r}")
    d = a["mean"] - b["mean"]
    se = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
    gain = d if higher_is_better else -d  # > 0 favours A
    value = {"a": round(a["mean"], 4), "b": round(b["mean"], 4), "diff": round(d, 4), "se": round(se, 4)}
    value.update({"n_a": int(a["n"]), "n_b": int(b["n"])})
    few = min(a["n"], b["n"]) < MIN_SEEDS
    if few:
        passed, noise = False, True
    elif relation == "beats":
        passed, noise = gain > Z * se, -Z * se <= gain <= Z * se
    else:
        passed, noise = gain > -Z * se, False
        value["tie"] = abs(gain) < Z * se
    better = "higher" if higher_is_better else "lower"
    a_name, b_name = names
    if relation == "beats":
        rule = f"{a_name} beats {b_name}: {better} {quantity} by more than 2 SE of the difference"
    else:
        rule = f"{a_name} at least as good as {b_name}: {quantity} not worse by more than 2 SE (a tie counts)"
    rule += f"; at least {MIN_SEEDS} seeds each (a: {a_name}, b: {b_name})"
    out = check(passed, value, rule, claim)
    out["within_noise"] = bool(noise and not passed)
    return out


def all_of(parts: dict[str, dict], rule: str, claim: str) -> dict:
    """One check over several comparisons (say, at every label count): it passes when all pass, fails beyond
    noise when any fails beyond noise, and is within noise otherwise."""
    if not parts:
        raise ValueError("all_of needs at least one comparison")
    passed = all(p["passed"] for p in parts.values())
    decided_fail = any(not p["passed"] and not p.get("within_noise", False) for p in parts.values())
    out = check(passed, {k: p["value"] for k, p in parts.items()}, rule, claim)
    out["within_noise"] = not passed and not decided_fail
    return out


def summary(values: Iterable[float]) -> dict:
    """{"mean", "std", "n"} of per-seed values (`seed_stats.stats`)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("a summary needs at least one value")
    return stats(values)


def per_column(tables: dict, checks_of, prefix: bool) -> dict[str, dict]:
    """The checks of every column of a stored table (`checks_of(table)`), each name prefixed with its column when
    the record has several columns, as the experiments name them."""
    out = {}
    for column, table in tables.items():
        out.update({f"{column}_{n}" if prefix else n: c for n, c in checks_of(table).items()})
    return out


# --- preconditions ---------------------------------------------------------------------------------------


def not_recorded(claim: str, what: str) -> dict:
    """A precondition the runs did not measure: it fails, and says what is missing."""
    return check(False, "not recorded", f"{what} must be recorded by every run", claim)


def enough_seeds(counts: dict[str, int]) -> dict:
    """Every arm (method, label count, …) has at least 3 runs."""
    fewest = min(counts.values()) if counts else 0
    return check(
        fewest >= MIN_SEEDS,
        {"fewest": fewest, "arms": len(counts)},
        f"every arm has at least {MIN_SEEDS} seeds (or trials)",
        "enough seeds to decide a difference",
    )


def run_finished(series: list, higher_is_better: bool, tolerance: float) -> bool | None:
    """Whether one run's selection metric (one value per evaluation, None where missing) improved by less
    than `tolerance` over its last 20 % of evaluations, against its best before; None when it has too few
    evaluations to tell."""
    values = [float(v) for v in series if v is not None and math.isfinite(float(v))]
    if len(values) < MIN_EVALUATIONS:
        return None
    tail = max(1, math.ceil(LAST_SHARE * len(values)))
    head, last = values[:-tail], values[-tail:]
    best = max if higher_is_better else min
    gain = best(last) - best(head) if higher_is_better else best(head) - best(last)
    return gain < tolerance


def finished_learning(runs: dict[str, list], higher_is_better: bool, tolerance: float, metric: str) -> dict:
    """At least 80 % of runs finished learning (`run_finished`); `runs` maps a run's name to its series."""
    verdicts = {name: run_finished(series, higher_is_better, tolerance) for name, series in runs.items()}
    unknown = [n for n, v in verdicts.items() if v is None]
    done = sum(bool(v) for v in verdicts.values())
    total = len(verdicts)
    passed = bool(total) and not unknown and done >= FINISHED_SHARE * total
    still = sorted(n for n, v in verdicts.items() if v is False)
    value = {"finished": done, "runs": total, "still_improving": still[:6] + (["…"] if len(still) > 6 else [])}
    if unknown:
        value["too_few_evaluations"] = len(unknown)
    return check(
        passed,
        value,
        f"{metric} improved by less than {tolerance:g} over the last {LAST_SHARE:.0%} of evaluations, "
        f"in at least {FINISHED_SHARE:.0%} of runs (at least {MIN_EVALUATIONS} evaluations each)",
        "the runs finished learning",
    )


def fits_labels(errors: dict[str, float | None], threshold: float) -> dict:
    """Every baseline run's eval-mode error (%) on its own labeled training set is at most `threshold`."""
    if not errors or any(v is None for v in errors.values()):
        return not_recorded("the baseline fits its labels", "the eval-mode error on the labeled training set")
    worst = max(errors.values())
    return check(
        worst <= threshold,
        {"worst": round(worst, 2), "runs": len(errors)},
        f"eval-mode error on its own labeled training set <= {threshold:g} % in every baseline run",
        "the baseline fits its labels",
    )


def mechanism_active(passed: bool, value, rule: str, what: str) -> dict:
    """The method's distinctive term acted: a measured quantity against a stated threshold."""
    return check(passed, value, rule, f"the mechanism acted: {what}")


def near_reference(baseline: float | None, reference: float | None, tolerance: float, quantity: str) -> dict:
    """The supervised baseline's error is within `tolerance` points of the book's reference for that data set
    and label count (supervised training until it finished learning)."""
    if reference is None:
        return not_recorded("the baseline is near the book's reference", "the book's supervised reference")
    if baseline is None:
        return not_recorded("the baseline is near the book's reference", f"the baseline's {quantity}")
    gap = baseline - reference
    return check(
        gap <= tolerance,
        {"baseline": round(baseline, 2), "reference": round(reference, 2), "gap": round(gap, 2)},
        f"baseline {quantity} at most {tolerance:g} points above the reference's",
        "the baseline is near the book's reference",
    )


def tuned_inside_grid(tuning: dict[str, dict]) -> dict:
    """Every arm's chosen rate (`tuning[arm]` = {"grid": {rate: score}, "chosen": rate}) lies strictly inside
    its grid: neither its smallest nor its largest rate. An arm without a grid of at least three rates fails."""
    edges = {}
    for arm, entry in tuning.items():
        rates = sorted(float(r) for r in entry["grid"])
        chosen = float(entry["chosen"])
        if len(rates) < 3 or chosen in (rates[0], rates[-1]):
            edges[arm] = chosen
    return check(
        not edges and bool(tuning),
        {"arms": len(tuning), "at_an_end": {a: f"{r:g}" for a, r in edges.items()}} if edges else {"arms": len(tuning)},
        "every tuned learning rate is neither the smallest nor the largest of its grid (at least 3 rates)",
        "every arm was tuned: its best rate lies inside the grid searched",
    )


def not_evaluated() -> dict:
    """A stored record computed before these rules, whose runs lack what they need."""
    return check(
        False,
        "record made under earlier rules",
        "the record's runs must carry what these rules need (rerun the experiment)",
        "not yet evaluated under these rules",
    )
