"""The λ calibration pilot (`experiments.sgr.lambda_pilot`, sgr.lam) and the held-out validation split it scores on."""

from __future__ import annotations

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.sgr import lambda_pilot as lp
from gradalign.experiments.sgr.validity import VALIDITY
from gradalign.training.local_data import _split_validation


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_validation_is_held_out_of_the_training_subset():
    images = torch.arange(100).view(100, 1, 1, 1)
    labels = torch.arange(100)
    train, train_y, held, held_y = _split_validation(images, labels, 30, 20, seed=0)
    assert len(train) == 30 and len(held) == 20
    assert not set(train_y.tolist()) & set(held_y.tolist())
    assert torch.equal(_split_validation(images, labels, 30, 20, seed=0)[2], held)  # seeded
    assert len(_split_validation(images, labels, 0, 20, seed=0)[0]) == 80  # 0: all the others
    with pytest.raises(ConfigError, match="exceed"):
        _split_validation(images, labels, 90, 20, seed=0)


def _net(seed=0):
    torch.manual_seed(seed)
    block = lambda c: torch.nn.Sequential(torch.nn.Conv2d(c, 3, 3, padding=1), torch.nn.Tanh())  # noqa: E731
    modules = torch.nn.ModuleList([block(1), block(3), block(3)])
    heads = [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 25, 4)) for _ in range(3)]
    return modules, heads


def test_gradient_ratios_are_the_sgr_gradient_against_the_ce_gradient_and_sum_is_d_times_mean():
    x, y = torch.randn(6, 1, 5, 5, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 3, 0, 1])
    modules, heads = _net()
    mean, features = lp.gradient_ratios(modules, heads, x, y, "mean")
    total, _ = lp.gradient_ratios(modules, heads, x, y, "sum")
    assert features == [75, 75] and len(mean) == 2  # modules 2 and 3, D = 3 x 5 x 5
    for m, s, d in zip(mean, total, features):
        assert m > 0 and s == pytest.approx(d * m, rel=1e-5)


def _row(net, K, red, lam, acc, active):
    return {"network": net, "K": K, "reduction": red, "lam": lam, "val_acc": acc, "active": active}


def test_choose_takes_the_best_validation_accuracy_among_settings_acting_most_often():
    rows = [
        _row("a", 16, "mean", 1.0, 90.0, False),  # best accuracy, but the term acts in one of two only
        _row("b", 16, "mean", 1.0, 90.0, True),
        _row("a", 16, "mean", 1e3, 80.0, True),
        _row("b", 16, "mean", 1e3, 82.0, True),
        _row("a", 16, "sum", 1.0, 82.0, True),
        _row("b", 16, "sum", 1.0, 78.0, True),
    ]
    chosen = lp.choose(rows)["chosen"]
    assert (chosen["reduction"], chosen["lam"], chosen["mean_val_acc"]) == ("mean", 1e3, 81.0)
    assert lp.choose([_row("a", 2, "mean", 1.0, 90.0, False)])["chosen"] is None  # none acts: no choice
    partly = [_row("a", 2, "mean", 1.0, 90.0, False), _row("b", 2, "mean", 1.0, 90.0, True)]
    partly += [_row("a", 2, "sum", 1.0, 50.0, False), _row("b", 2, "sum", 1.0, 60.0, False)]
    assert lp.choose(partly)["chosen"]["acts_in"] == 1  # none acts everywhere: the one acting most often


