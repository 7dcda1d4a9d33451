"""SGR's training protocol and run (`gradalign.training.local`) and the checks of sgr.tab3 / tab6 / tab7."""

from __future__ import annotations

import math

import pytest
import torch

from gradalign.config import resolve
from gradalign.errors import ConfigError
from gradalign.experiments.sgr import local_bp as exp
from gradalign.methods.local import LOCAL_METHODS, LocalSettings
from gradalign.training import local as tl


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def synthetic(n: int = 64, n_test: int = 32, px: int = 12, seed: int = 0) -> tl.LocalData:
    """Random one-channel images, labels from their mean brightness: enough to train a few steps on."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 1, px, px), generator=g, dtype=torch.uint8)
    labels = (images.float().mean((1, 2, 3)) > 127.5).long() * 3
    test = torch.randn(n_test, 1, px, px, generator=g)
    return tl.LocalData(images, labels, test, (test.mean((1, 2, 3)) > 0).long() * 3, (0.5,), (0.3,))


def spec(method="sgr", modules=3, network="resnet32", epochs=2, **kw) -> tl.LocalRunSpec:
    protocol = tl.SGRProtocol(epochs=epochs, batch_size=16)
    return tl.LocalRunSpec(
        network=network, method=LocalSettings(method=method, modules=modules), protocol=protocol, width=0.125, **kw
    )


# --- protocol, augmentation, run structure ---------------------------------------------------------------


def test_cosine_schedule_of_the_protocol():
    p = tl.SGRProtocol()
    assert p.lr_at(0, 100) == pytest.approx(0.1)
    assert p.lr_at(50, 100) == pytest.approx(0.05)
    assert p.lr_at(100, 100) == pytest.approx(0.0, abs=1e-12)
    assert p.lr_at(25, 100) == pytest.approx(0.05 * (1 + math.cos(math.pi / 4)))
    assert (p.epochs, p.batch_size, p.momentum, p.weight_decay, p.crop_padding) == (200, 128, 0.9, 5e-4, 4)


def test_crop_flip():
    from gradalign.data.crop_flip import crop_flip

    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 1, 6, 6)
    assert torch.equal(crop_flip(x, 0, False, g), x)
    flipped = crop_flip(torch.ones(200, 1, 1, 3) * torch.tensor([0.0, 0.5, 1.0]), 0, True, g)
    firsts = flipped[:, 0, 0, 0]
    assert set(firsts.tolist()) == {0.0, 1.0} and 50 < int((firsts == 1.0).sum()) < 150
    cropped = crop_flip(torch.ones(64, 1, 6, 6), 2, False, g)
    assert cropped.shape == (64, 1, 6, 6) and float(cropped.min()) == 0.0  # zero padding shows at shifted edges
    assert set(cropped.sum((1, 2, 3)).tolist()) <= {float(r * c) for r in range(4, 7) for c in range(4, 7)}


def test_one_optimizer_per_module_and_head_covering_every_parameter():
    run = tl.LocalRun(spec("dgl", 16), synthetic(), "cpu")
    assert len(run.optimizers) == len(run.modules) == 16 == len(run.heads)
    owned = [id(p) for opt in run.optimizers for group in opt.param_groups for p in group["params"]]
    assert len(owned) == len(set(owned))
    every = {id(p) for p in run.model.parameters()} | {id(p) for p in run.local_heads.parameters()}
    assert set(owned) == every
    assert run.heads[-1] is run.model.head
    run.step(1)
    assert all(opt.param_groups[0]["lr"] == pytest.approx(0.1) for opt in run.optimizers)
    run.step(2)
    assert run.optimizers[5].param_groups[0]["lr"] == pytest.approx(run.spec.protocol.lr_at(1, run.total_steps))


def test_split_network_computes_the_model():
    from gradalign.data.image_sets import image_set_info

    for network, K in (("plainnet32", 16), ("vgg12", 10), ("vgg12", 5)):
        s = spec("layerwise", K, network)
        model, modules, heads = tl.build_split_network(s, image_set_info("fashion_mnist"))
        model.eval()
        x = torch.randn(2, 1, 28, 28)
        assert torch.allclose(torch.nn.Sequential(*modules, model.head)(x), model(x))
        assert len(heads) == K - 1


# --- checkpoint / resume, run cache, divergence ------------------------------------------------------------


def test_checkpoint_resume_is_bitwise_equal(tmp_path):
    data, s = synthetic(), spec("sgr", 3, epochs=3)
    whole = tl.train_local(s, "cpu", data=data)
    ckpt = tmp_path / "run.pt"
    first = tl.train_local(s, "cpu", ckpt, data=data, max_epochs_this_call=1)
    assert not first["complete"] and first["epochs_done"] == 1 and ckpt.exists()
    resumed = tl.train_local(s, "cpu", ckpt, data=data)
    assert resumed["complete"] and resumed["epochs_done"] == 3
    for key in ("test_acc", "test_loss", "train_loss", "sgr", "sgr_by_module", "local_loss_by_module"):
        assert resumed["history"][key] == whole["history"][key], key
    assert resumed["final_test_acc"] == whole["final_test_acc"]


def test_same_seed_same_run_other_seed_other_run():
    data = synthetic()
    a, b = tl.train_local(spec("layerwise", 2), data=data), tl.train_local(spec("layerwise", 2), data=data)
    c = tl.train_local(spec("layerwise", 2, seed=1), data=data)
    assert a["history"]["train_loss"] == b["history"]["train_loss"] != c["history"]["train_loss"]


def test_divergence_is_stored_as_a_failed_run_at_chance(monkeypatch):
    def nan_step(modules, heads, optimizers, x, y, settings):
        return {"loss": torch.tensor(float("nan")), "acc": torch.tensor(0.0)}

    monkeypatch.setitem(LOCAL_METHODS, "global_bp", nan_step)
    out = tl.train_local(spec("global_bp", 1), data=synthetic())
    assert "diverged at step 4" in out["diverged"] and out["final_test_acc"] == 10.0


def test_a_local_tables_run_stores_its_divergence_a_pilots_and_an_mlps_stop(monkeypatch):
    """Tables 3, 6 and 7's final runs of a local method keep their divergence as the result (at chance on a NaN);
    a pilot's run (validation split) and Table 4's MLP runs stop the command, as their tuning reads it."""
    from gradalign.errors import DivergenceError

    def nan_step(modules, heads, optimizers, x, y, settings):
        return {"loss": torch.tensor(float("nan")), "acc": torch.tensor(0.0)}

    monkeypatch.setitem(LOCAL_METHODS, "sgr", nan_step)
    out = tl.train_local(spec("sgr", 3), data=synthetic())
    assert "diverged at step 4" in out["diverged"] and out["final_test_acc"] == 10.0
    with pytest.raises(DivergenceError, match="diverged at step 4"):
        tl.train_local(spec("sgr", 3, validation=32), data=synthetic())
    assert tl.divergence_is_a_result(spec("sgr", 3).to_dict()) and tl.divergence_is_a_result(spec("dgl", 2))
    assert not tl.divergence_is_a_result(spec("sgr", 4, network="mlp4"))
    assert tl.divergence_is_a_result(spec("global_bp", 1, network="mlp4"))  # Table 7's "fail", on any network


def test_a_local_tables_run_trains_through_chance_and_a_pilots_run_is_stopped_there(monkeypatch):
    """The loop gets no chance check for a table's final run (it trains on through a fall to chance), and the test
    accuracy's chance level for a pilot's run (validation split) and Table 4's MLP runs."""
    from gradalign.training import loop

    asked = []

    def fake_train(run, steps, **kw):
        asked.append(kw["chance"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(loop, "train", fake_train)
    for s in (spec("sgr", 3), spec("sgr", 3, validation=32)):
        with pytest.raises(RuntimeError, match="stop here"):
            tl.train_local(s, data=synthetic())
    assert asked[0] == () and [c.name for c in asked[1]] == ["test_acc"]


def test_tables_3_and_6_share_the_resnet_sgr_runs():
    from gradalign.store.runcache import run_key

    for preset in ("cpu", "gpu"):  # Table 6's cpu preset (its rerun) is at Table 3's cpu scale
        t3 = resolve(exp.Table3Config, exp.TABLE3_PRESETS, preset)
        t6 = resolve(exp.Table6Config, exp.TABLE6_PRESETS, preset)
        a, b = t3.spec("resnet32", "sgr", 16, "fashion_mnist", 0), t6.spec("resnet32", "sgr", 16, "fashion_mnist", 0)
        assert run_key(tl.RUN_KIND, a.to_dict(), 1) == run_key(tl.RUN_KIND, b.to_dict(), 1)


def test_the_gpu_preset_extends_the_cpu_rerun_with_two_seeds():
    """A window's first three seeds at `gpu` are the runs of Table 3's `cpu` preset and Table 6's rerun (same keys)."""
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    for element in ("sgr.tab3", "sgr.tab6"):  # their reruns are their cpu presets
        rerun = {u.key for u in units_of(element, get(element).resolve("cpu"))}
        gpu = {u.key for u in units_of(element, get(element).resolve("gpu"))}
        assert rerun < gpu and len(gpu) == len(rerun) * 5 // 3


def test_local_run_is_read_back_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(tl, "train_local", lambda s, device, checkpoint: calls.append(1) or {"acc": 1.0})
    s = spec("sgr", 16)
    assert tl.local_run(s) == tl.local_run(s) == {"acc": 1.0} and len(calls) == 1


# --- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: spec("sgr", 16, network="resnet20"),
        lambda: spec("sgr", 4),
        lambda: spec("sgr", 16, network="vgg12"),
        lambda: spec("sgr", 5, network="vgg13"),
        lambda: spec("sgr", 3, n_train=8),
        lambda: tl.SGRProtocol(momentum=1.0),
        lambda: tl.SGRProtocol(batch_size=1),
        lambda: exp.Table3Config(networks=("vgg12",)),
        lambda: exp.Table3Config(methods=("layerwise", "reforward")),
        lambda: exp.Table6Config(splits=(5,)),
        lambda: exp.Table6Config(splits=(16, 16)),
        lambda: exp.Table7Config(depths=(13, 57)),
        lambda: exp.Table7Config(depths=(57, 12)),
        lambda: exp.Table7Config(depths=(12,)),
        lambda: exp.Table7Config(sgr_split="block"),
        lambda: exp.Table3Config(datasets=("mnist",)),
        lambda: exp.Table3Config(seeds=0),
        lambda: exp.Table3Config(reduction="max"),
        lambda: exp.Table3Config(n_train=10, protocol=tl.SGRProtocol(batch_size=128)),
    ],
)
def test_bad_settings_refused(make):
    with pytest.raises(ConfigError):
        make()


