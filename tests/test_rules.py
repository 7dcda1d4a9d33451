"""The rules that decide an empirical verdict (`experiments.rules`, `verdict`): each with a passing and a failing
case, and the re-derivation of stored records under them (`assess`, `rederive`)."""

from __future__ import annotations

import json
import math

import pytest

from gradalign.experiments.base import check
from gradalign.experiments.rules import (
    all_of,
    compare,
    enough_seeds,
    finished_learning,
    fits_labels,
    mechanism_active,
    near_reference,
    run_finished,
    summary,
)
from gradalign.experiments.verdict import derive_verdict, reason


def _arm(mean, std=1.0, n=3):
    return {"mean": mean, "std": std, "n": n}


def _cmp(a, b, relation="beats", higher=True):
    return compare(a, b, relation=relation, higher_is_better=higher, quantity="accuracy", names=("A", "B"), claim="c")


# --- comparisons ---------------------------------------------------------------------------------------------


def test_beats_needs_welchs_t_beyond_its_critical_value():
    se = math.sqrt(2 / 3)  # std 1 and n 3 on both arms: ν = 4, t₀.₉₇₅(4) = 2.776
    assert _cmp(_arm(10 + 2.9 * se), _arm(10))["passed"]
    inside = _cmp(_arm(10 + 2.5 * se), _arm(10))  # beyond 2 SE (rules version 3 passed it), within Welch's t
    assert not inside["passed"] and inside["within_noise"] and inside["value"]["decision"] == "within noise"
    worse = _cmp(_arm(10 - 2.9 * se), _arm(10))
    assert not worse["passed"] and not worse["within_noise"] and worse["value"]["decision"] == "loses"
    v = worse["value"]
    assert v["diff"] == pytest.approx(-2.9 * se, abs=1e-3) and v["se"] == pytest.approx(se, 1e-3)
    assert v["nu"] == pytest.approx(4.0) and v["t"] == pytest.approx(-2.9, abs=1e-3)
    assert v["ci95"] == pytest.approx([v["diff"] - 2.776445 * se, v["diff"] + 2.776445 * se], abs=1e-3)


def test_lower_is_better_flips_the_sign():
    assert _cmp(_arm(5), _arm(10), higher=False)["passed"]
    assert not _cmp(_arm(10), _arm(5), higher=False)["passed"]


def test_at_least_passes_on_a_tie_and_fails_beyond_welchs_critical_t():
    tie = _cmp(_arm(9.5), _arm(10), "at_least")
    assert tie["passed"] and tie["value"]["tie"]
    se = math.sqrt(2 / 3)  # the smallest difference detectable at 80 % power: (t₀.₉₇₅(4) + t₀.₈(4)) SE
    assert tie["value"]["detectable"] == pytest.approx((2.776445 + 0.940965) * se, abs=1e-3)
    assert not _cmp(_arm(10 - 3), _arm(10), "at_least")["passed"]
    assert not _cmp(_arm(10 - 3), _arm(10), "at_least")["within_noise"]


def test_fewer_than_three_seeds_cannot_decide():
    few = _cmp(_arm(90, 0.0, 2), _arm(10, 0.0, 3))
    assert not few["passed"] and few["within_noise"]
    assert not _cmp(_arm(90, 0.0, 1), _arm(10, 0.0, 1), "at_least")["passed"]


def test_compare_refuses_a_bad_summary_and_relation():
    with pytest.raises(ValueError, match="finite mean, std and n"):
        _cmp({"mean": float("nan"), "std": 1, "n": 3}, _arm(1))
    with pytest.raises(ValueError, match="relation must be one of"):
        _cmp(_arm(1), _arm(1), "wins")


def test_all_of_passes_fails_or_is_within_noise():
    good, noise, bad = _cmp(_arm(20), _arm(10)), _cmp(_arm(10.5), _arm(10)), _cmp(_arm(0), _arm(10))
    assert all_of({"x": good, "y": good}, "r", "c")["passed"]
    mixed = all_of({"x": good, "y": noise}, "r", "c")
    assert not mixed["passed"] and mixed["within_noise"]
    failed = all_of({"x": noise, "y": bad}, "r", "c")
    assert not failed["passed"] and not failed["within_noise"]
    with pytest.raises(ValueError):
        all_of({}, "r", "c")


def test_summary_is_the_sample_statistics():
    s = summary([1.0, 2.0, 3.0])
    assert s == {"mean": 2.0, "std": 1.0, "n": 3, "values": [1.0, 2.0, 3.0]}


# --- preconditions ---------------------------------------------------------------------------------------------


