"""Rules version 4 (issue 43): Welch's t, claim-level budget stability, fits-labels per run and one-sided. Each rule
with a case that passes and a case that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradalign.experiments.base import check
from gradalign.experiments.claim_budget import change, stabilise
from gradalign.experiments.rules import all_of, compare, fits_labels, fits_labels_by_role, summary
from gradalign.experiments.student_t import incomplete_beta, t_cdf, t_quantile, welch
from gradalign.experiments.verdict import derive_verdict, reason

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("nu", "quantile"),
    [(1, 12.706205), (2, 4.302653), (3, 3.182446), (4, 2.776445), (10, 2.228139), (30, 2.042272), (1e7, 1.959964)],
)
def test_t_quantiles_match_the_tables(nu, quantile):
    assert t_quantile(0.975, nu) == pytest.approx(quantile, abs=1e-5)
    assert t_cdf(quantile, nu) == pytest.approx(0.975, abs=1e-7)  # the table rounds to 6 decimals
    assert t_quantile(0.025, nu) == pytest.approx(-quantile, abs=1e-5)


def test_incomplete_beta_closed_forms_and_bad_input():
    assert incomplete_beta(1.0, 1.0, 0.3) == pytest.approx(0.3)  # uniform
    assert incomplete_beta(2.0, 1.0, 0.3) == pytest.approx(0.09)  # x^a for b = 1
    with pytest.raises(ValueError, match="x must lie"):
        incomplete_beta(1.0, 1.0, 1.5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_cdf(1.0, 0.0)


def test_welch_degrees_of_freedom_fall_to_the_noisier_arm():
    equal = welch({"mean": 1, "std": 1, "n": 3}, {"mean": 0, "std": 1, "n": 3})
    assert equal["nu"] == pytest.approx(4.0)
    lopsided = welch({"mean": 1, "std": 3, "n": 3}, {"mean": 0, "std": 0.01, "n": 3})
    assert lopsided["nu"] == pytest.approx(2.0, abs=1e-3)  # the quiet arm adds almost no degrees of freedom


def _beats(a, b):
    return compare(
        summary(a), summary(b), relation="beats", higher_is_better=True, quantity="acc", names=("A", "B"), claim="c"
    )


# --- claim-level budget stability -------------------------------------------------------------------------------


def test_a_decision_that_flips_between_budgets_is_inconclusive():
    full = {"claim": _beats([82.0, 82.5, 81.5], [80.0, 80.4, 79.6])}  # beats at B
    half = {"claim": _beats([80.0, 80.5, 79.5], [80.1, 80.4, 79.9])}  # within noise at B/2
    assert full["claim"]["passed"] and half["claim"]["within_noise"]
    out = stabilise(full, half, ("60 epochs", "30 epochs"))["claim"]
    assert not out["passed"] and out["within_noise"] and out["budget_unstable"]
    assert out["budget"]["comparisons"][""]["full"] == "beats" and out["budget"]["comparisons"][""]["half"] == (
        "within noise"
    )
    verdict = derive_verdict({"claim": out}, "reduced", {}, "empirical")
    assert verdict["status"] == "inconclusive" and verdict["unstable"] == ["claim"]
    assert "half the budget" in reason(verdict)


def test_the_same_decision_at_both_budgets_decides_even_when_the_arms_still_gain():
    # every arm gains 3 points from B/2 to B (no run "finished"), the difference stays put
    full = {"claim": _beats([85.0, 85.4, 84.6], [80.0, 80.3, 79.7])}
    half = {"claim": _beats([82.0, 82.5, 81.6], [77.0, 77.2, 76.7])}
    out = stabilise(full, half, ("60 epochs", "30 epochs"))["claim"]
    assert out["passed"] and out["budget"]["stable"] and out["budget"]["comparisons"][""]["paired"]
    assert derive_verdict({"claim": out}, "reduced", {}, "empirical")["status"] == "reproduced"


def test_a_difference_that_moves_beyond_its_noise_is_unstable_though_the_decision_holds():
    full = {"claim": _beats([90.0, 90.1, 89.9], [80.0, 80.1, 79.9])}  # +10
    half = {"claim": _beats([84.0, 84.1, 83.9], [80.0, 80.1, 79.9])}  # +4: beats as well, moved 6 points
    row = stabilise(full, half, ("B", "B/2"))["claim"]["budget"]["comparisons"][""]
    assert row["full"] == row["half"] == "beats" and not row["stable"] and row["change"] == pytest.approx(6.0)


def test_change_pairs_by_seed_and_falls_back_to_unpaired():
    a = _beats([85.0, 86.0, 84.0], [80.0, 81.0, 79.0])["value"]
    b = _beats([83.0, 84.0, 82.0], [78.0, 79.0, 77.0])["value"]
    paired = change(a, b)
    assert paired["paired"] and paired["se"] == 0.0 and paired["stable"]  # the same shift in every seed
    a.pop("values_a")
    unpaired = change(a, b)
    assert not unpaired["paired"] and unpaired["se"] == pytest.approx((a["se"] ** 2 + b["se"] ** 2) ** 0.5, rel=1e-3)


def test_a_level_claim_is_stable_only_when_it_passes_alike_at_both_budgets():
    collapses, holds = check(True, 1, "r", "c"), check(False, 1, "r", "c")
    assert stabilise({"x": collapses}, {"x": collapses}, ("B", "B/2"))["x"]["passed"]
    flipped = stabilise({"x": collapses}, {"x": holds}, ("B", "B/2"))["x"]
    assert not flipped["passed"] and flipped["budget_unstable"]
    missing = stabilise({"x": collapses}, {}, ("B", "B/2"))["x"]
    assert not missing["passed"] and "no decision" in missing["budget"]["why"]


def test_an_all_of_claim_is_stable_only_when_every_part_is():
    good = _beats([85.0, 85.4, 84.6], [80.0, 80.3, 79.7])
    full = {"c": all_of({"x": good, "y": good}, "r", "c")}
    flip = _beats([80.0, 80.5, 79.5], [80.1, 80.4, 79.9])
    half = {"c": all_of({"x": good, "y": flip}, "r", "c")}
    out = stabilise(full, half, ("B", "B/2"))["c"]
    assert out["budget_unstable"] and out["budget"]["comparisons"]["x"]["stable"]


# --- fits its labels: every run, every arm, one-sided -------------------------------------------------------------


def test_one_run_over_the_threshold_fails_though_the_mean_is_under():
    runs = {"seed 0": 4.2, "seed 1": 5.275, "seed 2": 4.125}  # LGA benchmark's supervised runs at 4,000 labels
    assert sum(runs.values()) / 3 < 5.0
    out = fits_labels(runs, 5.0)
    assert not out["passed"] and out["value"]["worst_run"] == "seed 1" and out["value"]["worst"] == 5.275
    assert fits_labels({"seed 0": 4.2, "seed 1": 4.9}, 5.0)["passed"]


LOSS = {**check(False, {}, "r", "c"), "within_noise": False}
WIN = check(True, {}, "r", "c")


def test_an_underfit_baseline_blocks_a_win_and_leaves_a_loss_decided():
    pre = fits_labels_by_role(
        {"sup/seed 0": 9.0, "lga/seed 0": 1.0}, {"sup/seed 0": "baseline", "lga/seed 0": "method"}, 5.0
    )
    assert not pre["fits_labels"]["passed"] and pre["method_fits_labels"]["passed"]
    assert derive_verdict({"c": LOSS}, "reduced", pre, "empirical")["status"] == "not reproduced"
    won = derive_verdict({"c": WIN}, "reduced", pre, "empirical")
    assert won["status"] == "inconclusive" and won["unmet"] == ["fits_labels"]


def test_an_underfit_method_arm_blocks_a_loss_and_leaves_a_win_decided():
    pre = fits_labels_by_role(
        {"sup/seed 0": 1.0, "mix/seed 0": 18.1}, {"sup/seed 0": "baseline", "mix/seed 0": "method"}, 5.0
    )
    lost = derive_verdict({"c": LOSS}, "reduced", pre, "empirical")
    assert lost["status"] == "inconclusive" and lost["unmet"] == ["method_fits_labels"]
    assert derive_verdict({"c": WIN}, "reduced", pre, "empirical")["status"] == "reproduced"


def test_fits_labels_refuses_an_unknown_role():
    with pytest.raises(ValueError, match="role must be one of"):
        fits_labels({"a": 1.0}, 5.0, role="judge")


# --- the stored records the issue names, decided from runs already committed --------------------------------------


def _stored(element_id: str) -> dict:
    part = element_id.split(".")[0]
    return json.loads(next((ROOT / "results" / part / element_id).glob("cpu-*.json")).read_text())


def test_table3_is_decided_from_its_committed_runs_at_60_and_30_epochs():
    from gradalign.records.assess import assess

    record = assess(_stored("sgr.tab3"))
    assert record["preconditions"]["finished_learning"]["passed"]  # replaced by the claim-level check
    layerwise = record["checks"]["sgr_beats_layerwise"]
    assert layerwise["budget"]["stable"] and not layerwise["passed"] and not layerwise.get("within_noise")
    resnet = layerwise["budget"]["comparisons"]["resnet32"]
    assert resnet["full"] == resnet["half"] == "loses" and resnet["paired"]
    assert record["verdict"]["status"] == "not reproduced"


def test_lga_benchmark_reads_every_seed_and_every_run_of_every_arm():
    from gradalign.records.assess import assess

    record = assess(_stored("lga.fig6"))
    finished = record["preconditions"]["finished_learning"]
    assert finished["value"]["runs"] == 36  # every seed's curve, not the first seed's 12
    fits = record["preconditions"]["fits_labels"]
    assert not fits["passed"] and fits["value"]["worst"] > 5.0  # the rule reads runs, not the mean of 4.53


# --- LGA's mechanism: the alignment it optimises, against an α_w = 0 control ------------------------------------


def test_lgas_alignment_check_passes_when_the_label_update_raises_the_alignment():
    from gradalign.experiments.lga.validity import alignment_check

    lga = {"lga/1000": [-0.08, -0.07, -0.09], "lga/4000": [-0.10, -0.11, -0.12]}
    control = {"lga/1000": [-0.20, -0.21, -0.19], "lga/4000": [-0.25, -0.24, -0.26]}
    out = alignment_check(lga, control)
    assert out["passed"] and out["claim"] == "the mechanism acted"
    assert out["value"]["lga/1000"]["decision"] == "beats"


def test_lgas_alignment_check_fails_on_a_run_with_alpha_w_zero():
    """An "LGA" arm that is really α_w = 0 (its w frozen) has its control's alignment: the check must fail."""
    from gradalign.experiments.lga.validity import alignment_check

    control = {"lga/1000": [-0.20, -0.21, -0.19]}
    frozen = {"lga/1000": [-0.201, -0.209, -0.191]}
    out = alignment_check(frozen, control)
    assert not out["passed"] and out["value"]["lga/1000"]["decision"] == "within noise"


