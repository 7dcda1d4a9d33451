"""The rules that decide an empirical claim, and the preconditions that make its test valid (rules version 4).

Comparisons between methods (`compare`), over seeds, by Welch's t (`student_t.welch`):

- each arm needs at least `MIN_SEEDS` = 3 runs, else the comparison is not decided (within noise);
- the difference d = mean(A) − mean(B) (signed so that d > 0 favours A) has the standard error
  SE = sqrt(s_A²/n_A + s_B²/n_B), t = d/SE, and ν Welch–Satterthwaite degrees of freedom;
- the decision: "beats" when t > t₀.₉₇₅(ν), "loses" when t < −t₀.₉₇₅(ν), "within noise" otherwise (a two-sided
  test at 5 %; with 3 seeds per arm ν is about 2 to 4 and t₀.₉₇₅ is 2.8 to 4.3, not the 2 of a normal cut);
- "A beats B" passes on "beats", fails on "loses", and is within noise otherwise;
- "A is at least as good as B" passes unless "loses"; a tie (within noise) shows the smallest difference the test
  could have detected with 80 % power, (t₀.₉₇₅(ν) + t₀.₈(ν))·SE, so that a reader sees what "no difference" rules out.

Every comparison's value carries both means, d with its 95 % interval d ± t₀.₉₇₅(ν)·SE, t, ν, the decision and the
per-seed values where the summaries carry them (`summary` keeps them), in four significant digits.

Preconditions, computed from the runs and shown before the verdict (`gradalign.experiments.verdict`):

- `finished_learning`: the selection metric improved by less than a tolerance over the last 20 % of
  evaluations, in at least 80 % of the runs (every seed); where every arm has its runs at half the budget, the
  claim-level budget check replaces it (`experiments.claim_budget`);
- `fits_labels`: every arm's worst run's eval-mode error on its own labeled training set is below a threshold; one
  sided (`one_sided`): an under-fitting baseline blocks a win of the method, an under-fitting method arm a loss;
- `mechanism_active`: a measured quantity shows the method's distinctive term acted, against a control;
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
from gradalign.experiments.student_t import t_quantile, welch

MIN_SEEDS = 3
LEVEL = 0.975  # two-sided 5 %: the quantile of t a difference must exceed
POWER = 0.8  # the power at which a tie's detectable difference is stated
LAST_SHARE = 0.2  # "the last 20 % of evaluations"
FINISHED_SHARE = 0.8  # "in at least 80 % of runs"
MIN_EVALUATIONS = 5  # fewer evaluations cannot show a flat tail
RELATIONS = ("beats", "at_least")
DECISIONS = ("beats", "within noise", "loses")


def sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (a term of 1e-5 keeps its digits; 0.000167 is not rounded to 0)."""
    return float(f"{x:.{digits}g}") if math.isfinite(x) else x


