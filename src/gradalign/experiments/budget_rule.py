"""Finished learning under a schedule that anneals to zero: the same runs at half the budget.

`rules.run_finished` reads one run's own tail: the best of its last 20 % of evaluations against its best before.
That suits a learning rate held (or stepped before the tail): a run still learning gains there, one that has
finished does not. Under a rate that decays to zero over the run (SGR's cosine, App. E), the tail is where the
annealing's gain lands: SGD's noise falls with the rate, so test accuracy rises over the last epochs whether or not
the budget was long enough. A run flat in its tail has surely finished, but most runs that had finished are
counted "still improving" too. No within-run window tells the two apart; a second budget does.

The budget check trains each run again with half the epochs (the whole schedule compressed into them: the same
spec with `protocol.epochs` halved) and compares how the arm ends:

    gain = mean over seeds of the final metric at B − mean at B/2     (signed so that > 0 is better at B)

If doubling the budget from B/2 to B gained less than the tolerance, the arm had finished learning at B: with
diminishing returns, doubling again gains less still. The rule (our choice, fixed before any arm's half-budget
runs were all in):

- an arm (one method, network and split, over its seeds) whose every seed has its half-budget run, and no run of
  which diverged at either budget (a diverged run's result, at chance, says nothing of its budget): all its runs
  have finished learning when `gain < tolerance`, and none has otherwise;
- every other run: `rules.run_finished` on its own curve;
- the precondition holds when at least 80 % of the runs finished (as `rules.finished_learning`).

Means over the seeds, rather than seed by seed: two runs of one seed differ by about the seeds' spread (0.3 to 1.4
points here), more than the half point the test asks. Even so the gain's standard error (shown, `se`) is 0.2 to 1.2
points with 3 seeds: like the tail rule, the check reads a point estimate against the tolerance.
"""

from __future__ import annotations

import math

from gradalign.experiments.base import check
from gradalign.experiments.rules import FINISHED_SHARE, LAST_SHARE, finished_learning, run_finished
from gradalign.experiments.seed_stats import difference, stats


def budget_gain(full: list[float], half: list[float], higher_is_better: bool) -> float:
    """Mean final metric at the full budget minus at half of it, signed so that > 0 means better at the full one."""
    if not full or not half:
        raise ValueError("a budget gain needs at least one run at each budget")
    values = [float(v) for v in (*full, *half)]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"final values must be finite; got {values}")
    d = sum(full) / len(full) - sum(half) / len(half)
    return d if higher_is_better else -d


def finished_with_budget(
    runs: dict[str, list],
    arms: dict[str, list[str]],
    budget: dict[str, tuple[list[float], list[float] | None]],
    higher_is_better: bool,
    tolerance: float,
    metric: str,
) -> dict:
    """The finished-learning precondition with budget checks (the module's rule).

    `runs` maps a run's name to its curve (one value per evaluation); `arms` maps an arm to its runs' names;
    `budget[arm]` = (the final values at the full budget, at half of it: None unless every seed has one)."""
    if all(half is None or arm not in arms for arm, (_, half) in budget.items()):
        return finished_learning(runs, higher_is_better, tolerance, metric)  # no arm checked: the tail rule alone
    verdicts = {name: run_finished(series, higher_is_better, tolerance) for name, series in runs.items()}
    checked = {}
    for arm, (full, half) in budget.items():
        if half is None or arm not in arms:
            continue
        gain = budget_gain(full, half, higher_is_better)
        checked[arm] = {"full": round(sum(full) / len(full), 3), "half": round(sum(half) / len(half), 3)}
        se = difference(stats(full), stats(half))["se"] if min(len(full), len(half)) > 1 else None
        checked[arm].update(gain=round(gain, 3), se=None if se is None else round(se, 3), finished=gain < tolerance)
        verdicts.update(dict.fromkeys(arms[arm], gain < tolerance))
    unknown = [n for n, v in verdicts.items() if v is None]
    done = sum(bool(v) for v in verdicts.values())
    total = len(verdicts)
    still = sorted(n for n, v in verdicts.items() if v is False)
    value = {"finished": done, "runs": total, "still_improving": still[:6] + (["…"] if len(still) > 6 else [])}
    value["budget_checked"] = checked
    if unknown:
        value["too_few_evaluations"] = len(unknown)
    return check(
        bool(total) and not unknown and done >= FINISHED_SHARE * total,
        value,
        f"in at least {FINISHED_SHARE:.0%} of runs: where every seed of an arm has a run at half the epochs, "
        f"its mean final {metric} at the full budget exceeds the half budget's by less than {tolerance:g}; "
        f"elsewhere, it improved by less than {tolerance:g} over the last {LAST_SHARE:.0%} of evaluations",
        "the runs finished learning",
    )
