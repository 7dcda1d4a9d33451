"""The budget check: under a rate annealed to zero, a run's own tail cannot show that it finished learning, the same
runs at half the epochs can (`experiments.budget_rule`, `experiments.sgr.budget`, `pilots.BUDGET_CHECKS`)."""

from __future__ import annotations

import math

import pytest

from gradalign.compute import pilots, window_report
from gradalign.records import runner
from gradalign.experiments import get
from gradalign.experiments.budget_rule import budget_gain, finished_with_budget
from gradalign.experiments.rules import finished_learning, run_finished
from gradalign.experiments.sgr import budget
from gradalign.experiments.sgr.validity import tab3, tab3_claims
from gradalign.experiments.units import units_of
from gradalign.records.results import ResultStore
from gradalign.store.run_unit import committed_runs


def _cosine_run(final: float, epochs: int = 30) -> list[float]:
    """Test accuracy of a run that plateaued early but whose annealing lifts its last epochs (noise falls with the
    rate): what SGR's cosine schedule gives."""
    lr = [(1 + math.cos(math.pi * e / epochs)) / 2 for e in range(epochs)]
    return [final - 4.0 * r - 2.0 * math.exp(-e / 3) for e, r in enumerate(lr)]


ANNEALED = {f"a/seed{i}": _cosine_run(80.0 + i / 10) for i in range(3)}
ARMS = {"a": list(ANNEALED)}


def test_an_annealed_run_that_had_finished_still_fails_the_tail_rule():
    """Why the check exists: the annealing's gain lands in the last fifth of the evaluations."""
    assert all(run_finished(curve, True, 0.5) is False for curve in ANNEALED.values())
    assert not finished_learning(ANNEALED, True, 0.5, "accuracy")["passed"]


def test_the_half_budget_decides_an_annealed_arm():
    full = [c[-1] for c in ANNEALED.values()]
    close = finished_with_budget(ANNEALED, ARMS, {"a": (full, [v - 0.2 for v in full])}, True, 0.5, "accuracy")
    assert close["passed"] and close["value"]["finished"] == 3
    assert close["value"]["budget_checked"]["a"]["gain"] == pytest.approx(0.2)
    far = finished_with_budget(ANNEALED, ARMS, {"a": (full, [v - 1.0 for v in full])}, True, 0.5, "accuracy")
    assert not far["passed"] and far["value"]["finished"] == 0  # doubling the budget still gained a point
    assert far["value"]["budget_checked"]["a"]["finished"] is False
    assert far["value"]["still_improving"] == sorted(ANNEALED)


def test_an_arm_without_every_half_budget_run_is_judged_by_its_tail():
    full = [c[-1] for c in ANNEALED.values()]
    out = finished_with_budget(ANNEALED, ARMS, {"a": (full, None)}, True, 0.5, "accuracy")
    assert out == finished_learning(ANNEALED, True, 0.5, "accuracy")  # the tail rule, unchanged
    flat = [50, 60, 70, 75, 75.1, 75.0, 75.1, 75.0, 75.1, 75.0]  # a step schedule's plateau
    assert finished_with_budget({"f": flat}, {"b": ["f"]}, {}, True, 0.5, "accuracy")["passed"]


def test_eighty_percent_of_runs_over_checked_and_unchecked_arms():
    rising = [10, 20, 30, 40, 50, 60, 70, 80, 90, 95]  # still learning, no half-budget runs
    runs = {**ANNEALED, "b/seed0": rising}
    full = [c[-1] for c in ANNEALED.values()]
    out = finished_with_budget(runs, {**ARMS, "b": ["b/seed0"]}, {"a": (full, full)}, True, 0.5, "accuracy")
    assert out["value"]["finished"] == 3 and out["value"]["runs"] == 4 and not out["passed"]  # 75 % < 80 %
    assert out["value"]["still_improving"] == ["b/seed0"]


def test_the_budget_gain_is_signed_and_refuses_what_it_cannot_compare():
    assert budget_gain([81.0, 83.0], [80.0], True) == pytest.approx(2.0)
    assert budget_gain([10.0], [12.0], False) == pytest.approx(2.0)  # an error: lower at the full budget is a gain
    assert budget_gain([80.0], [81.0], True) == pytest.approx(-1.0)  # worse at the full budget: finished
    with pytest.raises(ValueError, match="finite"):
        budget_gain([float("nan")], [80.0], True)
    with pytest.raises(ValueError, match="at least one"):
        budget_gain([], [80.0], True)