def test_every_preset_resolves():
    for experiment in exp.EXPERIMENTS:
        for preset in ("smoke", "cpu", "gpu", "paper"):
            experiment.resolve(preset)


# --- the verdict checks, each fed a passing and a failing case ----------------------------------------------


def s(mean, std=0.5, n=3, diverged=0):
    return {"mean": mean, "std": std, "n": n, "diverged": diverged}


def test_table3_checks():
    # s(): SE of a difference 0.41 with ν = 4, so Welch's critical difference is 2.776 × 0.41 = 1.13
    good = {"resnet32": {"layerwise": s(84.5), "reforward": s(84.4), "sgr": s(86.0)}}
    good["plainnet32"] = {"layerwise": s(80.7), "reforward": s(80.7), "sgr": s(82.0)}
    assert all(c["passed"] for c in exp.table3_checks(good).values())
    bad = {**good, "plainnet32": {"layerwise": s(82.3), "reforward": s(80.7), "sgr": s(82.0)}}
    checks = exp.table3_checks(bad)
    assert not checks["sgr_beats_layerwise"]["passed"] and checks["sgr_beats_reforward"]["passed"]
    assert checks["sgr_beats_layerwise"]["value"]["plainnet32"]["diff"] == pytest.approx(-0.3)


def test_table6_checks():
    table = {
        "greedy": {16: s(77.0), 2: s(90.0)},
        "dgl": {16: s(84.0), 2: s(91.0)},
        "sgr": {16: s(85.6), 2: s(92.9)},
    }
    checks = exp.table6_checks(table, s(92.8))
    assert all(c["passed"] for c in checks.values())
    tie = {**table, "dgl": {16: s(85.8), 2: s(91.0)}}  # 0.2 below, SE 0.41: within the spread
    assert exp.table6_checks(tie, s(92.8))["sgr_at_least_other_local_methods"]["passed"]
    worse = {**table, "dgl": {16: s(87.0), 2: s(91.0)}}  # 1.4 below: beyond the spread
    assert not exp.table6_checks(worse, s(92.8))["sgr_at_least_other_local_methods"]["passed"]
    no_shrink = {**table, "sgr": {16: s(85.6), 2: s(85.0)}}
    assert not exp.table6_checks(no_shrink, s(92.8))["gap_to_global_bp_shrinks_as_k_falls"]["passed"]
    assert "gap_to_global_bp_shrinks_as_k_falls" not in exp.table6_checks(table, None)