def test_a_run_finished_when_its_last_fifth_barely_improved():
    flat = [50, 30, 20, 15, 14.9, 14.95, 14.9, 14.8, 14.85, 14.9]
    rising = [50, 40, 35, 30, 27, 25, 23, 21, 19, 17]
    assert run_finished(flat, higher_is_better=False, tolerance=0.5) is True
    assert run_finished(rising, higher_is_better=False, tolerance=0.5) is False
    assert run_finished([1, 2, 3], higher_is_better=True, tolerance=0.5) is None  # too few evaluations
    falling = [50, 60, 70, 75, 74, 73, 72, 71, 70, 69]  # an accuracy past its best: no gain in the last fifth
    assert run_finished(falling, higher_is_better=True, tolerance=0.5) is True


def test_finished_learning_needs_eighty_percent_of_runs():
    flat = [50, 30, 20, 15, 14.9, 14.9, 14.9, 14.9, 14.9, 14.9]
    rising = [50, 40, 35, 30, 27, 25, 23, 21, 19, 17]
    four_of_five = {f"r{i}": flat for i in range(4)} | {"r4": rising}
    assert finished_learning(four_of_five, False, 0.5, "error")["passed"]
    three_of_five = {f"r{i}": flat for i in range(3)} | {"r3": rising, "r4": rising}
    out = finished_learning(three_of_five, False, 0.5, "error")
    assert not out["passed"] and out["value"]["still_improving"] == ["r3", "r4"]
    assert not finished_learning({"short": [1, 2]}, False, 0.5, "error")["passed"]
    assert not finished_learning({}, False, 0.5, "error")["passed"]


def test_fits_labels_refuses_an_underfitting_or_unmeasured_baseline():
    assert fits_labels({"a": 1.0, "b": 4.0}, 5.0)["passed"]
    assert not fits_labels({"a": 1.0, "b": 24.0}, 5.0)["passed"]  # metagrad's Conv-Large at 4,000 labels
    missing = fits_labels({"a": None}, 5.0)
    assert not missing["passed"] and missing["value"] == "not recorded"


def test_enough_seeds_mechanism_and_reference():
    assert enough_seeds({"a": 3, "b": 5})["passed"] and not enough_seeds({"a": 3, "b": 1})["passed"]
    assert not enough_seeds({})["passed"]
    assert mechanism_active(True, 0.2, "r", "w")["passed"] and not mechanism_active(False, 1.0, "r", "w")["passed"]
    assert near_reference(21.0, 20.0, 2.0, "error")["passed"]
    assert not near_reference(25.0, 20.0, 2.0, "error")["passed"]
    assert not near_reference(21.0, None, 2.0, "error")["passed"]


# --- the verdict ---------------------------------------------------------------------------------------------


GOOD, BAD = check(True, 1, "r", "c"), check(False, 1, "r", "c")
NOISE = {**check(False, 1, "r", "c"), "within_noise": True}


@pytest.mark.parametrize(
    ("checks", "preconditions", "status"),
    [
        ({"a": GOOD}, {"p": GOOD}, "reproduced"),
        ({"a": GOOD, "b": BAD}, {"p": GOOD}, "not reproduced"),
        ({"a": GOOD, "b": NOISE}, {"p": GOOD}, "inconclusive"),
        ({"a": BAD, "b": NOISE}, {"p": GOOD}, "not reproduced"),
        ({"a": BAD}, {"p": BAD}, "inconclusive"),  # an invalid test decides nothing
        ({"a": GOOD}, {"p": BAD}, "inconclusive"),
    ],
)
def test_empirical_verdicts(checks, preconditions, status):
    verdict = derive_verdict(checks, "reduced", preconditions, "empirical")
    assert verdict["status"] == status


def test_the_reason_names_the_unmet_precondition_or_the_noise():
    pre = {"p": {**BAD, "claim": "the runs finished learning"}}
    verdict = derive_verdict({"a": GOOD}, "exact", pre, "empirical")
    assert verdict == {"status": "inconclusive", "failed": [], "unmet": ["p"], "within_noise": [], "unstable": []}
    assert reason(verdict, pre) == "precondition not met: the runs finished learning"
    noise = derive_verdict({"a": NOISE}, "exact", {"p": GOOD}, "empirical")
    assert reason(noise) == "difference within noise: a"


def test_analytic_elements_have_no_noise_and_no_preconditions():
    assert derive_verdict({"a": NOISE}, "exact")["status"] == "not reproduced"
    with pytest.raises(ValueError, match="no preconditions"):
        derive_verdict({"a": GOOD}, "exact", {"p": GOOD}, "analytic")
    with pytest.raises(ValueError, match="evidence must be one of"):
        derive_verdict({"a": GOOD}, "exact", None, "anecdotal")


# --- stored records re-derived --------------------------------------------------------------------------------