# --- the SGR tables: runs at half the epochs read from the committed runs ---------------------------------------

TINY = {
    "width": 0.125,
    "n_train": 128,
    "n_test": 64,
    "seeds": 2,
    "protocol.epochs": 2,
    "protocol.batch_size": 64,
    "networks": ["resnet32"],
    "methods": ["layerwise", "sgr"],
    "modules": 3,
}


def test_table3s_precondition_reads_its_committed_half_budget_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    record = runner.run("sgr.tab3", "cpu", TINY, store=ResultStore(tmp_path / "results"), device="cpu")
    arms = budget.pairs(record)
    assert set(arms) == {"fashion_mnist/resnet32/layerwise", "fashion_mnist/resnet32/sgr"}
    assert all(half is None for _, half in arms.values())  # no half-budget run yet: the tail rule alone
    assert "budget_checked" not in tab3(record)["finished_learning"]["value"]
    half_cfg = get("sgr.tab3").resolve("cpu", {**TINY, "protocol.epochs": 1})
    assert half_cfg == budget.half_budget(get("sgr.tab3").resolve("cpu", TINY))
    units = units_of("sgr.tab3", half_cfg)
    with committed_runs(tmp_path / "results" / "runs", write=True):
        for unit in units[:1]:  # seed 0 of the first arm: that arm is not complete, the other has none
            unit.run()
        assert all(half is None for _, half in budget.pairs(record).values())
        for unit in units[1:]:
            unit.run()
    arms = budget.pairs(record)
    replaced = tab3(record)["finished_learning"]  # every arm at both budgets: the claim-level check (rules 4)
    assert replaced["passed"] and "claim by claim" in replaced["claim"]
    checked = replaced["value"]["gain_from_half"]
    assert set(checked) == set(arms)
    for key, (full, half) in arms.items():
        gain = sum(full) / 2 - sum(half) / 2
        assert len(full) == len(half) == 2 and checked[key] == pytest.approx(gain, abs=1e-3)
    claims = tab3_claims(record)
    assert all("budget" in c for c in claims.values())
    other = dict(record, config_hash="0" * 12)  # a record whose config no longer resolves to its own
    assert budget.pairs(other) == {}


def test_a_diverged_run_leaves_its_arm_to_the_tail_rule(monkeypatch):
    """Its stored result, at chance, says nothing of its budget (full [80, 80, 10] against half [79.9] x 3 would read
    as finished, a diverged half run as still improving)."""
    import gradalign.store.run_unit as run_unit

    stored = {"diverged": "non-finite loss at step 3", "final_test_acc": 10.0}
    monkeypatch.setattr(run_unit, "read_entry", lambda folder, unit: {"value": stored})
    spec = get("sgr.tab3").resolve("cpu", TINY).spec("resnet32", "sgr", 3, "fashion_mnist", 0)
    assert budget.final(spec) is None
    stored["diverged"] = None
    assert budget.final(spec) == 10.0