def test_table7_checks():
    bp = {12: s(90.8), 37: s(78.5), 57: s(10.0, diverged=3)}
    sgr = {12: s(84.8), 37: s(86.1), 57: s(85.5)}
    checks = exp.table7_checks(bp, sgr, 10.0)
    assert all(c["passed"] for c in checks.values())
    no_collapse = {**bp, 57: s(60.0)}  # halfway between 90.8 and chance is 50.4
    assert not exp.table7_checks(no_collapse, sgr, 10.0)["global_bp_collapses_with_depth"]["passed"]
    unstable = {**sgr, 57: s(70.0)}
    assert not exp.table7_checks(bp, unstable, 10.0)["sgr_stable_with_depth"]["passed"]
    at_chance = {d: s(9.7) for d in sgr}  # flat at chance at every depth (SGR on VGG at λ = 1e3, our pilot)
    assert not exp.table7_checks(bp, at_chance, 10.0)["sgr_stable_with_depth"]["passed"]


def test_summary_and_scale_text():
    runs = [
        {
            "final_test_acc": a,
            "diverged": None,
            "history": {"test_acc": [50.0, a], "epoch": [1, 2]},
            "train_seconds": 2.0,
            "epoch_seconds": [1.0, 1.0],
            "epochs_done": 2,
        }
        for a in (80.0, 82.0)
    ]
    out = exp.summary(runs)
    assert out["mean"] == 81.0 and out["std"] == pytest.approx(math.sqrt(2)) and out["still_improving"] == 2
    record = {
        "id": "sgr.tab3",
        "config": resolve(exp.Table3Config, exp.TABLE3_PRESETS, "cpu").to_dict(),
        "curves": {"a": {"test_acc": [[1.0, 2.0], [2.0, 1.0]]}},
    }
    text = exp.local_scale(record)
    assert "Fashion-MNIST (paper: CIFAR-10)" in text and "60 epochs (paper: 200 epochs)" in text
    assert text.endswith("3 seeds; test accuracy on 2,000 test images")  # the finished count: `report.scale_of`