def decide(a: dict, b: dict, higher_is_better: bool) -> dict:
    """Welch's test of A against B (summaries {"mean", "std", "n"}, optionally "values"): the comparison's value,
    its "decision" for A (one of `DECISIONS`) and, below 3 seeds in an arm, "few": True (then "within noise")."""
    for arm in (a, b):
        if not all(isinstance(arm.get(k), (int, float)) and math.isfinite(arm[k]) for k in ("mean", "std", "n")):
            raise ValueError(f"a summary needs finite mean, std and n; got {arm!r}")
    value = {"a": sig(a["mean"]), "b": sig(b["mean"]), "n_a": int(a["n"]), "n_b": int(b["n"])}
    if min(a["n"], b["n"]) < MIN_SEEDS:
        diff = a["mean"] - b["mean"]
        se = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
        value.update(diff=sig(diff), se=sig(se), decision="within noise", few=True)
        return value
    w = welch(a, b)
    crit = t_quantile(LEVEL, w["nu"])
    gain_t = w["t"] if higher_is_better else -w["t"]  # > 0 favours A
    decision = "beats" if gain_t > crit else "loses" if gain_t < -crit else "within noise"
    half_width = crit * w["se"]
    value.update(
        diff=sig(w["diff"]),
        se=sig(w["se"]),
        t=sig(w["t"]) if math.isfinite(w["t"]) else ("inf" if w["t"] > 0 else "-inf"),
        nu=sig(w["nu"], 3),
        ci95=[sig(w["diff"] - half_width), sig(w["diff"] + half_width)],
        decision=decision,
    )
    if decision == "within noise":
        value["detectable"] = sig((crit + t_quantile(POWER, w["nu"])) * w["se"])
    for key, arm in (("values_a", a), ("values_b", b)):
        if isinstance(arm.get("values"), list):
            value[key] = [sig(float(v)) for v in arm["values"]]
    return value


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
    """A check of "A beats B" or "A is at least as good as B" on summaries `a`, `b` ({"mean", "std", "n"}, and
    "values", the per-seed values, where known), decided by Welch's t (`decide`).

    `within_noise` is true when the rule cannot decide: fewer than 3 seeds, or, for "beats", a difference within
    noise. A tie passes "at least as good" and carries `tie` and the detectable difference."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {', '.join(RELATIONS)}; got {relation!r}")
    value = decide(a, b, higher_is_better)
    decision = value["decision"]
    if value.get("few"):
        passed, noise = False, True
    elif relation == "beats":
        passed, noise = decision == "beats", decision == "within noise"
    else:
        passed, noise = decision != "loses", False
        value["tie"] = decision == "within noise"
    better = "higher" if higher_is_better else "lower"
    a_name, b_name = names
    if relation == "beats":
        rule = f"{a_name} beats {b_name}: {better} {quantity}, Welch's t beyond its two-sided 5 % critical value"
    else:
        rule = (
            f"{a_name} at least as good as {b_name}: {quantity} not worse beyond Welch's two-sided 5 % critical value "
            "(a tie counts; its detectable difference at 80 % power is shown)"
        )
    rule += f"; at least {MIN_SEEDS} seeds each (a: {a_name}, b: {b_name})"
    out = check(passed, value, rule, claim)
    out["within_noise"] = bool(noise and not passed)
    return out


def all_of(parts: dict[str, dict], rule: str, claim: str) -> dict:
    """One check over several comparisons (say, at every label count): it passes when all pass, fails beyond
    noise when any fails beyond noise, and is within noise otherwise."""
    if not parts:
        raise ValueError("all_of needs at least one comparison")
    rule = welch_words(rule)
    passed = all(p["passed"] for p in parts.values())
    decided_fail = any(not p["passed"] and not p.get("within_noise", False) for p in parts.values())
    out = check(passed, {k: p["value"] for k, p in parts.items()}, rule, claim)
    out["within_noise"] = not passed and not decided_fail
    return out


LEGACY = (  # the words of rules version 3 in the experiment modules' rule texts, and what they mean now
    ("not lower by more than 2 SE of the difference (a tie counts)", "not lower beyond Welch's 5 % critical t"),
    ("by more than 2 SE of the difference", "beyond Welch's 5 % critical t"),
    ("not lower by more than 2 SE", "not lower beyond Welch's 5 % critical t"),
    ("by more than 2 SE", "beyond Welch's 5 % critical t"),
    ("2 SE", "Welch's t, 5 %"),
)


def welch_words(rule: str) -> str:
    """A rule text of an experiment module with its rules-version-3 words ("by more than 2 SE") read as version 4
    decides (Welch's t). The experiment modules also compute their records' numbers, and an edit there marks every
    record they made stale (`fingerprint`), so their texts are translated here until those records are reassembled."""
    for old, new in LEGACY:
        rule = rule.replace(old, new)
    return rule


def summary(values: Iterable[float]) -> dict:
    """{"mean", "std", "n", "values"} of per-seed values (`seed_stats.stats`)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("a summary needs at least one value")
    return {**stats(values), "values": values}


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


ROLES = {"baseline": "reproduced", "method": "not reproduced"}  # the status an under-fitting arm blocks


def fits_labels(errors: dict[str, float | None], threshold: float, role: str = "baseline", arm: str = "") -> dict:
    """Every run of one arm (`errors`: run name -> eval-mode error (%) on its own labeled training set) fits its
    labels: its worst run's error is at most `threshold`, read from the runs themselves, never from a mean.

    One-sided (`ROLES`): an under-fitting *baseline* flatters the method, so it blocks "reproduced" and leaves a
    decided loss standing; an under-fitting *method* arm handicaps the method, so it blocks "not reproduced" ("the
    method's arm cannot fit its labels at this scale") and leaves a decided win standing."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    who = arm or ("the baseline" if role == "baseline" else "the method's arm")
    claim = f"{who} fits its labels"
    if not errors or any(v is None for v in errors.values()):
        out = not_recorded(claim, "the eval-mode error on the labeled training set of every run")
    else:
        worst_run = max(errors, key=lambda k: errors[k])
        worst = errors[worst_run]
        out = check(
            worst <= threshold,
            {"worst": sig(worst), "worst_run": worst_run, "runs": len(errors)},
            f"eval-mode error on its own labeled training set <= {threshold:g} % in every run of {who} "
            f"(one-sided: an unmet one blocks only a verdict of {ROLES[role]!r})",
            claim,
        )
    out["one_sided"] = ROLES[role]
    return out


def fits_labels_by_role(errors: dict[str, float | None], roles: dict[str, str], threshold: float) -> dict[str, dict]:
    """The two one-sided fits-labels preconditions of a record (`fits_labels`): `fits_labels` over every run of the
    baselines and `method_fits_labels` over every run of the method's arms. `errors` maps a run ("arm/seed k") to its
    error, `roles` a run to "baseline" or "method"; a role with no runs has no precondition."""
    out = {}
    for role, name in (("baseline", "fits_labels"), ("method", "method_fits_labels")):
        runs = {k: v for k, v in errors.items() if roles[k] == role}
        if runs:
            out[name] = fits_labels(
                runs, threshold, role, "every baseline" if role == "baseline" else "every method arm"
            )
    return out


def mechanism_active(passed: bool, value, rule: str, what: str) -> dict:
    """The method's distinctive term acted: a measured quantity against a stated threshold."""
    return check(passed, value, f"{rule} (what it tests: {what})", "the mechanism acted")


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
