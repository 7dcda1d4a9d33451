"""LGA's synthetic study (§3.2): the preconditions measured from a stored record (`lga.validity.shells`), each fed
a passing and a failing case, the per-trial quantities (`trial_finals`), the imputed-label diagnostics, the
validation split and the tuning candidates."""

from __future__ import annotations

import pytest
import torch

from gradalign.data.shells import make_shells
from gradalign.experiments.lga import shells as study
from gradalign.experiments.lga.validity import FIT_ERROR, MOVED, shells
from gradalign.training.shells import ShellsTrialSettings, imputed_diagnostics, shells_trial

FLAT = [60.0, 30.0, 25.0, 24.0, 24.0, 23.9, 24.0, 23.95, 24.0, 23.9]  # validation error (%), flat tail
STILL = [60.0, 50.0, 45.0, 40.0, 36.0, 33.0, 30.0, 28.0, 26.0, 24.0]  # still falling by 4 points at the end


def _record(val_error=None, labeled_error=None, moved=None, trials=3) -> dict:
    per = {
        "supervised": {"val_error": val_error or [FLAT] * trials, "labeled_error": labeled_error or [0.0] * trials},
        "lga": {"val_error": val_error or [FLAT] * trials, "imputed_moved": moved or [0.4] * trials},
    }
    return {"config": {"trials": trials}, "metrics": {"per_trial": per}}


def test_preconditions_pass_on_a_finished_fitting_active_study():
    got = shells(_record())
    assert all(c["passed"] for c in got.values()), got


def test_finished_learning_fails_when_the_validation_error_still_falls():
    got = shells(_record(val_error=[STILL, STILL, FLAT]))
    assert not got["finished_learning"]["passed"]
    assert got["finished_learning"]["value"]["finished"] == 2  # of 6 runs: one flat curve per arm


def test_fits_labels_fails_when_the_baseline_misses_its_labels():
    got = shells(_record(labeled_error=[0.0, FIT_ERROR + 1, 0.0]))
    assert not got["fits_labels"]["passed"]
    assert got["fits_labels"]["value"]["worst"] == FIT_ERROR + 1


def test_mechanism_active_fails_when_the_imputed_labels_stayed_put():
    got = shells(_record(moved=[0.4, MOVED / 2, 0.4]))
    assert not got["mechanism_active"]["passed"]


def test_unrecorded_quantities_fail_as_not_recorded():
    record = {"config": {"trials": 3}, "metrics": {"per_trial": {"supervised": {}, "lga": {}}}}
    got = shells(record)
    for name in ("finished_learning", "fits_labels", "mechanism_active"):
        assert not got[name]["passed"] and got[name]["value"] == "not recorded", name


def test_imputed_diagnostics_at_the_start_and_when_certain():
    y = torch.tensor([0, 1, 2, 3])
    start = imputed_diagnostics(torch.zeros(4, 5), y)
    assert start["imputed_moved"] == pytest.approx(0.0) and start["imputed_confidence"] == pytest.approx(0.2)
    certain = imputed_diagnostics(100 * torch.nn.functional.one_hot(torch.tensor([0, 1, 2, 0]), 5).float(), y)
    assert certain["imputed_accuracy"] == pytest.approx(0.75)
    assert certain["imputed_moved"] == pytest.approx(0.8) and certain["imputed_confidence"] == pytest.approx(1.0)


def test_validation_split_comes_last_and_leaves_the_others_unchanged():
    a = make_shells(5, 30, 40, 50, seed=3)
    b = make_shells(5, 30, 40, 50, seed=3, n_val=20)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.x_labeled, b.x_labeled)
    assert b.x_val.shape == (20, 5) and len(a.x_val) == 0
    with pytest.raises(Exception, match="n_val"):
        make_shells(5, 30, 40, 50, seed=3, n_val=-1)


def test_trial_without_alignment_records_validation_and_lga_diagnostics():
    data = make_shells(d=5, n_labeled=100, n_unlabeled=200, n_test=150, seed=0, n_val=120)
    s = ShellsTrialSettings(steps=20, batch=16, eval_every=10, alignment=False, unlabeled_batch=40)
    c = shells_trial(data, "lga", s, seed=0)
    assert "alignment" not in c and len(c["val_accuracy"]) == len(c["step"]) == 2
    assert c["imputed_moved"][-1] > 0 and 0 <= c["final_eps_dominates"][0] <= 1
    assert 0 <= c["final_labeled_error"][0] <= 100


def test_trial_finals_early_stop_by_validation():
    curve = {
        "test_accuracy": [0.5, 0.8, 0.7],
        "test_loss": [1.0, 0.6, 0.9],
        "val_accuracy": [0.5, 0.7, 0.75],  # best at the last evaluation
        "val_loss": [1.0, 0.5, 0.8],  # best at the second
        "alignment": [0.0, 0.2, 0.4],
        "final_test_accuracy": [0.7],
        "final_test_loss": [0.9],
        "final_labeled_error": [1.0],
    }
    f = study.trial_finals({"supervised": curve}, "supervised")
    assert f["stopped_test_accuracy"] == 0.7 and f["stopped_test_loss"] == 0.6
    assert f["best_test_accuracy"] == 0.8 and f["mean_alignment"] == pytest.approx(0.3)
    assert f["val_error"] == [50.0, 30.0, 25.0]


def test_tuning_candidates_vary_one_setting_at_a_time():
    cfg = study.ShellsStudyConfig()
    from gradalign.experiments.lga.shells_tuning import tuning_candidates

    cands = tuning_candidates(cfg)
    start = cands["lga/alpha_w=0.01"][1]
    assert cands["lga/lr=0.001"][1] == start  # the start is one candidate on every axis
    assert cands["lga/alpha_w=0.1"][1].alpha_w == 0.1 and not start.alignment
    assert all(s.steps == cfg.tuning_steps for _, s in cands.values())
