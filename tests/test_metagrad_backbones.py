"""Tables 2 and 3's backbones and presets: the shake-shake network and ResNet-18 against counts worked out from
their layer lists, shake's gates, the meta step on both, the run-cache key, and the two "not run here"
experiments (validated presets, a one-line refusal before any compute, their verdict in the report)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradalign.records import runner
from gradalign.errors import ConfigError, NotRunHereError
from gradalign.experiments import EXPERIMENTS
from gradalign.methods.semimeta import SemiMetaSettings, pseudo_labels, semimeta_step
from gradalign.models import resnet18, shake_shake
from gradalign.book.report import NO_RECORD, element_verdict
from gradalign.records.results import ResultStore
from gradalign.training.semimeta import MODELS, SemiMetaRunSpec


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(("classes", "channels", "width"), [(10, 3, 1.0), (100, 3, 1.0), (10, 1, 0.125)])
def test_shake_shake_parameter_count_follows_the_layer_list(classes, channels, width):
    model = shake_shake.ShakeShake26(classes, channels, width)
    assert sum(p.numel() for p in model.parameters()) == shake_shake.parameter_count(classes, channels, width)


def test_shake_shake_26_2x96d_is_gastaldis_26_2m_network():
    assert round(shake_shake.parameter_count(10, 3, 1.0) / 1e6, 1) == 26.2  # Gastaldi (2017), Table 1
    convs = [m for m in shake_shake.ShakeShake26(10, 3, 0.125).modules() if isinstance(m, nn.Conv2d)]
    assert len([c for c in convs if c.kernel_size == (3, 3)]) == 1 + 3 * 4 * 2 * 2  # stem + 2 branches × 2


def test_resnet18_parameter_count_follows_the_layer_list():
    assert resnet18.parameter_count(1000, 3) == 11_689_512
    for classes, channels in ((1000, 3), (10, 1)):
        model = resnet18.ResNet18(classes, channels)
        assert sum(p.numel() for p in model.parameters()) == resnet18.parameter_count(classes, channels)
    assert resnet18.ResNet18(10, 1).features(torch.randn(2, 1, 28, 28)).shape == (2, 512)


def test_shake_mixes_each_sample_convexly_and_its_backward_gates_sum_to_one():
    torch.manual_seed(0)
    a = torch.randn(64, 3, 2, 2, requires_grad=True)
    b = (a.detach() + 1).requires_grad_()
    out = shake_shake.shake(a, b, training=True)
    gate = (b - out).detach()[:, 0, 0, 0]  # out = g·a + (1 − g)·b with a = b − 1, so b − out = g
    assert torch.allclose(b - out, gate.view(-1, 1, 1, 1).expand_as(out), atol=1e-6)
    assert 0 <= float(gate.min()) and float(gate.max()) <= 1 and float(gate.std()) > 0.1
    upstream = torch.randn_like(out)
    out.backward(upstream)
    h = (a.grad / upstream)[:, 0, 0, 0]
    assert torch.allclose(a.grad + b.grad, upstream, atol=1e-6)
    assert torch.allclose(a.grad, h.view(-1, 1, 1, 1) * upstream, atol=1e-5)
    assert float((h - gate).abs().max()) > 0.1  # the backward gate is drawn apart from the forward one
    assert torch.equal(shake_shake.shake(a, b, training=False), 0.5 * (a + b))


@pytest.mark.parametrize("name", ["shake_shake26", "resnet18"])
def test_meta_step_jvp_and_finite_difference_agree_on_the_backbone(name):
    torch.manual_seed(0)
    model = MODELS[name](10, 1, 0.125 if name == "shake_shake26" else 1.0).double()
    model(torch.randn(8, 1, 28, 28, dtype=torch.float64))  # BN running statistics off their initial values
    x_l, x_u = torch.randn(4, 1, 28, 28, dtype=torch.float64), torch.randn(4, 1, 28, 28, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    onehot = F.one_hot(y, 10).double()
    (fd, fd_plain), (jvp, jvp_plain) = (
        pseudo_labels(model, x_l, y, onehot, x_u, 0.1, SemiMetaSettings(form=form, c=1e-6)) for form in ("fd", "jvp")
    )
    assert model.training
    assert float((fd - jvp).norm() / jvp.norm()) < 1e-8  # c = 1e-6 in float64: too small to cross a ReLU kink
    assert torch.equal(fd_plain, jvp_plain) and not torch.equal(fd, fd_plain)  # ỹ, and the step moved it


def test_a_shake_shake_training_step_lowers_its_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    model = shake_shake.ShakeShake26(10, 1, 0.125)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(16, 1, 28, 28), torch.arange(16) % 10
    s = SemiMetaSettings(variant="labeled_only")
    losses = [float(semimeta_step(model, opt, x, y, x, 0.05, 1.0, s, 10)["loss"]) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]


def test_the_model_enters_the_run_key_only_when_it_is_not_conv_large():
    assert "model" not in SemiMetaRunSpec().to_dict()
    assert SemiMetaRunSpec(model="shake_shake26").to_dict()["model"] == "shake_shake26"
    with pytest.raises(ConfigError, match="model must be one of"):
        SemiMetaRunSpec(model="vgg")
    with pytest.raises(ConfigError, match="width must be 1 for resnet18"):
        SemiMetaRunSpec(model="resnet18", width=0.5)


def test_table2_specs_carry_the_shake_shake_network():
    cfg = EXPERIMENTS["metagrad.tab2"].resolve("paper")
    assert len(cfg.columns) == 6 and cfg.spec("meta_mixup", "cifar100", 6000, 0).model == "shake_shake26"
    assert cfg.spec("meta_mixup", "cifar10", 1000, 0).method.gamma == 1.0
    with pytest.raises(ConfigError, match="model must be one of"):
        EXPERIMENTS["metagrad.tab2"].resolve("smoke", {"model": "wrn"})


def test_table3_is_refused_before_any_compute_with_what_it_needs(tmp_path):
    exp = EXPERIMENTS["metagrad.tab3"]
    cfg = exp.resolve("paper")
    assert cfg.batch == 512 and cfg.epochs == 600 and cfg.label_fraction == 0.1
    empty = tmp_path / "no-imagenet"
    empty.mkdir()
    store = tmp_path / "results"
    with pytest.raises(NotRunHereError, match=f"ILSVRC-2012 images at {empty}.*torchrun --nproc-per-node 8") as err:
        runner.run("metagrad.tab3", "paper", {"data_root": str(empty)}, store=ResultStore(store))
    assert "\n" not in str(err.value) and not store.exists()
    with pytest.raises(ConfigError, match="preset 'cpu' is not defined"):
        exp.resolve("cpu")
    for override, field in (
        ({"crop_area": [0.5, 0.1]}, "crop_area"),
        ({"warmup_epochs": 600}, "warmup_epochs"),
        ({"variants": ["ours"]}, "variants"),
        ({"classes": 1}, "classes"),
    ):
        with pytest.raises(ConfigError, match=field):
            exp.resolve("paper", override)


def test_not_run_here_is_the_verdict_only_of_experiments_that_say_so():
    assert element_verdict("metagrad.tab2", None) == "not run here"
    assert element_verdict("metagrad.tab3", None) == "not run here"
    assert element_verdict("metagrad.tab1", None) == NO_RECORD


def test_table2_cpu_is_table4s_design_with_the_shake_shake_network():
    tab2, tab4 = (EXPERIMENTS[e].resolve("cpu") for e in ("metagrad.tab2", "metagrad.tab4"))
    assert tab2.model == "shake_shake26" and tab2.columns == (("fashion_mnist", 1000),)
    assert (tab2.protocol, tab2.width, tab2.seeds) == (tab4.protocol, tab4.width, 3) and tab2.dropout is None


def test_the_cpu_projection_is_the_measured_seconds_times_the_step_ratio():
    from gradalign.experiments.metagrad.backbones import projected_hours

    # per seed: 150 s (mean of 100 and 200) + 300 s; x 3 seeds x ratio 2 on 2 cores = 1,350 s
    assert projected_hours(2.0, {"labeled_only": [100.0, 200.0], "meta_mixup": [300.0]}, 3) == 1350 / 3600
    for ratio, seconds in ((0.0, {"a": [1.0]}), (float("nan"), {"a": [1.0]}), (1.0, {"a": []}), (1.0, {})):
        with pytest.raises(ConfigError, match="step ratio and measured seconds"):
            projected_hours(ratio, seconds, 3)


def test_the_projection_needs_both_stored_measurements(tmp_path, monkeypatch):
    from gradalign.book.page_helpers import table2_projection

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path))  # no bench record, no committed runs
    assert table2_projection() is None


def test_the_projection_from_the_committed_measurements_names_the_networks_as_the_page_shows_them():
    import re

    from gradalign.book.page_helpers import table2_projection

    projection = table2_projection()  # the committed fast_path benchmark and Table 4's committed cpu runs
    assert projection is not None
    names = list(projection["steps_seconds"])
    assert names == ["ResNet-26 shake-shake 2×96d, width ×0.125", "Conv-Large, width ×0.125"]
    assert not any(re.search(r"\b[a-z]+_[a-z0-9_.]+\b", name) for name in names)  # no benchmark identifier
    seconds = projection["steps_seconds"]
    assert projection["step_ratio"] == pytest.approx(seconds[names[0]] / seconds[names[1]])
