"""Table 4's SGR and layer-wise runs at other budgets (`experiments.sgr.bp_free_longer`), read from the committed
runs: at 40 epochs they are the record's own final runs, and a rate the record did not train reads nothing."""

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]


def _table4() -> dict:
    return json.loads(next((ROOT / "results" / "sgr" / "sgr.tab4").glob("cpu-*.json")).read_text())


def test_the_runs_at_the_records_budget_are_its_own_final_runs():
    from gradalign.experiments.sgr.bp_free_longer import LONGER_EPOCHS, METHODS, trend, units_at

    record = _table4()
    (table,) = record["metrics"]["table"].values()
    at = trend(record, (record["config"]["protocol"]["epochs"],))
    for m in METHODS:
        assert list(at.values())[0][m] == table[m]["values"]  # the same runs, read back
    longer = units_at(record, LONGER_EPOCHS)
    assert {u.spec["protocol"]["epochs"] for us in longer.values() for u in us} == {LONGER_EPOCHS}
    assert [len(us) for us in longer.values()] == [record["config"]["seeds"]] * len(METHODS)


def test_a_rate_the_record_did_not_train_reads_nothing():
    from gradalign.experiments.sgr.bp_free_longer import trend

    record = copy.deepcopy(_table4())
    (tuning,) = record["metrics"]["tuning"].values()
    tuning["sgr"]["final"] = 0.3  # a rate of SGR's grid whose final runs were never trained
    at = trend(record, (record["config"]["protocol"]["epochs"],))
    assert list(at.values())[0]["sgr"] is None


def test_the_view_shows_each_budgets_decision(monkeypatch):
    import IPython.display

    from gradalign.book import bp_free_budget

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: None)
    bp_free_budget.longer_budget_view(_table4())
    table = next(obj for obj in shown if hasattr(obj, "to_dict"))
    assert list(table.index)[:2] == ["20 epochs", "40 epochs"]
    assert table.loc["40 epochs", "SGR − layer-wise"].endswith(": loses")  # −0.29 ± 0.07 at 5 seeds
    assert table.loc["20 epochs", "SGR − layer-wise"].endswith(": within noise")