def test_the_benchmarks_mechanism_is_not_recorded_until_its_control_is_trained():
    from gradalign.records.assess import assess

    record = assess(_stored("lga.fig5"))
    active = record["preconditions"]["mechanism_active"]
    assert not active["passed"] and active["value"]["control"] == "lga.alpha_w = 0"


def test_the_control_setting_is_accepted():
    from gradalign.experiments import get
    from gradalign.experiments.lga.validity import CONTROL

    assert get("lga.fig5").resolve("cpu", CONTROL).lga.alpha_w == 0.0


def test_a_gpu_window_trains_the_control_runs_and_assembles_no_record_from_them():
    from gradalign.compute import pilots, window_report
    from gradalign.experiments.lga.validity import CONTROL, CONTROLLED
    from gradalign.compute.backlog import BACKLOG

    for element_id in CONTROLLED:
        assert (element_id, "cpu", CONTROL) in BACKLOG
        assert pilots.runs_only(element_id, "cpu", CONTROL) and "α_w = 0" in window_report.purpose(
            element_id, "cpu", CONTROL
        )
    assert not pilots.runs_only("lga.fig7", "cpu", {})


# --- what a verdict can speak for: substitutes, our reading, independent run sets ---------------------------------


def test_a_claim_about_cifar10_run_on_fashion_mnist_is_tested_on_a_substitute():
    from gradalign.experiments.claim_scope import counted, on_substitute

    fig5 = {"id": "lga.fig5", "config": {"dataset": "fashion_mnist"}}
    assert on_substitute(fig5) == "CIFAR-10" and not counted(fig5, "lga.fig5")
    on_paper_data = {"id": "lga.fig5", "config": {"dataset": "cifar10"}}
    assert on_substitute(on_paper_data) is None and counted(on_paper_data, "lga.fig5")
    table = {"id": "lga.tab1", "config": {"columns": [["fashion_mnist", "svhn", 1000, 2000]]}}
    assert on_substitute(table) == "CIFAR-10 and SVHN"  # a family named svhn is a setting, not the data
    assert on_substitute({"id": "lga.fig7", "config": {"dataset": "fashion_mnist"}}) is None  # the paper's own data
    assert not counted(None, "sgr.fig4")  # our reading of a figure the text makes no claim about


