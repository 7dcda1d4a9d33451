"""LGA, Algorithm 1 for any model: the JVP w-gradient against autograd, BatchNorm untouched by the JVP
pass, the linear special case against `lga_linear`, claims that could fail, and bad inputs."""

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gradalign.data.linear_regression import gaussian_problem
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods import lga_linear
from gradalign.methods.lga import (
    LGASettings,
    double_backward_label_gradient,
    init_lga,
    jvp_label_gradient,
    lga_step,
    unlabeled_gradient,
)
from gradalign.methods.pseudo_label import PseudoLabelSettings, pseudo_label_step, pseudo_label_terms
from gradalign.params import flat

K = 5
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch's JVP rules


def small_cnn(dropout: float = 0.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.LeakyReLU(0.1),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.LeakyReLU(0.1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(8, K),
    ).double()


def images(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _soft_labels(n: int, seed: int) -> torch.Tensor:
    return torch.softmax(2 * torch.randn(n, K, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)), -1)


def _buffers(model):
    return {name: b.clone() for name, b in model.named_buffers()}


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("train", [True, False])
def test_jvp_label_gradient_matches_double_backward(task, train):
    model = small_cnn(dropout=0.3).train(train)
    x_u, y_u = images(7, 1), _soft_labels(7, 2)
    p = sum(q.numel() for q in model.parameters())
    gen = torch.Generator().manual_seed(3)
    target = torch.randn(p, dtype=torch.float64, generator=gen) * 0.1
    normalizer = torch.rand(p, dtype=torch.float64, generator=gen) + 0.5
    _, g_u, snapshot = unlabeled_gradient(model, x_u, y_u, task)
    u = normalizer * (target - flat(g_u))
    ours = jvp_label_gradient(model, x_u, u, task, snapshot)
    reference = double_backward_label_gradient(model, x_u, y_u, target, normalizer, task, snapshot)
    torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-12)
    if train:  # the replayed random state matters: other dropout masks give another gradient
        other = double_backward_label_gradient(model, x_u, y_u, target, normalizer, task, None)
        assert (other - reference).abs().max() > 1e-6