def test_pilot_smoke_runs_and_its_claim_and_precondition(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    monkeypatch.setenv("GRADALIGN_PROGRESS", "0")
    exp = EXPERIMENTS["sgr.lam"]
    out = exp.run(exp.resolve("smoke", {"n_train": 64, "validation": 64, "protocol.batch_size": 32}), "cpu")
    rows = out["metrics"]["rows"]
    assert [(r["reduction"], r["lam"]) for r in rows] == [("mean", 1.0), ("mean", 1e3), ("sum", 1.0)]
    ratio = out["metrics"]["start_ratios"]["resnet32/K=3"]
    assert rows[1]["grad_ratio_max"] == pytest.approx(1e3 * max(ratio["mean"]))  # linear in λ
    paper = rows[0]
    assert out["checks"]["paper_lambda_acts"]["passed"] == paper["active"]
    assert paper["active"] == (paper["term_end"] <= 0.5 * paper["layerwise_term_end"])
    pre = VALIDITY["sgr.lam"][0]({"metrics": out["metrics"]})
    assert pre["enough_seeds"]["passed"] is False  # one seed: never a decided verdict


def test_pilot_refuses_settings_without_the_papers_lambda():
    with pytest.raises(ConfigError, match="mean_lams"):
        EXPERIMENTS["sgr.lam"].resolve("smoke", {"mean_lams": [10.0]})
    with pytest.raises(ConfigError, match="validation"):
        EXPERIMENTS["sgr.lam"].resolve("smoke", {"validation": 0})


def test_mechanism_summary_names_the_lambda_and_whether_the_term_acted():
    from gradalign.experiments.sgr.local_runs import CALIBRATED
    from gradalign.experiments.sgr.validity import tab3, mechanism_summary

    curve = lambda term: {"test_acc": [[1.0, 2.0]] * 3, "sgr": [[0.1, term]] * 3}  # noqa: E731
    curves = {"fashion_mnist/resnet32/sgr": curve(0.2), "fashion_mnist/resnet32/layerwise": curve(1.0)}
    config = {"datasets": ["fashion_mnist"], "networks": ["resnet32"], "methods": ["layerwise", "sgr"]}
    record = {"id": "sgr.tab3", "curves": curves, "config": {**config, "lam": 1.0, "reduction": "mean"}}
    record["preconditions"] = tab3(record)
    text, rows = mechanism_summary(record)
    assert "is met" in text and "uncalibrated" in text and rows["fashion_mnist/resnet32"]["ratio"] == 0.2
    curves["fashion_mnist/resnet32/sgr"] = curve(0.9)  # above half of layer-wise's: the term did not act
    record["config"] |= {"lam": CALIBRATED["lam"], "reduction": CALIBRATED["reduction"]}
    record["preconditions"] = tab3(record)
    text, rows = mechanism_summary(record)
    assert "is not met" in text and rows["fashion_mnist/resnet32"]["ratio"] == 0.9


def test_pilot_checks_fail_when_the_papers_lambda_does_not_act():
    from gradalign.experiments.sgr.lambda_pilot import pilot_checks

    row = {"reduction": "mean", "lam": 1.0, "network": "resnet32", "K": 16}
    acting = pilot_checks([row | {"active": True, "term_ratio": 0.3}, row | {"lam": 1e3, "active": False}])
    assert acting["paper_lambda_acts"]["passed"]
    idle = pilot_checks([row | {"active": True, "term_ratio": 0.3}, row | {"K": 2, "active": False, "term_ratio": 1.0}])
    assert not idle["paper_lambda_acts"]["passed"]
    assert not pilot_checks([row | {"lam": 1e3, "active": True, "term_ratio": 0.2}])["paper_lambda_acts"]["passed"]


def test_table7_mechanism_is_measured_against_layerwise_vgg_at_each_depth():
    from gradalign.experiments.sgr.validity import tab7

    curve = lambda term: {"test_acc": [[1.0, 2.0]] * 3, "sgr": [[0.1, term]] * 3}  # noqa: E731
    curves = {f"fashion_mnist/{m}/d={d}": curve(t) for d in (12, 57) for m, t in (("sgr", 0.2), ("layerwise", 1.0))}
    curves |= {f"fashion_mnist/global_bp/d={d}": {"test_acc": [[1.0, 2.0]] * 3} for d in (12, 57)}
    active = tab7({"curves": curves})["mechanism_active"]
    assert active["passed"] and set(active["value"]) == {"fashion_mnist/d=12", "fashion_mnist/d=57"}
    curves["fashion_mnist/sgr/d=57"] = curve(0.6)  # above half of layer-wise's at one depth: not met
    assert not tab7({"curves": curves})["mechanism_active"]["passed"]
    old = {k: v for k, v in curves.items() if "/layerwise/" not in k}  # a record without the layer-wise arm
    assert tab7({"curves": old})["mechanism_active"]["value"] == "not recorded"


def test_table7s_pilot_splits_each_vgg_at_every_conv_and_refuses_other_depths(tmp_path, monkeypatch):
    """`sgr.lam7`: a VGG-d runs at Table 7's SGR split, K = d − 2, whatever `splits` says; a depth Table 7 does
    not have is a one-line error before any run."""
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    monkeypatch.setenv("GRADALIGN_PROGRESS", "0")
    exp = EXPERIMENTS["sgr.lam7"]
    assert exp.resolve("cpu").pairs() == [("vgg12", 10), ("vgg37", 35)]
    assert exp.resolve("cpu", {"networks": ["resnet32", "vgg57"]}).pairs() == [
        ("resnet32", 16),
        ("resnet32", 2),
        ("vgg57", 55),
    ]
    out = exp.run(exp.resolve("smoke", {"n_train": 64, "validation": 64, "protocol.batch_size": 32}), "cpu")
    rows = out["metrics"]["rows"]
    assert [(r["network"], r["K"], r["lam"]) for r in rows] == [("vgg12", 10, 1.0), ("vgg12", 10, 10.0)]
    assert len(out["metrics"]["start_ratios"]["vgg12/K=10"]["features"]) == 9  # modules 2 … 10
    with pytest.raises(ConfigError, match="vgg13: not a Table 7 VGG"):
        exp.resolve("smoke", {"networks": ["vgg13"]})