def _metagrad_record(err_meta, err_base):
    table = {
        "labeled_only": {"best_test_error": summary(err_base)},
        "meta_mixup": {"best_test_error": summary(err_meta)},
    }
    curve = [40, 30, 25, 24, 23.9, 23.9, 23.9, 23.9, 23.9, 23.9]
    return {
        "id": "metagrad.tab1",
        "scope": "reduced",
        "config": {"columns": [["fashion_mnist", 1000]]},
        "metrics": {"table": {"fashion_mnist_1000": table}},
        "curves": {"fashion_mnist_1000/labeled_only": {"val_error": [curve] * 3}},
        "checks": {"old": GOOD},
    }


def test_assess_rederives_claims_and_measures_preconditions(tmp_path, monkeypatch):
    from gradalign.records.assess import assess

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path))  # no supervised reference measured there
    record = assess(_metagrad_record([10.0, 11.0, 12.0], [20.0, 21.0, 22.0]))
    assert record["evidence"] == "empirical" and "old" not in record["checks"]
    assert record["checks"]["method_beats_labeled_only"]["passed"]
    assert record["preconditions"]["finished_learning"]["passed"]
    assert record["preconditions"]["enough_seeds"]["passed"]
    assert not record["preconditions"]["fits_labels"]["passed"]  # not recorded by these runs
    assert record["verdict"]["status"] == "inconclusive"
    assert set(record["verdict"]["unmet"]) == {"fits_labels", "mechanism_active", "near_reference"}


def test_assess_marks_a_record_lacking_what_the_rules_need():
    from gradalign.records.assess import assess

    record = _metagrad_record([10.0], [20.0])
    del record["metrics"]["table"]
    record["metrics"]["points"] = "not a table"
    record = assess(record)
    assert record["checks"] == {"old": GOOD}
    assert record["verdict"] == {
        "status": "inconclusive",
        "failed": [],
        "unmet": ["evaluated"],
        "within_noise": [],
        "unstable": [],
    }


def test_assess_refuses_a_record_with_no_checks():
    from gradalign.records.assess import assess

    with pytest.raises(ValueError, match="no checks"):
        assess({"id": "lga.prop1", "scope": "exact", "checks": {}})


def test_rederive_updates_a_schema_2_record_and_leaves_an_edited_one_alone(tmp_path):
    from gradalign.records.rederive import rederive_file
    from gradalign.records.results import SCHEMA, ResultStore, record_digest

    from gradalign.config import config_digest

    store = ResultStore(tmp_path)
    record = _metagrad_record([10.0, 11.0, 12.0], [20.0, 21.0, 22.0])
    record.update(
        schema=2,
        part="metagrad",
        preset="cpu",
        experiment_version=1,
        verdict={"status": "reproduced qualitatively at reduced scale", "failed": []},
        provenance={"hardware": "test", "wall_time_s": 1.0},
    )
    record["config_hash"] = config_digest(record["config"], 1)
    record["digest"] = record_digest(record)
    path = store.path(record["id"], "cpu", record["config_hash"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    eid, before, now = rederive_file(path, store)
    assert (eid, before, now) == ("metagrad.tab1", "reproduced qualitatively at reduced scale", "inconclusive")
    stored = json.loads(path.read_text())
    assert stored["schema"] == SCHEMA and stored["rederived"]["from_schema"] == 2
    assert store.load("metagrad.tab1", "cpu", record["config_hash"], 1) is not None
    record["metrics"]["table"]["fashion_mnist_1000"]["meta_mixup"]["best_test_error"]["mean"] = 1.0  # edited
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="edited"):
        rederive_file(path, store)


def test_tuned_inside_grid_fails_a_rate_at_an_end_of_its_grid():
    from gradalign.experiments.rules import tuned_inside_grid

    inside = {"grid": {"0.01": 80.0, "0.03": 82.0, "0.1": 0.0}, "chosen": 0.03}  # 0.1 diverged: still tried
    assert tuned_inside_grid({"sgr": inside})["passed"]
    low = {"grid": {"0.003": 65.5, "0.01": 0.0, "0.03": 0.0}, "chosen": 0.003}
    top = {"grid": {"0.003": 66.6, "0.01": 73.3, "0.03": 78.0}, "chosen": 0.03}
    failed = tuned_inside_grid({"sgr": inside, "fa": low, "drtp": top})
    assert not failed["passed"] and failed["value"]["at_an_end"] == {"fa": "0.003", "drtp": "0.03"}
    assert not tuned_inside_grid({"fa": {"grid": {"0.01": 1.0, "0.1": 2.0}, "chosen": 0.01}})["passed"]  # 2 rates
    assert not tuned_inside_grid({})["passed"]