def test_jvp_pass_leaves_batchnorm_statistics_unchanged():
    model = small_cnn().train()
    x_u = images(6, 4)
    model(images(6, 5))  # non-trivial running statistics
    before = _buffers(model)
    p = sum(q.numel() for q in model.parameters())
    jvp_label_gradient(model, x_u, torch.randn(p, dtype=torch.float64), "classification")
    after = _buffers(model)
    assert set(after) >= {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    for name in before:
        assert torch.equal(before[name], after[name]), name


def test_step_moves_batchnorm_statistics_exactly_as_two_plain_passes():
    model = small_cnn().train()
    twin = copy.deepcopy(model)
    x_l, y_l, x_u = images(6, 6), torch.arange(6) % K, images(8, 7)
    state = init_lga(model, 8, K, LGASettings(check_every=1))
    lga_step(model, state, x_l, y_l, x_u, torch.arange(8))
    with torch.no_grad():
        twin(x_l), twin(x_u)
    for (name, ours), (_, plain) in zip(model.named_buffers(), twin.named_buffers()):
        assert torch.equal(ours, plain), name


def test_step_w_gradient_is_autograd_of_the_full_distance():
    """Step 2 with non-trivial EMAs, a duplicated index, softmax: −Δw equals ∇_w of Eq. 2, all by autograd."""
    d_g, d_v, eps = 0.6, 0.8, 1e-3
    model = small_cnn().train()
    settings = LGASettings(
        optimizer="sgd",
        alpha_theta=0.0,
        alpha_w=1.0,
        eps_norm=eps,
        grad_ema_decay=d_g,
        norm_ema_decay=d_v,
        check_every=1,
    )
    state = init_lga(model, 10, K, settings)
    state.w.data = torch.randn(10, K, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    lga_step(model, state, images(5, 9), torch.arange(5) % K, images(6, 10), torch.tensor([0, 1, 2, 3, 4, 5]))
    raw_g, raw_v4, w_before = state.ema_grad_labeled.clone(), state.ema_v4.clone(), state.w.detach().clone()

    x_l, y_l, x_u, idx = images(5, 11), torch.tensor([4, 3, 2, 1, 0]), images(6, 12), torch.tensor([7, 2, 9, 2, 0, 5])
    lga_step(model, state, x_l, y_l, x_u, idx)

    params = list(model.parameters())  # unchanged: alpha_theta = 0
    g_l = flat(torch.autograd.grad(F.cross_entropy(model(x_l), y_l), params))
    target = (d_g * raw_g + (1 - d_g) * g_l) / (1 - d_g**2)
    w = w_before.clone().requires_grad_(True)
    y_u = torch.softmax(w[idx], -1)
    loss_u = -(y_u * torch.log_softmax(model(x_u), -1)).sum(-1).mean()
    v = target - flat(torch.autograd.grad(loss_u, params, create_graph=True))
    ema_v4 = (d_v * raw_v4 + (1 - d_v) * v.detach() ** 4) / (1 - d_v**2)
    distance = (v * v / (eps + ema_v4.sqrt())).sum()
    expected = torch.autograd.grad(distance, w)[0]
    torch.testing.assert_close(w_before - state.w.detach(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("labeled_weight", [0.0, 0.5])
def test_regression_with_gradient_descent_reproduces_lga_linear(labeled_weight):
    problem = gaussian_problem(4, 12, 9, seed=3)
    # A smooth regime: with α_w/√ε_norm large the map amplifies rounding errors exponentially.
    alpha_theta, alpha_w, eps = 0.05, 0.05, 0.1
    model = nn.Linear(4, 1, bias=False).double()
    nn.init.zeros_(model.weight)
    # §3.1: full batches, EMA(x) = x, gradient descent; Eq. 11 descends ½‖·‖², Algorithm 1 ‖·‖²: halve α_w.
    settings = LGASettings(
        task="regression",
        optimizer="sgd",
        alpha_theta=alpha_theta,
        alpha_w=alpha_w / 2,
        eps_norm=eps,
        grad_ema_decay=0.0,
        norm_ema_decay=0.0,
        labeled_weight=lambda i: labeled_weight,
        check_every=1,
    )
    state = init_lga(model, 9, 1, settings)
    reference = lga_linear.LGAState(torch.zeros(4, dtype=torch.float64), torch.zeros(9, dtype=torch.float64))
    for _ in range(60):
        lga_step(model, state, problem.X_l, problem.y_l[:, None], problem.X_u, torch.arange(9))
        reference = lga_linear.lga_step(reference, problem, alpha_theta, alpha_w, eps, labeled_weight)
        torch.testing.assert_close(model.weight.detach()[0], reference.theta, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(state.w.detach()[:, 0], reference.y_u, rtol=1e-12, atol=1e-14)
    assert reference.theta.abs().max() > 0.1 and reference.y_u.abs().max() > 0.5  # the iterates went somewhere


def test_distance_collapses_over_w_steps_with_theta_fixed():
    """Linear softmax model, p = 12 < n_u (k − 1) = 48: ‖g_ℓ − g_u‖ = 0 is attainable (Prop. 2's premise),
    and Adam on w alone (α_θ = 0) drives the normalized distance down by more than 100×."""
    gen = torch.Generator().manual_seed(0)
    x_l, y_l = torch.randn(12, 3, dtype=torch.float64, generator=gen), torch.arange(12) % 3
    x_u = torch.randn(24, 3, dtype=torch.float64, generator=gen)
    torch.manual_seed(0)
    model = nn.Linear(3, 3).double()
    state = init_lga(model, 24, 3, LGASettings(alpha_theta=0.0, alpha_w=0.05, check_every=1))
    distance = torch.stack([lga_step(model, state, x_l, y_l, x_u, torch.arange(24))["distance"] for _ in range(100)])
    assert distance[-5:].max() < 1e-2 * distance[0], distance[::10]


def test_imputed_labels_recover_well_separated_classes():
    """Two Gaussian blobs, 4 labels per class: argmax w labels the 40 unlabeled points correctly.
    (With the sign of the w-gradient flipped, every imputed label comes out wrong.)"""
    gen = torch.Generator().manual_seed(0)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0]], dtype=torch.float64)
    y_l, y_true = torch.arange(8) % 2, torch.arange(40) % 2
    x_l = centers[y_l] + 0.5 * torch.randn(8, 2, dtype=torch.float64, generator=gen)
    x_u = centers[y_true] + 0.5 * torch.randn(40, 2, dtype=torch.float64, generator=gen)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2)).double()
    state = init_lga(model, 40, 2, LGASettings(alpha_theta=1e-2, alpha_w=5e-2, check_every=50))
    for _ in range(60):
        lga_step(model, state, x_l, y_l, x_u, torch.arange(40))
    accuracy = (state.w.argmax(-1) == y_true).double().mean()
    assert accuracy >= 0.95, accuracy


def test_bad_settings_raise_config_error():
    for bad in (
        {"task": "ranking"},
        {"alpha_w": -1.0},
        {"grad_ema_decay": 1.0},
        {"optimizer": "rmsprop"},
        {"labeled_weight": 0.5},
        {"check_every": -1},
    ):
        with pytest.raises(ConfigError):
            LGASettings(**bad)
    with pytest.raises(ConfigError):
        PseudoLabelSettings(threshold=1.5)


