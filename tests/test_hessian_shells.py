"""Hessian-vector products, Lanczos and Eq. 13 alignment; the Eq. 14 shells data set (LGA §3.2)."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from gradalign.analysis.hessian import (
    alignment,
    flat_params,
    hvp_fn,
    model_hessian_top_eigenvector,
    top_eigenpair,
    unflatten,
)
from gradalign.data.shells import N_CLASSES, make_shells, sample_shells
from gradalign.errors import ConfigError


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _tiny_mlp(act: type[torch.nn.Module]) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), act(), torch.nn.Linear(4, 3)).double()
    x = torch.randn(16, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    return model, x, y


def _explicit_hessian(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    like = {k: p.detach() for k, p in model.named_parameters()}
    f = lambda w: torch.nn.functional.cross_entropy(functional_call(model, unflatten(w, like), (x,)), y)
    return torch.autograd.functional.hessian(f, flat_params(model))


def _sym_with_spectrum(evals: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(len(evals), len(evals), generator=gen, dtype=torch.float64))
    return q @ torch.diag(evals) @ q.T, q


@pytest.mark.parametrize("act", [torch.nn.Tanh, torch.nn.ReLU])
def test_hvp_matches_explicit_hessian(act):
    model, x, y = _tiny_mlp(act)
    H = _explicit_hessian(model, x, y)
    params = {k: p.detach() for k, p in model.named_parameters()}
    hvp = hvp_fn(lambda p: torch.nn.functional.cross_entropy(functional_call(model, p, (x,)), y), params)
    for seed in range(3):
        v = torch.randn(H.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        assert torch.allclose(hvp(v), H @ v, atol=1e-10, rtol=0)


def test_hvp_unused_parameter_gives_zero_block():
    params = {"a": torch.tensor([1.0, 2.0], dtype=torch.float64), "b": torch.ones(3, dtype=torch.float64)}
    hvp = hvp_fn(lambda p: (p["a"] ** 3).sum(), params)
    out = hvp(torch.ones(5, dtype=torch.float64))
    assert torch.allclose(out, torch.tensor([6.0, 12.0, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_lanczos_matches_eigh_on_random_symmetric_matrix():
    evals = torch.cat([torch.tensor([5.0]), torch.linspace(-2.0, 2.0, 39)]).double()
    A, _ = _sym_with_spectrum(evals, seed=1)
    w, V = torch.linalg.eigh(A)
    lam, q = top_eigenpair(
        lambda v: A @ v, 40, iters=30, generator=torch.Generator().manual_seed(0), dtype=torch.float64, tol=1e-12
    )
    assert abs(lam - float(w[-1])) < 1e-8
    assert abs(q.norm() - 1) < 1e-12
    assert min((q - V[:, -1]).norm(), (q + V[:, -1]).norm()) < 1e-6


def test_lanczos_returns_largest_algebraic_not_largest_magnitude():
    evals = torch.cat([torch.tensor([-10.0, 1.0]), torch.linspace(-1.0, 0.5, 18)]).double()
    A, Q = _sym_with_spectrum(evals, seed=2)
    lam, q = top_eigenpair(
        lambda v: A @ v, 20, iters=20, generator=torch.Generator().manual_seed(0), dtype=torch.float64, tol=1e-12
    )
    assert abs(lam - 1.0) < 1e-8
    assert abs(abs(float(q @ Q[:, 1])) - 1) < 1e-8

    v = torch.randn(20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for _ in range(200):
        v = A @ v
        v = v / v.norm()
    assert float(v @ A @ v) < -9  # power iteration finds −10 instead


def test_lanczos_early_exit_and_bad_input():
    calls = []
    A = torch.diag(torch.tensor([3.0, 3.0, 3.0], dtype=torch.float64))
    lam, q = top_eigenpair(lambda v: calls.append(1) or A @ v, 3, iters=20, dtype=torch.float64)
    assert abs(lam - 3.0) < 1e-12 and len(calls) == 1
    with pytest.raises(ConfigError):
        top_eigenpair(lambda v: v, 0)
    with pytest.raises(ConfigError):
        top_eigenpair(lambda v: v, 3, iters=0)


@pytest.mark.parametrize("act", [torch.nn.Tanh, torch.nn.ReLU])
def test_model_hessian_top_eigenvector_matches_explicit(act):
    model, x, y = _tiny_mlp(act)
    before = flat_params(model).clone()
    w, V = torch.linalg.eigh(_explicit_hessian(model, x, y))
    lam, q = model_hessian_top_eigenvector(
        model,
        lambda out: torch.nn.functional.cross_entropy(out, y),
        x,
        iters=V.shape[0],
        generator=torch.Generator().manual_seed(0),
    )
    assert q.dtype == torch.float64 and q.shape == (V.shape[0],)
    assert abs(lam - float(w[-1])) < 1e-8
    assert alignment(q, V[:, -1]) > 1 - 1e-8
    assert torch.equal(flat_params(model), before)


def test_model_hessian_leaves_batchnorm_stats_unchanged():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    model.train()
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    lam, q = model_hessian_top_eigenvector(
        model,
        lambda out: torch.nn.functional.cross_entropy(out, y),
        x,
        iters=10,
        generator=torch.Generator().manual_seed(0),
    )
    assert q.shape == flat_params(model).shape and torch.isfinite(q).all()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert model.training


def test_alignment():
    u = torch.tensor([1.0, 2.0, -3.0])
    assert alignment(u, u) == pytest.approx(1.0)
    assert alignment(-2.5 * u, u) == pytest.approx(1.0)
    assert alignment(u, torch.tensor([3.0, 0.0, 1.0])) == pytest.approx(0.0)
    v = torch.tensor([0.5, -1.0, 2.0])
    assert alignment(7.0 * u, 0.1 * v) == pytest.approx(alignment(u, v))
    assert 0 < alignment(u, v) < 1
    assert alignment(torch.zeros(3), u) == 0.0
    with pytest.raises(ConfigError):
        alignment(u, torch.ones(4))


def _allowed_radius(norms: torch.Tensor, labels: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    c = (labels + 1).double()
    inner = (norms >= c - 1 - eps) & (norms <= c - 0.75 + eps)
    outer = (norms >= c - 0.25 - eps) & (norms <= c + eps)
    return torch.where(c == 1, outer, torch.where(c == 5, inner, inner | outer))


def test_shells_sample_shapes_labels_and_radii():
    x, y = sample_shells(20000, 3, torch.Generator().manual_seed(0))
    assert x.shape == (20000, 3) and x.dtype == torch.float32 and y.shape == (20000,) and y.dtype == torch.int64
    assert set(y.tolist()) == set(range(N_CLASSES))
    norms = x.double().norm(dim=1)
    assert _allowed_radius(norms, y).all()
    for c in (1, 2, 3):  # both halves of the middle shells are used, about equally
        inner = (norms[y == c] < c + 0.5).double().mean()
        assert 0.45 < inner < 0.55
    assert (x / x.norm(dim=1, keepdim=True)).mean(0).abs().max() < 0.02


def test_make_shells_splits_determinism_and_errors():
    a = make_shells(5, 30, 40, 50, seed=3, dtype=torch.float64)
    assert (a.x_labeled.shape, a.x_unlabeled.shape, a.x_test.shape) == ((30, 5), (40, 5), (50, 5))
    assert a.y_unlabeled.shape == (40,) and a.x_test.dtype == torch.float64
    b = make_shells(5, 30, 40, 50, seed=3, dtype=torch.float64)
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    c = make_shells(5, 30, 40, 50, seed=4, dtype=torch.float64)
    assert not torch.equal(a.x_labeled, c.x_labeled)
    assert make_shells(5, 30, 0, 50, seed=3).x_unlabeled.shape == (0, 5)
    for bad in [dict(d=0), dict(n_labeled=0), dict(n_unlabeled=-1), dict(n_test=0)]:
        with pytest.raises(ConfigError):
            make_shells(**{**dict(d=5, n_labeled=30, n_unlabeled=40, n_test=50, seed=0), **bad})
