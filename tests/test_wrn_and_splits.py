"""WRN-28-2 shapes and parameter count; the semi-supervised splits of Oliver et al. (2018)."""

import pytest
import torch

from gradalign.data.ssl_split import ssl_split
from gradalign.errors import ConfigError
from gradalign.models.wrn import ResidualUnit, WideResNet


def _expected_parameters(classes=10, cin=3, widths=(32, 64, 128), units=4):
    total, c = 9 * cin * 16, 16
    for w in widths:
        for _ in range(units):
            total += 2 * c + 9 * c * w + 2 * w + 9 * w * w + (c * w if c != w else 0)
            c = w
    return total + 2 * c + c * classes + classes


def test_wrn28_2_parameter_count_and_shapes():
    net = WideResNet()
    count = sum(p.numel() for p in net.parameters())
    assert count == _expected_parameters()
    assert 1.4e6 < count < 1.55e6  # Oliver et al.: "1.5M parameters"
    assert sum(isinstance(m, ResidualUnit) for m in net.modules()) == 12  # 28 = 6·4 + 4 layers
    out = net(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and net.features(torch.randn(2, 3, 32, 32)).shape == (2, 128)
    assert WideResNet(in_channels=1)(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_wrn_batchnorm_and_init_follow_the_protocol():
    net = WideResNet()
    bn = net.bn
    assert bn.momentum == 0.001 and bn.eps == 1e-3
    conv = net.body[-1].conv2  # 3×3, 128 outputs: std sqrt(2 / (9 · 128))
    assert abs(conv.weight.std().item() - (2 / (9 * 128)) ** 0.5) < 0.002
    assert conv.bias is None and torch.equal(net.fc.bias, torch.zeros(10))


def test_activate_before_residual_only_in_the_first_unit():
    units = [m for m in WideResNet().modules() if isinstance(m, ResidualUnit)]
    assert [u.activate_before_residual for u in units] == [True] + [False] * 11
    assert [u.shortcut is not None for u in units] == [True, False, False, False] * 3


def test_ssl_split_is_class_balanced_and_seeded():
    labels = torch.arange(10).repeat(50)  # 500 images, 50 per class
    split = ssl_split(labels, n_labeled=40, n_validation=100, seed=3)
    assert torch.bincount(labels[split.labeled], minlength=10).tolist() == [4] * 10
    assert len(split.validation) == 100 and len(split.unlabeled) == 400
    assert not set(split.validation.tolist()) & set(split.unlabeled.tolist())
    assert set(split.labeled.tolist()) <= set(split.unlabeled.tolist())  # the stream includes the labeled images
    again = ssl_split(labels, 40, 100, seed=3)
    assert torch.equal(again.labeled, split.labeled) and not torch.equal(
        ssl_split(labels, 40, 100, seed=4).labeled, split.labeled
    )


def test_ssl_split_bad_inputs():
    labels = torch.arange(10).repeat(5)
    with pytest.raises(ConfigError, match="multiple"):
        ssl_split(labels, 15, 10, 0)
    with pytest.raises(ConfigError, match="class"):
        ssl_split(labels, 60, 10, 0)
    with pytest.raises(ConfigError, match="n_validation"):
        ssl_split(labels, 10, 50, 0)