def test_bad_inputs_raise_config_error_before_any_update():
    model = small_cnn().train()
    state = init_lga(model, 8, K, LGASettings(check_every=1))
    before = [p.detach().clone() for p in model.parameters()]
    x_l, y_l, x_u, idx = images(4, 15), torch.arange(4), images(3, 16), torch.arange(3)
    bad_calls = [
        (x_l, y_l[:3], x_u, idx),  # one label short
        (x_l, y_l.double(), x_u, idx),  # class labels as floats
        (x_l, y_l, x_u, idx[:2]),  # one index short
        (x_l, y_l, x_u, torch.tensor([0, 1, 8])),  # index out of range
        (x_l, y_l, x_u, idx.double()),  # float indices
    ]
    for args in bad_calls:
        with pytest.raises(ConfigError):
            lga_step(model, state, *args)
    with pytest.raises(ConfigError):  # model width 5, w width 3
        lga_step(model, init_lga(model, 8, 3), x_l, y_l, x_u, idx)
    assert state.step == 0 and not state.w.detach().any()
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))


def test_divergence_names_step_and_quantity():
    model = small_cnn().train()
    state = init_lga(model, 8, K, LGASettings(check_every=1))
    x_l, y_l, x_u, idx = images(4, 17), torch.arange(4), images(3, 18), torch.arange(3)
    lga_step(model, state, x_l, y_l, x_u, idx)
    with pytest.raises(DivergenceError, match="step 2: loss_labeled"):
        lga_step(model, state, x_l * float("nan"), y_l, x_u, idx)


def test_pseudo_label_divergence_is_stopped_by_the_loop_naming_step_and_quantity():
    """Step functions no longer check finiteness themselves; the training loop does at each evaluation."""
    from gradalign.data.ssl_data import SSLData
    from gradalign.training.protocols import OliverProtocol
    from gradalign.training.ssl import train_ssl

    x, y = images(4, 17).float(), torch.arange(4)
    bad = SSLData(
        x * float("inf"),
        y,
        torch.cat([x * float("inf"), images(4, 18).float()]),
        x,
        y,
        x,
        y,
        augment=lambda v, generator: v,
        num_classes=K,
    )
    torch.manual_seed(0)
    model = small_cnn().float()
    protocol = OliverProtocol(steps=3, batch_labeled=4, batch_unlabeled=4, eval_every=1)
    with pytest.raises(DivergenceError, match="Pseudo-Label diverged at step 1: loss = nan"):
        train_ssl(model, "pseudo_label", PseudoLabelSettings(), protocol, bad, seed=0)


def _step_function_run(model: nn.Module, settings: PseudoLabelSettings) -> SimpleNamespace:
    """What a step function reads (methods.semi_supervised): model, optimizer, settings, augment."""
    return SimpleNamespace(
        model=model,
        settings=settings,
        augment=lambda x: x,
        optimizer=torch.optim.Adam(model.parameters(), lr=settings.lr),
    )


def test_pseudo_label_loss_masks_and_reduces_as_oliver_et_al():
    """Both sums divided by the whole batch (4 + 6); threshold ~0 keeps every unlabeled row, 1.0 none."""
    x_l, y_l, x_u = images(4, 19), torch.arange(4), images(6, 20)
    twin = small_cnn().train()
    logits = twin(torch.cat([x_l, x_u])).detach()
    expected_l = F.cross_entropy(logits[:4], y_l, reduction="sum") / 10
    expected_u = F.cross_entropy(logits[4:], logits[4:].argmax(-1), reduction="sum") / 10
    ramp = 0.3
    model = small_cnn().train()
    out = pseudo_label_step(
        _step_function_run(model, PseudoLabelSettings(threshold=1e-6, weight=2.0)), ramp, x_l, y_l, x_u, torch.arange(6)
    )
    torch.testing.assert_close(out["loss_labeled"], expected_l)
    torch.testing.assert_close(out["loss_unlabeled"], expected_u)
    torch.testing.assert_close(out["loss"], expected_l + 2.0 * ramp * expected_u)
    terms, mask = pseudo_label_terms(logits[4:], 1e-6)
    assert mask.tolist() == [1.0] * 6
    torch.testing.assert_close(terms.sum() / 10, expected_u)
    model = small_cnn().train()
    out = pseudo_label_step(
        _step_function_run(model, PseudoLabelSettings(threshold=1.0)), 1.0, x_l, y_l, x_u, torch.arange(6)
    )
    terms, mask = pseudo_label_terms(logits[4:], 1.0)
    assert not mask.any() and not terms.any()
    assert out["loss_unlabeled"].item() == 0.0
    torch.testing.assert_close(out["loss"], expected_l)
