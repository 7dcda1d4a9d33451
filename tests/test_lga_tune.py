"""LGA tuned as the paper did (`lga.tune`): the candidate list (deterministic, candidate 0 the current setting, inside
its ranges), the choice on validation, the fairness summary and the claim each fed a failing case, bad settings
refused before any compute, the follow-on rerun's overrides, the view with no run committed, and the sizing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gradalign.cli import main
from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.experiments.lga.ssl_runs import method_settings
from gradalign.experiments.lga.ssl_tuning import (
    DIVERGED,
    SPACES,
    candidate_values,
    candidates,
    choose,
    cpu_config,
    fairness,
    rerun_items,
    rerun_overrides,
    tune_checks,
    tuning_view,
)
from gradalign.experiments.units import units_of
from gradalign.methods.lga import ConstantWeight
from gradalign.methods.lga_ssl import LGABenchmarkSettings, lga_settings


def test_the_candidate_list_is_deterministic_and_the_same_length_for_every_method():
    cfg = cpu_config()
    first = {m: candidates(cfg, m) for m in cfg.methods}
    assert first == {m: candidates(cfg, m) for m in cfg.methods}
    assert {len(c) for c in first.values()} == {cfg.candidates} == {8}
    assert candidates(replace(cfg, search_seed=1), "lga") != first["lga"]  # the seed draws the list
    assert len({c for c in first["lga"]}) == cfg.candidates  # no draw repeats another


def test_candidate_0_is_the_current_setting_and_figure_7s_run():
    cfg = cpu_config()
    assert candidate_values(cfg, "supervised", ()) == {"lr": 3e-3}
    assert candidate_values(cfg, "vat", ()) == {"lr": 3e-3, "eps": 6.0, "weight": 0.3}
    assert candidate_values(cfg, "lga", ()) == {
        "lr": 1e-3,
        "alpha_w": 1e-2,
        "eps_norm": 1e-3,
        "labeled_weight": 1.0,
        "grad_ema_decay": 0.9,
        "norm_ema_decay": 0.999,
    }
    tune = units_of("lga.tune", cfg)
    fig7 = {u.key for u in units_of("lga.fig7", get("lga.fig7").resolve("cpu"))}
    shared = [u for u in tune if u.key in fig7]
    assert len(tune) == 3 * 8 * 2 and len(shared) == 3 * 2  # candidate 0 of each method at each label count


def test_every_drawn_value_lies_in_its_range():
    cfg = cpu_config()
    for method, space in SPACES.items():
        for changes in candidates(cfg, method)[1:]:
            values = candidate_values(cfg, method, changes)
            assert set(values) == set(space)
            for name, (low, high, _) in space.items():
                assert low <= values[name] <= high, (method, name, values[name])


def test_the_searched_lga_settings_reach_algorithm_1_and_keep_the_old_run_keys():
    s = lga_settings(LGABenchmarkSettings(labeled_weight=2.0, grad_ema_decay=0.8, norm_ema_decay=0.99))
    assert isinstance(s.labeled_weight, ConstantWeight) and s.labeled_weight.c == 2.0
    assert (s.grad_ema_decay, s.norm_ema_decay) == (0.8, 0.99)
    assert set(LGABenchmarkSettings().to_dict()) == {"lr", "alpha_w", "eps_norm", "vat"}  # defaults: as before
    assert LGABenchmarkSettings(labeled_weight=2.0).to_dict()["labeled_weight"] == 2.0


def test_the_choice_takes_the_best_validation_accuracy_the_earlier_on_a_tie_and_none_until_all_are_trained():
    assert choose([80.0, 81.5, 79.0]) == 1
    assert choose([80.0, 81.5, 81.5]) == 1
    assert choose([81.5, 81.5]) == 0
    assert choose([80.0, None, 99.0]) is None
    assert choose([]) is None
    assert choose([80.0, DIVERGED, 79.0]) == 0 and choose([DIVERGED, 70.0]) == 1  # a diverged run ranks last
    assert choose([DIVERGED, DIVERGED]) is None  # nothing to choose


def test_fairness_compares_the_gains_from_tuning():
    val = {
        "supervised": {"250": [70.0, 71.0]},
        "vat": {"250": [72.0, 72.5]},
        "lga": {"250": [69.0, 73.0]},
    }
    out = fairness(val)["250"]
    assert out["gains"] == {"supervised": 1.0, "vat": 0.5, "lga": 4.0} and out["lga_gains_most"] is True
    val["vat"]["250"] = [72.0, 77.0]
    assert fairness(val)["250"]["lga_gains_most"] is False
    val["lga"]["250"] = [69.0, DIVERGED]
    assert fairness(val)["250"]["gains"]["lga"] == 0.0  # the diverged draw is not chosen: no gain
    val["lga"]["250"] = [69.0, None]
    assert fairness(val)["250"]["lga_gains_most"] == "not trained"


def test_tune_checks_pass_on_a_win_at_every_label_count_and_fail_on_a_loss_at_one():
    win = {"lga": {"250": 75.0, "4000": 88.0}, "supervised": {"250": 74.0, "4000": 87.5}}
    name = "tuned_lga_beats_tuned_supervised_validation"
    assert tune_checks(win, (250, 4000))[name]["passed"]
    loss = {**win, "supervised": {"250": 74.0, "4000": 88.0}}  # a tie is not a win
    assert not tune_checks(loss, (250, 4000))[name]["passed"]


@pytest.mark.parametrize(
    "setting, fragment",
    [
        ("seeds=2", "seeds"),
        ("candidates=1", "candidates"),
        ("methods=[vat,lga]", "methods"),
        ("families=[cifar,svhn]", "families"),
        ("tuned=[[lga,alpha_w,0.1]]", "tuned"),
    ],
)
def test_bad_study_settings_are_refused_in_one_line_before_any_compute(no_compute, capsys, setting, fragment):
    code = main(["run", "lga.tune", "--preset", "smoke", "--set", setting])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and fragment in err, err


def test_a_tuned_value_of_an_unknown_setting_or_method_is_refused():
    with pytest.raises(ConfigError, match="tuned"):
        get("lga.fig7").resolve("smoke", {"tuned": [["lga", "nope", 1.0]]})
    with pytest.raises(ConfigError, match="tuned"):
        get("lga.fig7").resolve("smoke", {"tuned": [["sgd", "lr", 1.0]]})
    with pytest.raises(ConfigError, match="lr"):
        get("lga.fig7").resolve("smoke", {"tuned": [["vat", "lr", -1.0]]})


def test_the_rerun_trains_figure_7_at_the_chosen_settings_at_b_and_b_over_2():
    from tests.test_lga_rerun import CHOSEN as chosen

    full, half = rerun_items(rerun_overrides(chosen))
    assert full == ("lga.fig7", "cpu", rerun_overrides(chosen)) and half[2]["protocol.steps"] == 3000
    cfg = get("lga.fig7").resolve("cpu", full[2])
    assert cfg.seeds == 3 and cfg.methods == ("supervised", "vat", "lga", "lga_vat")
    for family in cfg.families:  # both families train the same settings: the tuned ε replaces each family's
        assert method_settings(cfg, "supervised", family).lr == 2e-3
        vat = method_settings(cfg, "vat", family)
        assert (vat.lr, vat.eps, vat.weight) == (4e-3, 2.0, 0.5)
        for method in ("lga", "lga_vat"):
            s = method_settings(cfg, method, family)
            assert {k: getattr(s, k) for k in chosen["lga"]} == chosen["lga"]
        both = method_settings(cfg, "lga_vat", family).vat
        assert (both.eps, both.weight, both.lr) == (2.0, 0.5, 3e-3)  # VAT's ε and weight; its lr is LGA's α_θ's
    assert len(units_of("lga.fig7", cfg)) == 4 * 3 * 3  # one family's runs: the tuned settings are the same


def test_the_view_works_with_no_run_committed(tmp_path):
    view = tuning_view(tmp_path)
    assert len(view) == 3 * 8 and set(view["method"]) == {"Supervised", "VAT", "LGA"}
    assert (view["validation accuracy, 250 labels (%)"] == "not trained").all()
    assert not (view["chosen at 4,000"] == "yes").any()
    assert view.attrs["answer"].startswith("Not answered yet: 0 of 48")


def test_a_diverged_candidate_is_kept_shown_and_ranked_last_and_an_edited_record_of_it_is_refused(tmp_path, store):
    """A candidate whose run diverged stores no run entry: kept in `diverged_runs`' file, the page shows it as
    diverged (not "not trained", which would block the choice forever); an edited file is an error, never read."""
    from gradalign.experiments.diverged_runs import _file, diverged, keep_diverged
    from gradalign.experiments.lga.ssl_tuning import tune_units
    from gradalign.store.atomic import StoredJSONError

    unit = tune_units(cpu_config())[-1]  # LGA's last candidate at 4,000 labels
    assert diverged("lga.tune") == {}
    kept = keep_diverged("lga.tune", unit, "lga diverged at step 1200: loss is not finite", "cpu")
    assert diverged("lga.tune") == {unit.key: kept} and kept["label"] == unit.label and kept["git_commit"]
    view = tuning_view(store.root)
    column = view["validation accuracy, 4,000 labels (%)"]
    assert list(column[view["method"] == "LGA"])[-1] == "diverged" and (column == "diverged").sum() == 1
    path = store.root / _file("lga.tune")
    path.write_text(path.read_text().replace("1200", "1300"))
    with pytest.raises(StoredJSONError, match="digest does not match"):
        diverged("lga.tune")


def test_the_study_assembles_with_a_diverged_candidate_and_does_not_train_it_again(store, monkeypatch):
    """`tune` fed a candidate whose run raises a DivergenceError: the record is assembled, that candidate ranks last,
    and the next assembly reads the kept divergence instead of training it again."""
    from gradalign.errors import DivergenceError
    from gradalign.experiments.lga.ssl_tuning import PRESETS, TuneConfig, tune, tune_units
    from gradalign.config import resolve
    from gradalign.store import run_unit

    cfg = resolve(TuneConfig, PRESETS, "smoke", None)
    units = tune_units(cfg)
    bad = next(u for u in units if u.spec["method"] == "vat" and "candidate 1" in u.label)
    calls = []

    def run(self, root=None):
        calls.append(self.key)
        if self.key == bad.key:
            raise DivergenceError("vat diverged at step 40: accuracy at chance")
        return {"best_val_error": 30.0 - 0.1 * len(calls), "train_seconds": 1.0, "history": {"val_error": [30.0]}}

    monkeypatch.setattr(run_unit.Unit, "run", run)
    out = tune(cfg, "cpu")
    vat = [row["val_acc"][str(bad.spec["labels"])] for row in out["metrics"]["rows"]["vat"]]
    assert vat[1] == DIVERGED and out["metrics"]["chosen"]["vat"][str(bad.spec["labels"])]["candidate"] == 0
    assert calls.count(bad.key) == 1 and len(calls) == len({u.key for u in units})
    calls.clear()
    tune(cfg, "cpu")
    assert bad.key not in calls  # read from the kept divergence


def test_a_method_whose_every_candidate_diverged_assembles_with_no_choice_no_pass_and_no_rerun(store, monkeypatch):
    from gradalign.errors import DivergenceError
    from gradalign.experiments.lga.ssl_tuning import PRESETS, TuneConfig, tune
    from gradalign.config import resolve
    from gradalign.store import run_unit

    cfg = resolve(TuneConfig, PRESETS, "smoke", None)

    def run(self, root=None):
        if self.spec["method"] == "lga":
            raise DivergenceError("lga diverged at step 4: loss is not finite")
        return {"best_val_error": 30.0, "train_seconds": 1.0, "history": {"val_error": [30.0]}}

    monkeypatch.setattr(run_unit.Unit, "run", run)
    out = tune(cfg, "cpu")
    assert all(c is None for c in out["metrics"]["chosen"]["lga"].values()) and out["metrics"]["rerun"] is None
    assert out["checks"]["tuned_lga_beats_tuned_supervised_validation"]["passed"] is False


def test_the_cost_counts_every_uncommitted_run_and_is_unknown_without_stored_times(tmp_path):
    from gradalign.compute.tune_cost import tune_cost

    cost = tune_cost(tmp_path)
    assert cost["search"] == {"runs": 48, "cpu_hours": None, "gpu_hours": None}
    assert cost["rerun"]["runs"] == 2 * 4 * 3 * 3


def test_the_study_is_a_screening_inconclusive_by_its_one_run_per_candidate():
    """Its claim check compares one run per method: never a verdict on its own (rules version 4 asks for 3 seeds);
    the rerun at the chosen settings decides."""
    from gradalign.experiments.lga.validity import VALIDITY

    preconditions, claims = VALIDITY["lga.tune"]
    chosen = {m: {"250": {"val_acc": 80.0}, "4000": {"val_acc": 85.0}} for m in ("supervised", "vat", "lga")}
    out = preconditions({"metrics": {"chosen": chosen}})
    assert out["enough_seeds"]["passed"] is False and out["enough_seeds"]["value"] == {"fewest": 1, "arms": 6}
    assert claims is None


def test_the_tuning_table_shows_each_drawn_value_to_three_figures_and_a_decay_never_as_one():
    """`ssl_tuning._short`: 3 significant figures, powers of ten below 0.01, and an EMA decay to 3 figures of
    1 − decay (0.999847 printed as "1" hid the drawn window), never a run of 6 decimals (the book's browser test
    refuses a raw float in a table cell)."""
    from gradalign.experiments.lga.ssl_tuning import _short

    assert [_short(v) for v in (0.999847, 0.9694, 0.999, 0.9)] == ["1\u202f−\u202f1.53e-04", "0.9694", "0.999", "0.9"]
    assert [_short(v) for v in (2.4e-6, 0.0293, 1.66, 0.3, 6.0)] == ["2.40e-06", "0.0293", "1.66", "0.3", "6"]
