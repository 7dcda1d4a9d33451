"""Deep Siamese training (Halvagal et al. 2022, §3, Table 1): VGG11, SimCLR augmentations, training loop."""

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from gradalign.data.augment import SimCLRAugment
from gradalign.errors import ConfigError, DivergenceError
from gradalign.models.vgg import VGG11, VGG11_LAYERS, scaled_channels
from gradalign.training import siamese
from gradalign.training.checkpoint import CheckpointWarning, load_checkpoint
from gradalign.training.ema import ema_network_update
from gradalign.training.schedules import cosine_ema_rate, warmup_cosine
from gradalign.training.siamese import CURVES, SiameseSettings, train_siamese


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny networks: OpenMP barriers dominate, and with two threads on a loaded two-core machine a step
    can take 50× longer. Results stay deterministic at any fixed thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = SiameseSettings(
    epochs=2, batch_size=32, warmup_epochs=1, width=0.125, projector_hidden=32, projector_dim=8, probe_iterations=20
)


def toy_images(n, size=12, channels=1, seed=0):
    """Ten smooth random class templates (4×4 upsampled) plus pixel noise, as uint8, with labels."""
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate(torch.rand(10, channels, 4, 4, generator=g), size=(size, size), mode="bilinear")
    labels = torch.arange(n) % 10
    images = templates[labels] + 0.15 * torch.randn(n, channels, size, size, generator=g)
    return (images.clamp(0, 1) * 255).to(torch.uint8), labels


# ----------------------------------------------------------------------------- VGG11


@pytest.mark.parametrize("size, channels", [(28, 1), (32, 3), (96, 3)])
def test_vgg11_gives_flat_features_for_28_32_and_96_pixel_images(size, channels):
    net = VGG11(in_channels=channels, width=0.125)
    out = net(torch.rand(2, channels, size, size))
    assert out.shape == (2, net.feature_dim) == (2, scaled_channels(512, 0.125))


def test_vgg11_parameter_count_follows_the_layer_list():
    width, channels, expected = 0.25, 3, 0
    for item in VGG11_LAYERS:
        if item != "M":
            out = max(1, round(item * width))
            expected += channels * out * 9 + 2 * out  # 3×3 conv without bias, BatchNorm scale and shift
            channels = out
    assert sum(p.numel() for p in VGG11(3, width).parameters()) == expected
    assert sum(isinstance(m, torch.nn.Conv2d) for m in VGG11(3, width).modules()) == 8


# ----------------------------------------------------------------------------- augmentations


def test_augmentations_keep_the_shape_and_repeat_under_the_same_seed():
    x = torch.rand(6, 3, 16, 16)
    augment = SimCLRAugment(mean=(0.5,) * 3, std=(0.25,) * 3)
    a = augment(x, torch.Generator().manual_seed(1))
    assert a.shape == x.shape
    assert torch.equal(a, augment(x, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, augment(x, torch.Generator().manual_seed(2)))


@pytest.mark.parametrize("channels", [1, 3])
def test_each_sample_gets_its_own_random_parameters(channels):
    x = torch.rand(1, channels, 16, 16).expand(8, -1, -1, -1).contiguous()
    out = SimCLRAugment(mean=(0.0,) * channels, std=(1.0,) * channels)(x, torch.Generator().manual_seed(0))
    flat = out.flatten(1)
    assert all(not torch.allclose(flat[i], flat[j]) for i in range(8) for j in range(i))


def test_flip_flips_and_the_identity_crop_keeps_the_image():
    x = torch.rand(4, 3, 10, 10)
    plain = dict(
        mean=(0.0,) * 3, std=(1.0,) * 3, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), jitter_p=0.0, grayscale_p=0.0
    )
    flipped = SimCLRAugment(flip_p=1.0, **plain)(x, torch.Generator().manual_seed(0))
    kept = SimCLRAugment(flip_p=0.0, **plain)(x, torch.Generator().manual_seed(0))
    torch.testing.assert_close(flipped, x.flip(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(kept, x, atol=1e-5, rtol=0)


def test_grayscale_makes_the_channels_equal():
    x = torch.rand(5, 3, 8, 8)
    out = SimCLRAugment(mean=(0.0,) * 3, std=(1.0,) * 3, grayscale_p=1.0)(x, torch.Generator().manual_seed(0))
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 1], out[:, 2])


