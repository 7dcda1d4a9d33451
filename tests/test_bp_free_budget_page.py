"""The BP-free page's budget view (`book.bp_free_budget`): the budget named as the leading alternative explanation
only where the budget check left a decided claim undecided."""

from gradalign.experiments.claim_budget import stabilise
from gradalign.experiments.rules import compare

NAMES = {"layerwise": "layer-wise"}


def _summary(values):
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return {"mean": mean, "std": std, "n": len(values), "values": values}


def _record(sgr_full, sgr_half):
    layerwise = [85.2, 85.1, 85.3]
    claim = "in BP-free training SGR outperforms layer-wise training (Table 4)"
    words = {"relation": "beats", "higher_is_better": True, "quantity": "final test accuracy"}
    check = lambda sgr: {  # noqa: E731
        "sgr_beats_layerwise": compare(
            _summary(sgr), _summary(layerwise), names=("SGR", "layer-wise"), claim=claim, **words
        )
    }
    checks = stabilise(check(sgr_full), check(sgr_half), ("40 epochs", "20 epochs"))
    return {"id": "sgr.tab4", "metrics": {"table": {}}, "checks": checks}


def test_a_decision_that_halving_the_budget_changes_is_named_as_the_leading_alternative():
    from gradalign.book.bp_free_budget import budget_alternative, budget_table

    record = _record([84.9, 85.0, 85.0], [85.6, 85.3, 85.5])  # loses at B, within noise or better at B/2
    check = record["checks"]["sgr_beats_layerwise"]
    assert check["budget_unstable"] and not check["passed"]
    text = budget_alternative(record, NAMES, "MLP reading")
    assert text.startswith("**The leading alternative explanation** of the MLP reading's result is its budget")
    assert "loses at 40 epochs" in text and "1 of its 1 claims are not decided" in text
    assert "beyond its noise" in text and "(3 seeds per arm)" in text and "A longer budget is the next test" in text
    noisy = budget_alternative(_record([84.9, 85.0, 85.0], [84.7, 85.6, 85.3]), NAMES, "MLP reading")
    assert "within its noise" in noisy and "more seeds at both budgets" in noisy  # the change is within its noise
    table = budget_table(record, NAMES)
    assert list(table["stable"]) == ["no"] and list(table["decision at 40 epochs"]) == ["loses"]


def test_a_budget_stable_claim_names_no_alternative():
    from gradalign.book.bp_free_budget import budget_alternative, half_reading

    record = _record([83.0, 83.1, 83.2], [83.05, 83.1, 83.2])  # loses by 2 points at both
    assert not record["checks"]["sgr_beats_layerwise"].get("budget_unstable")
    assert budget_alternative(record, NAMES, "MLP reading") is None
    assert half_reading({"metrics": {"table": {}}, "checks": {"c": {"passed": True}}}) is None  # no budget check
    stored = {"epochs": 10, "table": {}, "diverged": {}}
    assert half_reading({"metrics": {"half": stored}, "checks": {}}) is stored  # the conv reading's own


def test_an_arm_tuned_to_another_rate_at_half_the_budget_is_said_so():
    from gradalign.book.bp_free_budget import budget_alternative

    record = _record([84.9, 85.0, 85.0], [85.6, 85.3, 85.5])
    record["metrics"]["tuning"] = {"d": {"layerwise": {"chosen": 0.1, "final": 0.03}, "sgr": {"chosen": 0.01}}}
    half = {"final": {"d": {"layerwise": 0.1, "sgr": 0.01}}}
    text = budget_alternative(record, NAMES, "MLP reading", half)
    assert "layer-wise's final runs at lr 0.03 at 40 epochs and 0.1 at 20 epochs" in text
    half["final"]["d"]["layerwise"] = 0.03  # the same rate at both budgets: nothing to say
    assert "final runs at lr" not in budget_alternative(record, NAMES, "MLP reading", half)
