"""Figure 7 at the settings `lga.tune` chose (`compute.lga_rerun`): nothing to train and the backlog
unchanged until the study's record is stored; once it is, the rerun's 72 runs right after the study in the GPU
backlog, named as what they are, counted on the page, and its record read at the stored overrides."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gradalign.compute import lga_rerun
from gradalign.compute.backlog import full_backlog
from gradalign.compute.backlog import BACKLOG
from gradalign.compute.pilots import runs_only
from gradalign.compute.window_report import purpose
from gradalign.experiments.lga.ssl_tuning import rerun_overrides
from gradalign.experiments.lga.validity import control_for

CHOSEN = {
    "supervised": {"lr": 2e-3},
    "vat": {"lr": 4e-3, "eps": 2.0, "weight": 0.5},
    "lga": {
        "lr": 5e-4,
        "alpha_w": 3e-2,
        "eps_norm": 1e-5,
        "labeled_weight": 2.0,
        "grad_ema_decay": 0.95,
        "norm_ema_decay": 0.99,
    },
}


@pytest.fixture
def study(monkeypatch):
    """An `lga.tune` record stored with `rerun` (set its value on the returned dict); other records: none."""
    from gradalign.records import runner

    stored = {"rerun": json.loads(json.dumps(rerun_overrides(CHOSEN)))}  # as the record stores it: lists, not tuples

    def stored_record(element_id, preset, overrides=None, store=None):
        if element_id == "lga.tune" and preset == "cpu":
            return {"metrics": {"rerun": stored["rerun"]}}
        return None

    monkeypatch.setattr(runner, "stored_record", stored_record)
    return stored


def test_with_no_study_record_nothing_is_queued_and_the_command_refuses_in_one_line(store, capsys):
    assert lga_rerun.items() == [] and lga_rerun.record() is None
    assert full_backlog() == BACKLOG
    assert lga_rerun.status().startswith("Figure 7 at the tuned settings waits on the study's record")
    with pytest.raises(SystemExit) as stopped:
        lga_rerun.main([])
    assert stopped.value.code == 2
    assert "lga.tune has no stored cpu record yet" in capsys.readouterr().err


def test_a_study_record_without_a_rerun_queues_nothing(store, study):
    for missing in (None, {}, {"tuned": []}):
        study["rerun"] = missing
        assert lga_rerun.overrides() is None and lga_rerun.items() == [] and full_backlog() == BACKLOG


def test_the_stored_choice_queues_figure_7_at_b_b_over_2_and_its_control_right_after_the_study(store, study):
    items = lga_rerun.items()
    assert [i[2].get("protocol.steps") for i in items] == [None, 3000, None]
    assert all(i[:2] == ("lga.fig7", "cpu") for i in items)
    assert items[0][2]["tuned"] == items[1][2]["tuned"] == study["rerun"]["tuned"]
    assert items[2][2] == {**study["rerun"], **control_for(study["rerun"]["tuned"])}
    assert all(runs_only(*i) for i in items)  # the record is assembled once all three are in (`--assemble`)
    backlog = full_backlog()
    at = backlog.index(("lga.tune", "cpu", {}))
    assert backlog[at + 1 : at + 4] == tuple(items) and len(backlog) == len(BACKLOG) + 3
    assert [purpose(*i) for i in items] == [
        "Figure 7 at the settings lga.tune chose",
        "Figure 7 at the settings lga.tune chose, at half the steps",
        "Figure 7 at the settings lga.tune chose: the mechanism control, LGA's runs with α_w = 0",
    ]
    # an empty store: 36 runs at each budget and LGA's 18 with α_w = 0 (the baselines' controls are their own runs)
    assert lga_rerun.committed() == (0, 90)
    assert "0 of its 90 runs" in lga_rerun.status() and lga_rerun.record() is None


def test_the_control_at_the_tuned_settings_freezes_w_in_both_lga_arms_and_changes_nothing_else():
    """`control_for`: the tuned α_w is applied after `lga.alpha_w`, so the plain control would train the tuned α_w
    again (the failing case below); with it, both LGA arms train at α_w = 0 and every other setting as tuned."""
    from gradalign.experiments import get
    from gradalign.experiments.lga.ssl_runs import method_settings
    from gradalign.experiments.lga.validity import CONTROL

    full = rerun_overrides(CHOSEN)
    treated = get("lga.fig7").resolve("cpu", full)
    plain = get("lga.fig7").resolve("cpu", {**full, **CONTROL})
    control = get("lga.fig7").resolve("cpu", {**full, **control_for(full["tuned"])})
    for method in ("lga", "lga_vat"):
        tuned = method_settings(treated, method, "cifar")
        assert (
            tuned.alpha_w == 3e-2 and method_settings(plain, method, "cifar") == tuned
        )  # the plain control: no control
        frozen = method_settings(control, method, "cifar")
        assert frozen.alpha_w == 0.0 and frozen == replace(tuned, alpha_w=0.0)
    for method in ("supervised", "vat"):
        assert method_settings(control, method, "cifar") == method_settings(treated, method, "cifar")
    assert control_for(()) == control_for([("vat", "eps", 2.0)]) == CONTROL  # untuned: the committed controls' keys


def test_a_bad_parallel_is_refused_before_anything_is_read(capsys):
    with pytest.raises(SystemExit) as stopped:
        lga_rerun.main(["--parallel", "0"])
    assert stopped.value.code == 2 and "--parallel must be >= 1" in capsys.readouterr().err