# ----------------------------------------------------------------------------- schedules and EMA


def test_ema_update_and_its_cosine_rate():
    torch.manual_seed(0)
    online, target = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    torch.nn.init.normal_(online.weight), torch.nn.init.normal_(target.weight)
    online.running_mean.fill_(2.0)
    expected = 0.9 * target.weight.detach() + 0.1 * online.weight.detach()
    ema_network_update(target, online, tau=0.9)
    torch.testing.assert_close(target.weight.detach(), expected)
    assert torch.equal(target.running_mean, online.running_mean)
    assert cosine_ema_rate(0, 100, 0.99) == pytest.approx(0.99)
    assert cosine_ema_rate(50, 100, 0.99) == pytest.approx(0.995)
    assert cosine_ema_rate(100, 100, 0.99) == pytest.approx(1.0)


def test_learning_rate_warms_up_then_decays_to_zero():
    lrs = [warmup_cosine(k, 100, 10, 0.1) for k in range(101)]
    assert lrs[0] == pytest.approx(0.01) and lrs[9] == pytest.approx(0.1) and lrs[10] == pytest.approx(0.1)
    assert lrs[100] == pytest.approx(0.0, abs=1e-12) and lrs[55] == pytest.approx(0.05)


# ----------------------------------------------------------------------------- training


@pytest.mark.parametrize("loss, ema", [("L", True), ("iso", False)])
def test_training_lowers_the_symmetrised_loss(loss, ema):
    images, labels = toy_images(256)
    settings = dataclasses.replace(TINY, loss=loss, ema=ema, epochs=3, lr=0.05)
    result = train_siamese(images, labels, images[:100], labels[:100], settings)
    loss_curve = result["curves"]["loss"]
    assert loss_curve[-1] < 0.9 * loss_curve[0]
    assert result["complete"] and result["steps"] == 3 * (256 // 32)
    assert result["readout_test_acc"] == result["curves"]["readout_test_acc"][-1]
    assert 0 <= result["probe_test_acc"] <= 1 and len(result["final_spectrum"]) == settings.projector_dim


def _recording_runs(monkeypatch) -> list:
    """Every SiameseRun that train_siamese builds, kept for inspection after the call."""
    runs = []

    class Recording(siamese.SiameseRun):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(siamese, "SiameseRun", Recording)
    return runs


def _without_times(state: dict) -> dict:
    return {k: v for k, v in state.items() if k != "epoch_seconds"}


def _assert_identical(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_resumed_run_is_bitwise_identical_to_an_uninterrupted_one(tmp_path, monkeypatch):
    """Two calls of one epoch each (`max_epochs_this_call=1`, one checkpoint) against one call of two."""
    images, labels = toy_images(128)
    test = (images[:40], labels[:40])
    runs = _recording_runs(monkeypatch)
    whole = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "whole.pt")
    first = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "split.pt", max_epochs_this_call=1)
    assert not first["complete"] and first["epochs_done"] == 1 and first["probe_test_acc"] is None
    assert first["steps"] == 128 // 32 and first["curves"]["loss"] == whole["curves"]["loss"][:1]
    header = json.loads((tmp_path / "split.pt").read_bytes().partition(b"\n")[0])
    assert load_checkpoint(tmp_path / "split.pt", header["fingerprint"])["loop"]["step"] == 128 // 32
    resumed = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "split.pt")
    assert resumed["complete"] and resumed["epochs_done"] == 2 and resumed["steps"] == whole["steps"]
    assert list(resumed["curves"]) == list(CURVES) and len(resumed["curves"]["loss"]) == 2
    assert resumed["curves"] == whole["curves"]
    assert resumed["probe_test_acc"] == whole["probe_test_acc"] is not None
    assert resumed["readout_test_acc"] == whole["readout_test_acc"]
    assert resumed["final_spectrum"] == whole["final_spectrum"]
    assert len(resumed["epoch_seconds"]) == 2  # the first call's epoch comes back with the checkpoint
    # every parameter, buffer, optimizer moment, the predictor's correlation and the generator, at the end
    whole_run, resumed_run = runs[0], runs[2]
    assert whole_run.target is not None  # TINY trains with the EMA target: it is compared too
    _assert_identical(_without_times(resumed_run.state_dict()), _without_times(whole_run.state_dict()))
    # another run's checkpoint is set aside (kept for its run) and this run starts fresh (issue 25)
    (tmp_path / "whole.pt").write_bytes((tmp_path / "split.pt").read_bytes())
    with pytest.warns(CheckpointWarning, match="belongs to another run"):
        other_seed = dataclasses.replace(TINY, seed=TINY.seed + 1)
        train_siamese(images, labels, *test, other_seed, checkpoint=tmp_path / "split.pt", max_epochs_this_call=1)
    with pytest.warns(CheckpointWarning, match="belongs to another run"):  # other data
        train_siamese(images.flip(0), labels, *test, TINY, checkpoint=tmp_path / "whole.pt", max_epochs_this_call=1)
    assert len(list(tmp_path.glob("*.pt.other-*"))) == 2