def test_elements_that_share_runs_are_one_independent_run_set():
    from gradalign.experiments.claim_scope import run_sets

    records = {e: _stored(e) for e in ("lga.fig5", "lga.fig7", "sgr.tab3", "sgr.tab6", "sgr.tab7")}
    sets = run_sets(records)
    assert ["lga.fig5", "lga.fig7"] in sets and ["sgr.tab3", "sgr.tab6"] in sets and ["sgr.tab7"] in sets
    assert len(sets) == 3


def test_an_and_verdict_shows_how_many_of_its_claims_passed():
    from gradalign.book.report import verdict_text

    text = verdict_text(_stored("sgr.fig3"))
    assert "not reproduced" in text and "3 of 4 claims passed" in text


TINY_META = {  # metagrad.tab4 at the cpu preset (whose runs are committed), shrunk to seconds
    "columns": [["fashion_mnist", 100]],
    "width": 0.0625,
    "n_unlabeled": 200,
    "n_validation": 100,
    "n_test": 100,
    "seeds": 3,
    "tsne_points": 20,
    "protocol.steps": 8,
    "protocol.batch_labeled": 16,
    "protocol.batch_unlabeled": 16,
    "protocol.eval_every": 2,
}


def test_any_unit_based_element_is_decided_at_both_budgets_once_its_half_budget_runs_are_committed(
    tmp_path, monkeypatch
):
    from gradalign.records import runner
    from gradalign.records.assess import assess
    from gradalign.experiments import get
    from gradalign.experiments.claim_budget import at_half_budget, half_overrides
    from gradalign.experiments.units import units_of
    from gradalign.records.results import ResultStore
    from gradalign.store.run_unit import committed_runs

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    record = runner.run("metagrad.tab4", "cpu", TINY_META, store=ResultStore(tmp_path / "results"), device="cpu")
    assert half_overrides(record["config"]) == {"protocol.steps": 4}
    assert at_half_budget(record) is None  # no run at half the budget yet: the per-run rule stands
    assert not any("budget" in c for c in record["checks"].values())
    half_cfg = get("metagrad.tab4").resolve("cpu", {**TINY_META, "protocol.steps": 4})
    with committed_runs(tmp_path / "results" / "runs", write=True):
        for unit in units_of("metagrad.tab4", half_cfg):
            unit.run()
    half, budgets, runs = at_half_budget(record)
    assert budgets == ("8 steps", "4 steps") and runs == len(units_of("metagrad.tab4", half_cfg))
    assessed = assess(record)
    assert all("budget" in c for c in assessed["checks"].values())
    finished = assessed["preconditions"]["finished_learning"]
    assert finished["passed"] and "claim by claim" in finished["claim"]


