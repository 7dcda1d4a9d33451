"""SGR's networks: ResNet-32 / PlainNet-32 with their local splits, the local heads, the VGG family of Table 7."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradalign.errors import ConfigError
from gradalign.models.local_heads import HEADS, infopro_decoder, local_head
from gradalign.models.resnet_cifar import (
    cifar_resnet,
    module_channels,
    module_downsampling,
    resnet32,
    split_into_modules,
    valid_splits,
)
from gradalign.models.vgg_deep import VGG_DEPTHS, vgg_deep, vgg_module_channels, vgg_modules, vgg_valid_splits


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def conv(cin: int, cout: int, k: int = 3, bias: bool = False) -> int:
    return cin * cout * k * k + (cout if bias else 0)


def bn(c: int) -> int:
    return 2 * c


def resnet32_parameters(classes: int, projection_shortcuts: bool) -> int:
    """ResNet-32 from its layer list (He et al. 2016, §4.2): stem, 3 stages × 5 blocks, linear."""
    total = conv(3, 16) + bn(16)
    cin = 16
    for width in (16, 32, 64):
        for i in range(5):
            total += conv(cin, width) + bn(width) + conv(width, width) + bn(width)
            if projection_shortcuts and cin != width:  # 1×1 conv + BN where the shape changes
                total += conv(cin, width, 1) + bn(width)
            cin = width
    return total + 64 * classes + classes


def test_resnet32_parameter_count():
    n = sum(p.numel() for p in resnet32().parameters())
    assert n == resnet32_parameters(10, projection_shortcuts=True) == 466_906
    assert round(n / 1e6, 2) == 0.47  # He et al.'s 0.46 M is option A (no projection): 464,154
    assert resnet32_parameters(10, projection_shortcuts=False) == 464_154


def test_plainnet32_parameter_count_has_no_shortcuts():
    plain = resnet32(classes=100, plain=True)
    assert sum(p.numel() for p in plain.parameters()) == resnet32_parameters(100, projection_shortcuts=False)
    assert all(block.shortcut is None for block in plain.blocks)


def test_resnet_structure():
    model = resnet32()
    assert len(model.blocks) == 15
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    weight_layers = convs + [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(weight_layers) == 32  # 6n + 2, shortcuts not counted
    assert [b.stride for b in model.blocks] == [1] * 5 + [2] + [1] * 4 + [2] + [1] * 4
    assert isinstance(model.head[-1], nn.Linear) and model.head[-1].in_features == 64
    assert cifar_resnet(20).blocks_per_stage == 3
    assert resnet32(width=2.0).feature_dim == 128


SPLIT_CHANNELS = {
    1: [64],
    2: [32, 64],
    3: [16, 32, 64],
    16: [16] * 6 + [32] * 5 + [64] * 5,
}


@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 16])
def test_splits_compute_the_network(k, plain):
    torch.manual_seed(0)
    model = resnet32(plain=plain).eval()
    with torch.no_grad():  # give BN non-trivial statistics so that eval mode is not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    modules = split_into_modules(model, k)
    assert isinstance(modules, nn.ModuleList) and len(modules) == k
    assert all(isinstance(m, nn.Sequential) for m in modules)
    assert module_channels(model, k) == SPLIT_CHANNELS[k]
    x = torch.randn(3, 3, 32, 32)
    h = x
    with torch.no_grad():
        for module, channels, stride in zip(modules, module_channels(model, k), module_downsampling(model, k)):
            h = module(h)
            assert h.shape == (3, channels, 32 // stride, 32 // stride)
        whole = model(x)
        assert torch.allclose(nn.Sequential(*modules, model.head)(x), whole, atol=1e-6, rtol=0)
        assert torch.allclose(model.head(h), whole, atol=1e-6, rtol=0)
    # the modules hold the model's own parameters: no copies, none missing
    shared = {id(p) for p in modules.parameters()} | {id(p) for p in model.head.parameters()}
    assert shared == {id(p) for p in model.parameters()}


def test_split_k2_keeps_the_last_stage_apart():
    model = resnet32()
    first, second = split_into_modules(model, 2)
    assert list(second) == list(model.blocks[10:])
    assert first[0] is model.stem and list(first)[1:] == list(model.blocks[:10])


@pytest.mark.parametrize("bad", [0, 4, 15, 17, -1, True, 2.0, "3"])
def test_bad_split_is_refused(bad):
    with pytest.raises(ValueError, match=r"valid K: \(1, 2, 3, 16\)") as err:
        split_into_modules(resnet32(), bad)
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        module_channels(resnet32(), bad)


def test_valid_splits_follow_the_depth():
    assert valid_splits(resnet32()) == (1, 2, 3, 16)
    assert valid_splits(cifar_resnet(20)) == (1, 2, 3, 10)


@pytest.mark.parametrize("depth", [30, 31, 2, 0, -4, True, 32.0])
def test_bad_resnet_depth_is_refused(depth):
    with pytest.raises(ConfigError, match="6n \\+ 2"):
        cifar_resnet(depth)


@pytest.mark.parametrize("kwargs", [{"width": 0.0}, {"width": float("nan")}, {"classes": 0}, {"classes": True}])
def test_bad_resnet_arguments_are_refused(kwargs):
    with pytest.raises(ConfigError):
        resnet32(**kwargs)


# --- local heads ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(set(HEADS) - {"etf"}))
@pytest.mark.parametrize("channels,size", [(16, 32), (32, 16), (64, 8), (8, 1)])
def test_heads_give_logits(kind, channels, size):
    head = local_head(kind, channels, 10)
    assert head(torch.randn(2, channels, size, size)).shape == (2, 10)


def test_etf_head_reads_flat_features_and_has_no_parameters():
    head = local_head("etf", 64, 10)
    assert head(torch.randn(2, 64)).shape == (2, 10) and not list(head.parameters())
    with pytest.raises(ValueError, match="at least 10"):
        local_head("etf", 8, 10)


def test_belilovsky_head_layers():
    head = local_head("belilovsky", 16, 10)
    kinds = [type(m).__name__ for m in head]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU", "AdaptiveAvgPool2d", "BatchNorm2d", "Flatten", "Linear"]
    assert head[0].stride == (1, 1) and head[0].out_channels == 16
    assert sum(p.numel() for p in head.parameters()) == conv(16, 16) + bn(16) + bn(16) + 4 * 16 * 10 + 10


def test_dgl_and_gap_heads_layers():
    dgl = local_head("dgl", 32, 10)
    assert sum(isinstance(m, nn.Conv2d) for m in dgl) == 2 and dgl[-1].in_features == 4 * 32
    gap = local_head("gap_linear", 32, 10)
    assert sum(p.numel() for p in gap.parameters()) == 32 * 10 + 10


def test_infopro_head_downsamples_only_large_maps():
    head = local_head("infopro", 16, 10)
    assert head[0](torch.randn(1, 16, 16, 16)).shape[-1] == 8  # 16 px: stride 2
    assert head[0](torch.randn(1, 16, 8, 8)).shape[-1] == 8  # 8 px: stride 1
    assert head[-3].out_features == 128 and head[-1].out_features == 10


def test_infopro_decoder_reconstructs_the_image_size():
    features = torch.randn(2, 32, 8, 8)
    stored = infopro_decoder(32, 3, 32)
    out = stored(features)
    assert out.shape == (2, 3, 32, 32) and out.min() >= 0 and out.max() <= 1
    assert infopro_decoder(32, 1)(features, (28, 28)).shape == (2, 1, 28, 28)
    with pytest.raises(ConfigError, match="image size"):
        infopro_decoder(32, 3)(features)


@pytest.mark.parametrize("kind", ["conv", "", "Belilovsky"])
def test_unknown_head_is_refused(kind):
    with pytest.raises(ValueError, match="unknown local head") as err:
        local_head(kind, 16, 10)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("channels,classes", [(0, 10), (16, 0), (True, 10), (16.0, 10)])
def test_bad_head_sizes_are_refused(channels, classes):
    with pytest.raises(ConfigError):
        local_head("belilovsky", channels, classes)


# --- VGG of Table 7 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", VGG_DEPTHS)
def test_vgg_depth_counts_weight_layers(depth):
    model = vgg_deep(depth, 10, 3, width=0.125)
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert len(layers) == depth
    assert sum(isinstance(m, nn.Linear) for m in layers) == 2
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())  # plain VGG by default
    assert vgg_valid_splits(model) == (1, 5, depth - 2)


def test_vgg_inputs_and_batch_norm_variant():
    with torch.no_grad():
        assert vgg_deep(12, 10, 1, width=0.125)(torch.randn(2, 1, 28, 28)).shape == (2, 10)  # Fashion-MNIST
        assert vgg_deep(12, 100, 3, width=0.125)(torch.randn(2, 3, 32, 32)).shape == (2, 100)  # CIFAR
    with_bn = vgg_deep(17, 10, 3, width=0.125, batch_norm=True)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in with_bn.modules()) == 15
    assert sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in with_bn.modules()) == 17
    assert vgg_deep(12, width=1.0).feature_dim == 512


@pytest.mark.parametrize("k", [1, 5, 15])
def test_vgg_splits_compute_the_network(k):
    torch.manual_seed(0)
    model = vgg_deep(17, 10, 1, width=0.125).eval()
    modules = vgg_modules(model, k)
    assert len(modules) == k and len(vgg_module_channels(model, k)) == k
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        h = x
        for module, channels in zip(modules, vgg_module_channels(model, k)):
            h = module(h)
            assert h.shape[1] == channels
        assert torch.allclose(model.head(h), model(x), atol=1e-6, rtol=0)
    shared = {id(p) for p in modules.parameters()} | {id(p) for p in model.head.parameters()}
    assert shared == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("depth", [13, 11, 5, 0, True, 12.0])
def test_bad_vgg_depth_is_refused(depth):
    with pytest.raises(ConfigError, match="5m \\+ 2"):
        vgg_deep(depth)


@pytest.mark.parametrize("k", [2, 3, 16, 0, True])
def test_bad_vgg_split_is_refused(k):
    with pytest.raises(ConfigError, match="valid K"):
        vgg_modules(vgg_deep(17, width=0.125), k)


@pytest.mark.parametrize("kwargs", [{"width": -1.0}, {"classes": 0}, {"in_channels": 0}])
def test_bad_vgg_arguments_are_refused(kwargs):
    with pytest.raises(ConfigError):
        vgg_deep(12, **kwargs)
