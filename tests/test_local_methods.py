"""Local-BP step functions (`gradalign.methods.local`, `methods.infopro`) on tiny modules and heads."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gradalign.errors import ConfigError
from gradalign.methods.infopro import RESNET32_WEIGHTS, InfoProHead, infopro_weights
from gradalign.methods.local import HEAD_DEFINES_METHOD, LOCAL_METHODS, METHOD_HEADS, LocalSettings
from gradalign.methods.sgr import reconciliation_loss
from gradalign.models.local_heads import local_head

C, CLASSES, N, PX = 4, 3, 6, 6


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def tiny(modules: int = 3, head: str = "gap_linear", bn: bool = False, seed: int = 0):
    """K conv modules (no BN unless asked: forward passes then have no side effects) and their heads."""
    torch.manual_seed(seed)

    def block(cin):
        layers = [nn.Conv2d(cin, C, 3, padding=1)] + ([nn.BatchNorm2d(C)] if bn else []) + [nn.Tanh()]
        return nn.Sequential(*layers)

    mods = nn.ModuleList([block(1)] + [block(C) for _ in range(modules - 1)])
    heads = [local_head(head, C, CLASSES) for _ in range(modules - 1)]
    heads.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(C, CLASSES)))
    return mods, heads


def optimizers(mods, heads, lr=0.1):
    return [
        torch.optim.SGD([*m.parameters(), *h.parameters()], lr=lr, momentum=0.9, weight_decay=5e-4)
        for m, h in zip(mods, heads)
    ]


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, 1, PX, PX, generator=g), torch.randint(0, CLASSES, (N,), generator=g)


def params(mods, heads):
    return [p.detach().clone() for part in (*mods, *heads) for p in part.parameters()]


def run(method: str, mods, heads, x, y, **settings):
    head = None if method in HEAD_DEFINES_METHOD else "gap_linear"  # the steps use the heads they are given
    s = LocalSettings(method=method, modules=len(mods), head=head, **settings)
    return LOCAL_METHODS[method](mods, heads, optimizers(mods, heads), x, y, s)


def same(a, b):
    return all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def test_layerwise_equals_independent_one_module_optimisations():
    mods, heads = tiny()
    ref_mods, ref_heads = copy.deepcopy(mods), copy.deepcopy(heads)
    x, y = batch()
    run("layerwise", mods, heads, x, y)
    with torch.no_grad():  # every module's input, from the parameters before any step
        inputs = [x]
        for m in ref_mods[:-1]:
            inputs.append(m(inputs[-1]))
    for m, h, opt, x_in in zip(ref_mods, ref_heads, optimizers(ref_mods, ref_heads), inputs):
        opt.zero_grad()
        F.cross_entropy(h(m(x_in.detach())), y).backward()
        opt.step()
    assert same(params(mods, heads), params(ref_mods, ref_heads))


def test_global_bp_equals_plain_backward():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, C, 3, padding=1), nn.Tanh(), nn.Conv2d(C, C, 3, padding=1), nn.Tanh())
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(C, CLASSES))
    ref = copy.deepcopy(nn.Sequential(net, head))
    x, y = batch()
    out = LOCAL_METHODS["global_bp"](
        nn.ModuleList([net]), [head], optimizers([net], [head]), x, y, LocalSettings(method="global_bp", modules=1)
    )
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loss = F.cross_entropy(ref(x), y)
    loss.backward()
    opt.step()
    assert same(params([net], [head]), [p.detach() for p in ref.parameters()])
    assert torch.equal(out["loss"], loss.detach())


def _inputs_of_second_module(method: str):
    mods, heads = tiny(modules=2)
    before = copy.deepcopy(mods[0])
    seen = []
    mods[1].register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    x, y = batch()
    run(method, mods, heads, x, y)
    with torch.no_grad():
        return seen[0], before(x), mods[0](x)


def test_layerwise_passes_on_the_pre_step_output():
    passed, pre, post = _inputs_of_second_module("layerwise")
    assert torch.equal(passed, pre) and not torch.allclose(passed, post)


def test_reforward_passes_on_the_post_step_output():
    passed, pre, post = _inputs_of_second_module("reforward")
    assert torch.equal(passed, post) and not torch.allclose(passed, pre)


def test_sgr_with_lambda_zero_is_layerwise_exactly():
    x, y = batch()
    a, b = tiny(bn=True), tiny(bn=True)
    run("layerwise", *a, x, y)
    run("sgr", *b, x, y, lam=0.0)
    assert same(params(*a), params(*b))


def test_sgr_with_lambda_changes_only_modules_after_the_first():
    x, y = batch()
    (la_m, la_h), (sg_m, sg_h) = tiny(), tiny()
    run("layerwise", la_m, la_h, x, y)
    run("sgr", sg_m, sg_h, x, y, lam=10.0)
    assert same(params(la_m[:1], la_h[:1]), params(sg_m[:1], sg_h[:1]))  # module 1 and its head
    for k in (1, 2):
        assert not same(params(la_m[k : k + 1], []), params(sg_m[k : k + 1], []))


def test_sgr_terms_measured_by_every_method_agree_with_sgr_and_autograd():
    x, y = batch()
    diagnostics = {m: run(m, *tiny(), x, y) for m in ("layerwise", "dgl", "sgr")}
    for k in (2, 3):
        assert torch.allclose(diagnostics["layerwise"][f"sgr_{k}"], diagnostics["sgr"][f"sgr_{k}"], atol=1e-7)
    assert "sgr_1" not in diagnostics["layerwise"]
    mods, heads = tiny()  # by hand: ∂L_2/∂x_1 against ∂L_1/∂x_1
    x1 = mods[0](x)
    (delta_pre,) = torch.autograd.grad(F.cross_entropy(heads[0](x1), y), x1)
    x1 = x1.detach().requires_grad_(True)
    (delta_now,) = torch.autograd.grad(F.cross_entropy(heads[1](mods[1](x1)), y), x1)
    assert torch.allclose(diagnostics["layerwise"]["sgr_2"], reconciliation_loss(delta_now, delta_pre), atol=1e-8)


def test_diagnostics_are_detached_scalars_with_final_loss_and_accuracy():
    x, y = batch()
    for method in ("layerwise", "reforward", "sgr", "greedy", "dgl"):
        out = run(method, *tiny(), x, y)
        assert {"loss", "acc", "local_loss_1", "local_loss_3", "sgr_3"} <= set(out)
        assert all(v.ndim == 0 and not v.requires_grad for v in out.values())
        assert 0 <= float(out["acc"]) <= 1


def test_method_heads_greedy_dgl_infopro():
    assert LocalSettings(method="greedy").head_kind == "gap_linear"
    assert LocalSettings(method="dgl").head_kind == "dgl"
    assert LocalSettings(method="infopro").head_kind == "infopro"
    assert LocalSettings(method="sgr").head_kind == "belilovsky"
    assert METHOD_HEADS["global_bp"] is None
    assert LOCAL_METHODS["greedy"] is LOCAL_METHODS["layerwise"] is LOCAL_METHODS["dgl"]


def test_infopro_weights_interpolate_from_first_to_last_local_module():
    w = RESNET32_WEIGHTS[16]
    assert infopro_weights(0, 16, w) == (w[0], w[1])
    assert infopro_weights(14, 16, w) == pytest.approx((w[2], w[3]))
    assert infopro_weights(7, 16, w) == pytest.approx(((w[0] + w[2]) / 2, (w[1] + w[3]) / 2))
    assert infopro_weights(0, 2, RESNET32_WEIGHTS[2]) == (5.0, 1.0)


def test_infopro_reconstruction_shape_value_and_gradient():
    torch.manual_seed(0)
    head = InfoProHead(C, CLASSES, 1, PX, (0.3,), (0.4,))
    features = torch.randn(N, C, 3, 3, requires_grad=True)
    image, y = batch()
    rebuilt = head.decoder(features, image.shape[-2:])
    assert rebuilt.shape == image.shape and 0 <= float(rebuilt.detach().min()) and float(rebuilt.detach().max()) <= 1
    target = (image * 0.4 + 0.3).clamp(0, 1)
    rec = head.reconstruction_loss(features, image)
    manual = -(target * rebuilt.log() + (1 - target) * (1 - rebuilt).log()).mean()
    assert torch.allclose(rec, manual, atol=1e-5)
    value, ce, rec2 = head.local_loss(features, image, y, w_rec=2.0, w_ce=0.5)
    assert torch.allclose(value, 0.5 * ce + 2.0 * rec2)
    value.backward()
    assert features.grad is not None and features.grad.abs().sum() > 0
    assert all(p.grad is not None for p in head.decoder.parameters())


def test_infopro_step_steps_every_module_on_its_pre_step_gradient():
    x, y = batch()
    mods, _ = tiny()
    torch.manual_seed(3)
    heads = [InfoProHead(C, CLASSES, 1, PX, (0.3,), (0.4,)) for _ in range(2)] + [tiny()[1][-1]]
    ref_mods, ref_heads = copy.deepcopy(mods), copy.deepcopy(heads)
    weights = (2.0, 1.0, 1.0, 0.5)
    s = LocalSettings(method="infopro", modules=3, infopro_weights=weights)
    out = LOCAL_METHODS["infopro"](mods, heads, optimizers(mods, heads), x, y, s)
    assert {"reconstruction_1", "reconstruction_2"} <= set(out) and "reconstruction_3" not in out
    with torch.no_grad():
        inputs = [x, ref_mods[0](x)]
        inputs.append(ref_mods[1](inputs[1]))
    for k, (m, h, opt) in enumerate(zip(ref_mods, ref_heads, optimizers(ref_mods, ref_heads))):
        opt.zero_grad()
        features = m(inputs[k])
        if k < 2:
            w_rec, w_ce = infopro_weights(k, 3, weights)
            h.local_loss(features, x, y, w_rec, w_ce)[0].backward()
        else:
            F.cross_entropy(h(features), y).backward()
        opt.step()
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(params(mods, heads), params(ref_mods, ref_heads)))


@pytest.mark.parametrize(
    "values",
    [
        {"method": "backprop"},
        {"method": "global_bp", "modules": 2},
        {"method": "global_bp", "modules": 1, "head": "dgl"},
        {"method": "layerwise", "modules": 1},
        {"method": "sgr", "head": "resnet"},
        {"method": "dgl", "head": "belilovsky"},
        {"method": "sgr", "lam": -1.0},
        {"method": "sgr", "reduction": "max"},
        {"method": "infopro", "modules": 5},
        {"method": "infopro", "modules": 16, "infopro_weights": (1.0, 2.0)},
        {"method": "infopro", "modules": 16, "infopro_weights": (1.0, 2.0, -1.0, 0.0)},
        {"method": "sgr", "modules": True},
    ],
)
def test_bad_settings_refused(values):
    with pytest.raises(ConfigError):
        LocalSettings(**values)
