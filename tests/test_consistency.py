"""Consistency losses, VAT, GCN/ZCA and the in-network augmentation of Oliver et al. (2018)."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradalign.data.preprocess import ZCA, fit_zca, global_contrast_normalize
from gradalign.data.ssl_augment import SSLAugment, translate_reflect
from gradalign.errors import ConfigError
from gradalign.methods.consistency import (
    entropy,
    frozen_bn_stats,
    kl_divergence,
    softmax_mse,
    vat_loss,
    vat_perturbation,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _bn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 5),
    )


def _bn_buffers(model: nn.Module) -> list[torch.Tensor]:
    return [b for m in model.modules() if isinstance(m, nn.BatchNorm2d) for b in m.buffers()]


# --- losses -----------------------------------------------------------------------------------


def test_softmax_mse_by_hand_and_zero_for_equal_logits():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    target = torch.zeros(1, 2)
    torch.testing.assert_close(softmax_mse(logits, target), torch.tensor([0.0625]))
    same = torch.randn(4, 10)
    assert softmax_mse(same, same.clone()).shape == (4,)
    assert softmax_mse(same, same.clone()).abs().max() == 0


def test_softmax_mse_gradient_reaches_only_the_first_argument():
    logits = torch.randn(3, 5, requires_grad=True)
    target = torch.randn(3, 5, requires_grad=True)
    softmax_mse(logits, target).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    assert target.grad is None


def test_entropy_extremes():
    torch.testing.assert_close(entropy(torch.full((2, 7), 3.0)), torch.full((2,), math.log(7)))
    assert entropy(torch.tensor([[100.0, 0.0, 0.0]])).item() < 1e-30


def test_kl_divergence_matches_torch_and_is_zero_for_equal():
    p, q = torch.randn(6, 10, dtype=torch.float64), 3 * torch.randn(6, 10, dtype=torch.float64)
    kl = kl_divergence(p, q)
    reference = F.kl_div(q.log_softmax(-1), p.log_softmax(-1), log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(kl, reference)
    assert (kl > 0).all()
    assert kl_divergence(p, p.clone()).abs().max() < 1e-12


def test_losses_reject_bad_shapes():
    with pytest.raises(ConfigError):
        softmax_mse(torch.randn(3, 5), torch.randn(3, 4))
    with pytest.raises(ConfigError):
        kl_divergence(torch.randn(3, 5), torch.randn(2, 5))
    with pytest.raises(ConfigError):
        entropy(torch.randn(5))


# --- BatchNorm freezing -----------------------------------------------------------------------


def test_frozen_bn_stats_restores_buffers_and_normalises_with_batch_statistics():
    model = _bn_net().train()
    reference = copy.deepcopy(model)
    x = torch.randn(8, 3, 6, 6)
    model(torch.randn(8, 3, 6, 6))
    reference.load_state_dict(model.state_dict())
    before = [b.clone() for b in _bn_buffers(model)]
    objects = _bn_buffers(model)
    with frozen_bn_stats(model):
        out = model(x)
        assert not torch.equal(_bn_buffers(model)[0], before[0])
    expected = reference(x)
    assert torch.equal(out, expected)
    for buf, old, obj in zip(_bn_buffers(model), before, objects):
        assert torch.equal(buf, old) and buf is obj


def test_frozen_pass_keeps_earlier_graphs_backpropagatable():
    model = _bn_net().train()
    clean = model(torch.randn(4, 3, 6, 6))
    with frozen_bn_stats(model):
        extra = model(torch.randn(4, 3, 6, 6))
    (clean.sum() + extra.sum()).backward()
    assert model[0].weight.grad is not None


# --- VAT --------------------------------------------------------------------------------------


def test_vat_perturbation_has_norm_eps_per_example_and_keeps_bn_buffers():
    model = _bn_net().train()
    x = torch.randn(5, 3, 6, 6)
    clean = model(x)
    before = [b.clone() for b in _bn_buffers(model)]
    r = vat_perturbation(model, x, clean, eps=6.0, generator=torch.Generator().manual_seed(1))
    assert r.shape == x.shape and not r.requires_grad
    torch.testing.assert_close(r.flatten(1).norm(dim=1), torch.full((5,), 6.0), rtol=1e-5, atol=0)
    assert all(torch.equal(a, b) for a, b in zip(_bn_buffers(model), before))
    again = vat_perturbation(model, x, clean, eps=6.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(r, again)


def test_vat_direction_is_top_eigenvector_of_the_kl_hessian_for_a_linear_softmax_model():
    torch.manual_seed(3)
    dim, classes, batch = 6, 4, 5
    model = nn.Linear(dim, classes, bias=False).double()
    with torch.no_grad():
        model.weight.mul_(4)
    x = torch.randn(batch, dim, dtype=torch.float64)
    clean = model(x)
    g = torch.Generator().manual_seed(0)
    r = vat_perturbation(model, x, clean, eps=1.0, xi=1e-6, power_iterations=30, generator=g)
    w = model.weight.detach().T
    p = clean.detach().softmax(-1)
    for i in range(batch):
        hessian = w @ (torch.diag(p[i]) - torch.outer(p[i], p[i])) @ w.T
        top = torch.linalg.eigh(hessian).eigenvectors[:, -1]
        assert torch.dot(r[i], top).abs() > 0.99


def test_vat_loss_is_nonnegative_and_trains_the_model():
    model = _bn_net().train()
    x = torch.randn(6, 3, 6, 6)
    clean = model(x)
    before = [b.clone() for b in _bn_buffers(model)]
    loss, perturbed = vat_loss(model, x, clean, eps=1.0, generator=torch.Generator().manual_seed(2))
    assert loss.shape == (6,) and perturbed.shape == clean.shape
    assert (loss >= 0).all() and loss.sum() > 0
    torch.testing.assert_close(loss, kl_divergence(perturbed, clean.detach()))
    model.zero_grad()
    (loss.mean() + 0.1 * entropy(perturbed).mean()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(_bn_buffers(model), before))


def test_vat_rejects_bad_settings():
    model = _bn_net()
    x = torch.randn(2, 3, 6, 6)
    clean = torch.randn(2, 5)
    with pytest.raises(ConfigError):
        vat_perturbation(model, x, clean, eps=0.0)
    with pytest.raises(ConfigError):
        vat_perturbation(model, x, clean, eps=1.0, power_iterations=0)
    with pytest.raises(ConfigError):
        vat_loss(model, x, torch.randn(3, 5), eps=1.0)


# --- GCN and ZCA ------------------------------------------------------------------------------


def test_gcn_gives_zero_mean_and_norm_scale_per_image():
    x = torch.randint(0, 256, (7, 3, 4, 4)).float()
    out = global_contrast_normalize(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    flat = out.flatten(1).double()
    assert flat.mean(dim=1).abs().max() < 1e-5
    torch.testing.assert_close(flat.norm(dim=1), torch.full((7,), 55.0, dtype=torch.float64), rtol=1e-6, atol=0)
    constant = global_contrast_normalize(torch.full((1, 3, 2, 2), 9.0))
    assert torch.equal(constant, torch.zeros(1, 3, 2, 2))


def _correlated(n: int = 4000, dim: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    mixing = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    return (torch.randn(n, dim, generator=g, dtype=torch.float64) @ mixing + 3.0).float()


def test_zca_without_regularization_whitens():
    x = _correlated()
    zca = fit_zca(x, regularization=0.0)
    assert isinstance(zca, ZCA) and zca.mean.dtype == zca.transform.dtype == torch.float32
    white = zca.apply(x).double()
    torch.testing.assert_close(torch.cov(white.T), torch.eye(6, dtype=torch.float64), atol=1e-4, rtol=0)
    assert white.mean(dim=0).abs().max() < 1e-4


def test_zca_with_regularization_matches_closed_form():
    x = _correlated()
    r = 0.5
    cov = torch.cov(x.double().T)
    expected = cov @ torch.linalg.inv(cov + r * torch.eye(6, dtype=torch.float64))
    white = fit_zca(x, regularization=r, chunk=999).apply(x).double()
    torch.testing.assert_close(torch.cov(white.T), expected, atol=1e-4, rtol=1e-4)


def test_zca_keeps_image_shape_and_checks_size():
    images = torch.randn(50, 2, 2, 2)
    zca = fit_zca(images)
    assert zca.apply(images).shape == images.shape
    with pytest.raises(ConfigError):
        zca.apply(torch.randn(3, 9))


# --- augmentation -----------------------------------------------------------------------------


def test_augment_shape_identity_and_determinism():
    x = torch.randn(9, 3, 8, 8)
    aug = SSLAugment.for_dataset("cifar10")
    assert aug == SSLAugment(2, True, 0.15)
    assert aug(x).shape == x.shape
    assert torch.equal(SSLAugment(0, False, 0.0)(x), x)
    first = aug(x, torch.Generator().manual_seed(5))
    assert torch.equal(first, aug(x, torch.Generator().manual_seed(5)))
    assert not torch.equal(first, aug(x, torch.Generator().manual_seed(6)))


def test_translate_reflect_matches_a_hand_built_roll():
    x = torch.randn(2, 3, 7, 7)
    out = translate_reflect(x, torch.tensor([1, 0]), torch.tensor([-2, 0]), pad=2)
    rolled = torch.roll(x[0], shifts=(-1, 2), dims=(1, 2))
    assert torch.equal(out[0, :, :6, 2:], rolled[:, :6, 2:])
    assert torch.equal(out[0, :, 6, 2:], x[0, :, 5, :5])
    assert torch.equal(out[0, :, :6, 0], x[0, :, 1:7, 2])
    assert torch.equal(out[1], x[1])


def test_random_shifts_are_reflect_padded_crops_covering_all_offsets():
    x = torch.randn(1, 2, 6, 6).expand(400, 2, 6, 6).contiguous()
    out = SSLAugment(translate=2)(x, torch.Generator().manual_seed(0))
    padded = F.pad(x[:1], (2, 2, 2, 2), mode="reflect")[0]
    crops = {(dy, dx): padded[:, 2 + dy : 8 + dy, 2 + dx : 8 + dx] for dy in range(-2, 3) for dx in range(-2, 3)}
    seen = set()
    for image in out:
        match = [k for k, crop in crops.items() if torch.equal(image, crop)]
        assert len(match) == 1
        seen.add(match[0])
    assert len(seen) == 25


def test_flip_and_noise():
    x = torch.randn(200, 1, 4, 5)
    out = SSLAugment(translate=0, flip=True)(x, torch.Generator().manual_seed(0))
    flipped = (out == x.flip(-1)).flatten(1).all(dim=1)
    kept = (out == x).flatten(1).all(dim=1)
    assert (flipped | kept).all() and 60 < int(flipped.sum()) < 140
    noise = SSLAugment(translate=0, noise_std=0.15)(torch.zeros(200, 3, 8, 8), torch.Generator().manual_seed(0))
    assert abs(noise.std().item() - 0.15) < 0.003 and abs(noise.mean().item()) < 0.003


def test_augment_rejects_bad_input():
    with pytest.raises(ConfigError, match="cifar10"):
        SSLAugment.for_dataset("imagenet")
    with pytest.raises(ConfigError):
        SSLAugment(translate=-1)
    with pytest.raises(ConfigError):
        SSLAugment(noise_std=-0.1)
    with pytest.raises(ConfigError):
        SSLAugment()(torch.randn(3, 8, 8))