def test_the_budget_checks_follow_the_reruns_they_read_and_assemble_no_record():
    from gradalign.compute.backlog import BACKLOG

    half = pilots.budget_overrides("sgr.tab7")
    assert half == {**pilots.RERUNS["sgr.tab7"], "protocol.epochs": 60}  # its 120-epoch rerun's, halved
    assert pilots.budget_overrides("sgr.tab3") == {"protocol.epochs": 60}  # its 120-epoch rerun's: the cpu runs
    assert pilots.budget_overrides("sgr.tab6") == {"protocol.epochs": 30}  # no rerun: the cpu preset's, halved
    queue = [(e, "cpu", o) for e, _, o in pilots.queued()]
    assert {e for e, _ in pilots.QUEUE if _ == "rerun"} == set(pilots.RERUNS)
    assert {e for e, what in pilots.QUEUE if what == "budget check"} == set(pilots.BUDGET_CHECKS)
    where = [BACKLOG.index(item) for item in queue]
    assert where == list(range(where[0], where[0] + len(queue)))  # in the queue's order, together
    for element_id, what in pilots.QUEUE:  # a rerun comes before the budget check that reads it
        if what == "budget check" and element_id in pilots.RERUNS:
            assert pilots.QUEUE.index((element_id, "rerun")) < pilots.QUEUE.index((element_id, what))
    assert pilots.runs_only("sgr.tab7", "cpu", half) and not pilots.runs_only(
        "sgr.tab7", "cpu", pilots.RERUNS["sgr.tab7"]
    )
    assert window_report.purpose("sgr.tab6", "cpu", {"protocol.epochs": 30}).startswith("budget check")
    assert window_report.purpose("sgr.tab3", "cpu", {"protocol.epochs": 120}).startswith("rerun")
    units = pilots.budget_units("sgr.tab6")
    assert len(units) == 39 and all(u.spec["protocol"]["epochs"] == 30 for u in units)
    with pytest.raises(ValueError, match="no budget check"):
        pilots.budget_overrides("sgr.tab4")


def test_the_budget_command_refuses_an_element_without_a_check(capsys):
    with pytest.raises(SystemExit):
        pilots.main(["--budget", "sgr.tab4"])
    assert "--budget takes elements among" in capsys.readouterr().err


def test_an_import_that_places_local_runs_assesses_the_budget_checked_records_again(tmp_path, monkeypatch):
    """A window's half-budget runs change a stored record's precondition: the import assesses it again."""
    import json

    from gradalign.compute import gpu_import
    from gradalign.records import rederive
    from gradalign.environment import project_root

    entry = json.loads(next((project_root() / "results" / "runs" / "sgr.local").glob("*.json")).read_text())
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir()
    (out / "window.json").write_text(json.dumps({"minutes": 1.0, "units": [], "began": "2026-11-27T00:00:00+00:00"}))
    (out / "runs-1.json").write_text(json.dumps({"runs": [entry]}))
    record = home / "sgr" / "sgr.tab3" / "cpu-x.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    calls = []

    def rederived(path, store):
        calls.append(path.name)
        return "sgr.tab3", "inconclusive", "not reproduced"

    monkeypatch.setattr(rederive, "rederive_file", rederived)
    imported = gpu_import.import_window(out, home)
    assert imported.added_runs and calls == ["cpu-x.json"]
    assert imported.reassessed == ["sgr.tab3 [cpu-x]: inconclusive -> not reproduced"]
    gpu_import.import_window(out, home)  # the run is here already: nothing placed, nothing assessed again
    assert calls == ["cpu-x.json"]


def test_the_page_view_pairs_each_arm_at_both_budgets_and_says_which_finished(monkeypatch):
    """Fabricated committed runs: layer-wise gains 0.2 points from 30 to 60 epochs (finished), SGR 2 (not), one
    reforward seed diverged at 30 epochs (judged by its tail)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import IPython.display

    from gradalign.book import page_budget

    def rows(units, arm, metric, higher, tolerance):
        out = []
        for u in units:
            method, epochs = u.spec["method"]["method"], u.spec["protocol"]["epochs"]
            full = {"layerwise": 80.2, "sgr": 77.0, "reforward": 81.0}[method]
            final = full if epochs == 60 else full - {"layerwise": 0.2, "sgr": 2.0, "reforward": 0.1}[method]
            diverged = "nan" if (method, epochs, u.spec["seed"]) == ("reforward", 30, 1) else None
            out.append({"done": True, "final": final, "diverged": diverged})
        return out

    shown = []
    monkeypatch.setattr(pilots, "stored_units", rows)
    monkeypatch.setattr(IPython.display, "display", lambda x: shown.append(x))
    monkeypatch.setattr(plt, "show", lambda: plt.close("all"))
    page_budget.budget_view("sgr.tab3")
    table = next(x for x in shown if hasattr(x, "columns"))
    assert len(table) == 6 and set(table["finished learning"]) == {"yes", "no", "not checked: a run diverged"}
    text = "\n".join(x.data for x in shown if hasattr(x, "data"))
    assert "2 arm(s) had finished learning at 60 epochs" in text and "2 had not" in text and "+2.00" in text