def test_the_bp_free_scale_names_its_network_as_our_reading():
    """Table 4's MLP is our reading of a PlainNet whose depth and width the paper does not state: its scale says so,
    never "width ×1" alone."""
    from gradalign.experiments import get

    record = {"id": "sgr.tab4", "config": get("sgr.tab4").resolve("cpu", {}).to_dict()}
    text = exp.local_scale(record)
    assert "4-block MLP, 1,024 units (our reading) (paper: BP-free PlainNet, depth and width not stated)" in text
    assert "width ×" not in text


def test_fast_path_is_a_keyed_setting_that_changes_the_step_but_not_its_result():
    """bf16 autocast + channels-last (`training.fast`) on an SGR step: another run key, another computation, and
    diagnostics in float32 that agree with fp32's to bf16 precision; off, the key is the stored runs' key."""
    from gradalign.training.fast import FastPath

    data, fast = synthetic(), FastPath(bf16=True, channels_last=True)
    plain, quick = spec("sgr", 3, epochs=1), spec("sgr", 3, epochs=1, fast=fast)
    assert "fast" not in plain.to_dict() and quick.to_dict()["fast"]["bf16"] is True
    outs = []
    for s in (plain, quick):
        run = tl.LocalRun(s, data, "cpu")
        outs.append(run.step(1))
    assert all(v.dtype == torch.float32 for v in outs[1].values() if torch.is_tensor(v))
    assert outs[0]["loss"] != outs[1]["loss"]  # the fast path did change the computation
    assert float(outs[1]["loss"]) == pytest.approx(float(outs[0]["loss"]), rel=0.02)
    assert float(outs[1]["sgr_2"]) == pytest.approx(float(outs[0]["sgr_2"]), rel=0.1)
    with pytest.raises(ConfigError, match="fast.compile"):
        exp.EXPERIMENTS[0].resolve("smoke", {"fast.compile": True})
