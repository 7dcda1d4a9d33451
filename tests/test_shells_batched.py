"""The shells study's supervised arms trained as one batch (`training.shells_batched`) against `shells_trial` one
trial at a time: the same curves to float rounding, and the study uses them."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gradalign.data.shells import make_shells
from gradalign.errors import ConfigError
from gradalign.training.shells import ShellsTrialSettings, shells_trial
from gradalign.training.shells_batched import supervised_trials

pytestmark = pytest.mark.usefixtures("one_thread")
SETTINGS = ShellsTrialSettings(steps=40, eval_every=10, hessian_points=100, lanczos_iters=5)
SEEDS = [3, 4, 5]


def datas(seeds=SEEDS):
    return [make_shells(8, 300, 600, 200, seed=k) for k in seeds]


def assert_curves_close(a: dict, b: dict, rtol: float = 1e-5) -> None:
    assert a.keys() == b.keys() and a["step"] == b["step"]
    for key in a:
        torch.testing.assert_close(torch.tensor(a[key]), torch.tensor(b[key]), rtol=rtol, atol=1e-8)


def test_batched_arms_equal_one_trial_at_a_time():
    data = datas()
    batched = supervised_trials(data, SETTINGS, SEEDS)
    for d, seed, curves in zip(data, SEEDS, batched):
        assert_curves_close(shells_trial(d, "supervised", SETTINGS, seed), curves)


def test_a_changed_trial_is_caught_and_the_others_are_not():
    """The comparison can fail: one trial with another learning rate differs, the rest still agree."""
    data = datas()
    batched = supervised_trials(data, SETTINGS, SEEDS)
    other = ShellsTrialSettings(**{**SETTINGS.to_dict(), "lr": 2e-3})
    with pytest.raises(AssertionError):
        assert_curves_close(shells_trial(data[1], "supervised", other, SEEDS[1]), batched[1])
    assert_curves_close(shells_trial(data[2], "supervised", SETTINGS, SEEDS[2]), batched[2])


def test_mismatched_seeds_are_refused():
    with pytest.raises(ConfigError, match="one seed per data set"):
        supervised_trials(datas(), SETTINGS, SEEDS[:2])


def test_the_study_reads_the_batched_arms(monkeypatch, tmp_path):
    """shells_study trains the supervised arms once for all trials, and each trial's unit stores its own."""
    from gradalign.experiments import EXPERIMENTS
    from gradalign.experiments.lga import shells as study
    from gradalign.training import shells_batched

    calls = []
    real = shells_batched.supervised_trials
    monkeypatch.setattr(shells_batched, "supervised_trials", lambda *a: calls.append(len(a[0])) or real(*a))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    cfg = EXPERIMENTS["lga.fig3"].resolve("smoke")
    curves, finals = study.shells_study(cfg)
    assert calls == [cfg.trials] and len(finals["supervised"]["final_test_loss"]) == cfg.trials
    one_at_a_time = replace(cfg, batched=False)
    alone = study._train(one_at_a_time, cfg.seed + 1, None, None)["supervised"]  # trial 1 trained one at a time
    assert_curves_close(alone, study.trial_unit(cfg, 1).run()["supervised"], rtol=1e-4)
    curves_again, _ = study.shells_study(cfg)  # every trial stored: nothing trains
    assert calls == [cfg.trials] and curves_again == curves
    # one arm, one key: the one-at-a-time arms are not the batched ones stored above (issue 26)
    from gradalign.compute.sweep import missing_units

    singles = [study.trial_unit(one_at_a_time, k) for k in range(cfg.trials)]
    assert missing_units(singles) == singles and {u.key for u in singles}.isdisjoint(
        {study.trial_unit(cfg, k).key for k in range(cfg.trials)}
    )
    assert study.trial_unit(one_at_a_time, 1).run()["supervised"] == alone and calls == [cfg.trials]