@pytest.mark.parametrize(
    "change, match, at_construction",
    [
        (dict(loss="nope"), "unknown loss", True),
        (dict(batch_size=1), "batch_size", True),
        (dict(batch_size=500), "batch_size", False),  # more than the 64 training images: known at training time
        (dict(warmup_epochs=2), "warmup_epochs", True),
        (dict(predictor_tau=1.0), "predictor_tau", True),
        (dict(crop_scale_min=0.0), "crop_scale_min", True),
    ],
)
def test_bad_settings_raise_config_error(change, match, at_construction):
    images, labels = toy_images(64)
    if at_construction:  # validated by the constructor: no SiameseSettings with a bad value can exist
        with pytest.raises(ConfigError, match=match):
            dataclasses.replace(TINY, **change)
        return
    settings = dataclasses.replace(TINY, **change)
    with pytest.raises(ConfigError, match=match):
        settings.check(len(images))
    with pytest.raises(ConfigError, match=match):
        train_siamese(images, labels, images, labels, settings)


def test_bad_data_raises_config_error():
    images, labels = toy_images(64)
    with pytest.raises(ConfigError, match="uint8"):
        train_siamese(images.float(), labels, images, labels, TINY)
    with pytest.raises(ConfigError, match="shape"):
        train_siamese(images, labels, images[:, :, :8], labels, TINY)


def test_absurd_learning_rate_raises_divergence_error():
    images, labels = toy_images(64)
    with pytest.raises(
        DivergenceError,
        match=r"Siamese training diverged at step \d+: "
        r"the (previous loss|projector correlation) = ",
    ):
        train_siamese(images, labels, images, labels, dataclasses.replace(TINY, lr=1e30, warmup_epochs=0))


def test_a_collapse_is_said_where_it_happened_and_a_run_that_never_collapsed_says_none():
    """The readout back at chance once it had started (the stop rule's reading) is a collapse, at its epoch's step;
    a final probe at chance is one too; a readout that never left chance, or stayed up, is none."""
    from gradalign.training.siamese import first_collapse

    said = first_collapse("siamese L no EMA", [0.3, 0.6, 0.39, 0.11], 100, 10, 0.12)
    assert (
        said
        == "siamese L no EMA collapsed at step 400: readout_test_acc = 0.11, back at chance (0.1; it had reached 0.6)"
    )
    assert first_collapse("x", [0.3, 0.45, 0.5], 100, 10, 0.7) is None
    assert first_collapse("x", [0.1, 0.1, 0.11], 100, 10, 0.5) is None  # never started: not a collapse
    assert first_collapse("x", [0.3, 0.45, 0.5], 100, 10, 0.1).startswith("x collapsed at step 300: probe_test_acc")


def test_a_run_trains_on_through_a_collapse_and_returns_its_probe(monkeypatch):
    """No chance level is handed to the loop (a collapse does not stop the run): the result carries `collapsed`."""
    from gradalign.training import loop

    seen = {}
    real = loop.train

    def spy(*args, **kwargs):
        seen["chance"] = kwargs.get("chance")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train", spy)
    images, labels = toy_images(64)
    out = train_siamese(images, labels, images, labels, TINY)
    assert seen["chance"] == () and "collapsed" in out and out["probe_test_acc"] is not None
