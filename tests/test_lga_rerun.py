"""Figure 7 at the settings `lga.tune` chose (`compute.lga_rerun`): nothing to train and the backlog
unchanged until the study's record is stored; once it is, the rerun's 72 runs right after the study in the GPU
backlog, named as what they are, counted on the page, and its record read at the stored overrides."""

from __future__ import annotations

import pytest

from gradalign.compute import lga_rerun
from gradalign.compute.gpu_window import BACKLOG, full_backlog
from gradalign.compute.pilots import purpose
from gradalign.experiments.lga.ssl_tuning import rerun_overrides

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

    stored = {"rerun": rerun_overrides(CHOSEN)}

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


def test_the_stored_choice_queues_figure_7_at_b_and_b_over_2_right_after_the_study(store, study):
    items = lga_rerun.items()
    assert [i[2].get("protocol.steps") for i in items] == [None, 3000]
    assert all(i[:2] == ("lga.fig7", "cpu") and i[2]["tuned"] == study["rerun"]["tuned"] for i in items)
    backlog = full_backlog()
    at = backlog.index(("lga.tune", "cpu", {}))
    assert backlog[at + 1 : at + 3] == tuple(items) and len(backlog) == len(BACKLOG) + 2
    assert {purpose(*i) for i in items} == {"Figure 7 at the settings lga.tune chose"}
    assert lga_rerun.committed() == (0, 72)  # an empty store: 36 runs at each budget, none committed
    assert "0 of its 72 runs" in lga_rerun.status() and lga_rerun.record() is None


def test_a_bad_parallel_is_refused_before_anything_is_read(capsys):
    with pytest.raises(SystemExit) as stopped:
        lga_rerun.main(["--parallel", "0"])
    assert stopped.value.code == 2 and "--parallel must be >= 1" in capsys.readouterr().err