def test_half_overrides_halve_steps_epochs_or_per_dataset_epochs():
    from gradalign.experiments.claim_budget import half_overrides

    assert half_overrides({"protocol": {"epochs": 60}}) == {"protocol.epochs": 30}
    assert half_overrides({"protocol": {"steps": 6000}}) == {"protocol.steps": 3000}
    assert half_overrides({"epochs": [16, 8]}) == {"epochs": [8, 4]}
    assert half_overrides({"protocol": {"epochs": 1}}) is None and half_overrides({"steps": 300}) is None


def test_a_gpu_window_trains_the_half_budget_runs_as_runs_only():
    from gradalign.compute import pilots, window_report
    from gradalign.experiments.claim_budget import HALF_BUDGET_QUEUE, half_budget_item, is_half_budget
    from gradalign.compute.backlog import BACKLOG

    assert half_budget_item("lga.fig7") == ("lga.fig7", "cpu", {"protocol.steps": 3000})
    assert half_budget_item("isoloss.tab1") == ("isoloss.tab1", "cpu", {"epochs": [8]})
    for element_id in HALF_BUDGET_QUEUE:
        item = half_budget_item(element_id)
        assert item in BACKLOG and pilots.runs_only(*item) and "half" in window_report.purpose(*item)
    assert not is_half_budget("lga.fig7", "cpu", {"protocol.steps": 2000})


def test_the_checks_table_shows_welchs_t_its_interval_and_the_decision_at_both_budgets():
    from gradalign.records.assess import assess
    from gradalign.book.report import checks_markdown

    table = checks_markdown(assess(_stored("sgr.tab3")))
    assert "95 % CI [" in table and "t = " in table and "ν = " in table
    assert "budget check, stable: plainnet32: within noise at 60 epochs, within noise at 30 epochs" in table
    assert "budget check, NOT stable" in table  # SGR against reforward on PlainNet-32: loses at 60, not at 30
