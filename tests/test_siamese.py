"""Deep Siamese training (Halvagal et al. 2022, §3, Table 1): VGG11, SimCLR augmentations, training loop."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from gradalign.data.augment import SimCLRAugment
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods.siamese import SiameseSettings, ema_rate, ema_update, learning_rate, train_siamese
from gradalign.models.vgg import VGG11, VGG11_LAYERS, scaled_channels


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny networks: OpenMP barriers dominate, and with two threads on a loaded two-core machine a step
    can take 50× longer. Results stay deterministic at any fixed thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = SiameseSettings(epochs=2, batch_size=32, warmup_epochs=1, width=0.125, projector_hidden=32,
                       projector_dim=8, probe_iterations=20)


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
    plain = dict(mean=(0.0,) * 3, std=(1.0,) * 3, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), jitter_p=0.0,
                 grayscale_p=0.0)
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
    ema_update(target, online, tau=0.9)
    torch.testing.assert_close(target.weight.detach(), expected)
    assert torch.equal(target.running_mean, online.running_mean)
    assert ema_rate(0, 100, 0.99) == pytest.approx(0.99)
    assert ema_rate(50, 100, 0.99) == pytest.approx(0.995)
    assert ema_rate(100, 100, 0.99) == pytest.approx(1.0)


def test_learning_rate_warms_up_then_decays_to_zero():
    lrs = [learning_rate(k, 100, 10, 0.1) for k in range(101)]
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


def test_resumed_run_is_bitwise_identical_to_an_uninterrupted_one(tmp_path):
    images, labels = toy_images(128)
    test = (images[:40], labels[:40])
    whole = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "whole.pt")
    first = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "split.pt", max_epochs_this_call=1)
    assert not first["complete"] and first["epochs_done"] == 1 and first["probe_test_acc"] is None
    resumed = train_siamese(images, labels, *test, TINY, checkpoint=tmp_path / "split.pt")
    assert resumed["curves"] == whole["curves"]
    assert resumed["probe_test_acc"] == whole["probe_test_acc"]
    assert resumed["final_spectrum"] == whole["final_spectrum"]
    a, b = (torch.load(tmp_path / name, weights_only=True)["run"] for name in ("whole.pt", "split.pt"))
    for part in ("net", "target", "readout"):
        assert a[part].keys() == b[part].keys()
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part])
    assert torch.equal(a["predictor"]["C"], b["predictor"]["C"]) and torch.equal(a["generator"], b["generator"])
    with pytest.raises(ConfigError, match="settings lr differ"):
        train_siamese(images, labels, *test, dataclasses.replace(TINY, lr=0.2), checkpoint=tmp_path / "split.pt")
    with pytest.raises(ConfigError, match="data"):
        train_siamese(images.flip(0), labels, *test, TINY, checkpoint=tmp_path / "split.pt")


@pytest.mark.parametrize("change, match", [
    (dict(loss="nope"), "unknown loss"),
    (dict(batch_size=500), "batch_size"),
    (dict(warmup_epochs=2), "warmup_epochs"),
    (dict(predictor_tau=1.0), "predictor_tau"),
    (dict(crop_scale_min=0.0), "crop_scale_min"),
])
def test_bad_settings_raise_config_error(change, match):
    images, labels = toy_images(64)
    with pytest.raises(ConfigError, match=match):
        train_siamese(images, labels, images, labels, dataclasses.replace(TINY, **change))


def test_bad_data_raises_config_error():
    images, labels = toy_images(64)
    with pytest.raises(ConfigError, match="uint8"):
        train_siamese(images.float(), labels, images, labels, TINY)
    with pytest.raises(ConfigError, match="shape"):
        train_siamese(images, labels, images[:, :, :8], labels, TINY)


def test_absurd_learning_rate_raises_divergence_error():
    images, labels = toy_images(64)
    with pytest.raises(DivergenceError, match=r"at step \d+ is NaN or Inf"):
        train_siamese(images, labels, images, labels, dataclasses.replace(TINY, lr=1e30, warmup_epochs=0))
