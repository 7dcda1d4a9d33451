"""SGR's loss (`gradalign.methods.sgr`, Eq. 5-6 and Algorithm 1) and the fixed ETF head (`gradalign.models.etf`,
Eq. 7), against computations written independently of them (torch.func, closed forms), in float64."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad
from torch.nn import functional as F

from gradalign.methods.sgr import module_step, normalized, reconciliation_loss
from gradalign.models.etf import FixedETFHead, etf_matrix

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _block_and_head(seed: int = 0):
    torch.manual_seed(seed)
    block = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Tanh()).to(F64)  # a 4-D output: C·H·W features
    head = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5)).to(F64)
    return block, head


def _reference_sgr(now: torch.Tensor, pre: torch.Tensor, reduction: str) -> torch.Tensor:
    """Algorithm 1 written out: flatten per sample, divide by the l2 norm, squared error, mean or per-sample sum."""
    a = now.reshape(now.shape[0], -1)
    b = pre.reshape(pre.shape[0], -1)
    a = a / torch.sqrt((a * a).sum(1, keepdim=True))
    b = b / torch.sqrt((b * b).sum(1, keepdim=True))
    sq = (a - b) ** 2
    return sq.mean() if reduction == "mean" else sq.sum(1).mean()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_objective_and_its_gradient_match_torch_func(reduction):
    """module_step's L_k + λ L_k^SGR (Eq. 5) and its gradient in (θ_k, head) against nested torch.func.grad (no
    create_graph, no autograd.grad), to 1e-10 relative."""
    block, head = _block_and_head()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2, 4, 4, generator=gen, dtype=F64)
    y = torch.randint(5, (4,), generator=gen)
    delta_pre = torch.randn(4, 2, 4, 4, generator=gen, dtype=F64)
    lam = 0.7

    def local(b, h, z):
        return F.cross_entropy(functional_call(head, h, (functional_call(block, b, (z,)),)), y)

    def objective(b, h):
        delta_now = grad(local, argnums=2)(b, h, x)
        return local(b, h, x) + lam * _reference_sgr(delta_now, delta_pre, reduction)

    params = ({n: p.detach() for n, p in block.named_parameters()}, {n: p.detach() for n, p in head.named_parameters()})
    ref_b, ref_h = grad(objective, argnums=(0, 1))(*params)
    ref = torch.cat([t.flatten() for t in [*ref_b.values(), *ref_h.values()]])

    out, step = module_step(block, lambda o: F.cross_entropy(head(o), y), x, delta_pre, lam, reduction)
    ours = torch.autograd.grad(out, [*block.parameters(), *head.parameters()])
    ours = torch.cat([t.flatten() for t in ours])
    assert abs(float(out.detach()) - float(objective(*params))) < 1e-12
    assert float((ours - ref).norm() / ref.norm()) < 1e-10
    delta_now = grad(local, argnums=2)(*params, x)
    assert abs(float(step.loss_sgr) - float(_reference_sgr(delta_now, delta_pre, reduction))) < 1e-14


def test_the_stored_delta_is_the_output_gradient_and_everything_passed_on_is_detached():
    block, head = _block_and_head()
    x = torch.randn(3, 2, 4, 4, dtype=F64, requires_grad=True)
    y = torch.tensor([0, 1, 4])
    out, step = module_step(block, lambda o: F.cross_entropy(head(o), y), x, None, 1.0)
    z = block(x.detach())
    (expected,) = torch.autograd.grad(F.cross_entropy(head(z), y), z)
    assert torch.allclose(step.delta_out, expected, rtol=0, atol=1e-15)
    assert not step.output.requires_grad and not step.delta_out.requires_grad
    assert step.loss_sgr is None and torch.equal(out.detach(), step.loss_local)  # first module: L_k alone
    assert torch.autograd.grad(out, x, allow_unused=True)[0] is None  # the input was detached: gradient isolation


def test_lambda_zero_gives_the_local_loss_alone():
    block, head = _block_and_head()
    x, y = torch.randn(3, 2, 4, 4, dtype=F64), torch.tensor([0, 1, 2])
    out, step = module_step(block, lambda o: F.cross_entropy(head(o), y), x, torch.randn(3, 2, 4, 4, dtype=F64), 0.0)
    assert step.loss_sgr is None and torch.equal(out.detach(), step.loss_local)


def test_mean_and_sum_reductions_differ_by_the_feature_count():
    gen = torch.Generator().manual_seed(2)
    now, pre = torch.randn(5, 3, 4, 2, generator=gen, dtype=F64), torch.randn(5, 3, 4, 2, generator=gen, dtype=F64)
    mean, total = reconciliation_loss(now, pre, "mean"), reconciliation_loss(now, pre, "sum")
    assert math.isclose(float(total), 3 * 4 * 2 * float(mean), rel_tol=1e-13)
    assert math.isclose(float(mean), float(_reference_sgr(now, pre, "mean")), rel_tol=1e-13)


def test_parallel_gradients_give_zero_and_opposite_ones_the_largest_term():
    gen = torch.Generator().manual_seed(3)
    pre = torch.randn(6, 10, generator=gen, dtype=F64)
    scale = torch.rand(6, 1, generator=gen, dtype=F64) + 0.1  # a different positive factor per sample
    assert float(reconciliation_loss(scale * pre, pre)) < 1e-30
    assert float(reconciliation_loss(scale * pre, pre, "sum")) < 1e-30
    assert math.isclose(float(reconciliation_loss(-scale * pre, pre, "sum")), 4.0, rel_tol=1e-13)  # |u - (-u)|^2
    assert math.isclose(float(reconciliation_loss(-scale * pre, pre)), 4.0 / 10, rel_tol=1e-13)  # at most 4/D


def test_normalized_rows_have_unit_norm_and_zero_rows_stay_finite():
    rows = normalized(torch.cat([torch.randn(3, 2, 5, dtype=F64), torch.zeros(1, 2, 5, dtype=F64)]))
    assert torch.allclose(rows[:3].norm(dim=1), torch.ones(3, dtype=F64), atol=1e-15)
    assert torch.isfinite(rows).all() and float(rows[3].abs().max()) == 0.0


def test_reconciliation_loss_refuses_bad_input():
    a = torch.randn(2, 3)
    with pytest.raises(ValueError, match="unknown reduction"):
        reconciliation_loss(a, a, "max")
    with pytest.raises(ValueError, match="shapes differ"):
        reconciliation_loss(a, torch.randn(2, 4))


@pytest.mark.parametrize(("d", "K"), [(2, 2), (5, 3), (10, 10), (64, 10), (300, 100)])
def test_etf_columns_have_unit_norm_and_cosine_minus_one_over_k_minus_one(d, K):
    M = etf_matrix(d, K, torch.Generator().manual_seed(d + K), F64)
    gram = M.T @ M
    expected = torch.full((K, K), -1 / (K - 1), dtype=F64).fill_diagonal_(1.0)
    assert M.shape == (d, K)
    assert float((gram - expected).abs().max()) < 1e-13
    assert float(M.sum(1).norm()) < 1e-13 and int(torch.linalg.matrix_rank(M)) == K - 1


def test_etf_refuses_fewer_features_than_classes_and_fewer_than_two_classes():
    with pytest.raises(ValueError, match="feature size of at least 10"):
        etf_matrix(9, 10)
    with pytest.raises(ValueError, match="at least 2 classes"):
        etf_matrix(5, 1)
    with pytest.raises(ValueError):
        FixedETFHead(3, 4)


def test_fixed_etf_head_is_a_buffer_and_never_trained():
    head = FixedETFHead(12, 4, torch.Generator().manual_seed(0))
    assert list(head.parameters()) == [] and "weight" in dict(head.named_buffers()) and "weight" in head.state_dict()
    before = head.weight.clone()
    x = torch.randn(5, 3, 2, 2, requires_grad=True)  # flattened to 12 features
    logits = head(x)
    assert logits.shape == (5, 4)
    assert torch.allclose(logits, x.detach().flatten(1) @ before)
    F.cross_entropy(logits, torch.arange(5) % 4).backward()
    assert x.grad is not None and head.weight.grad is None and torch.equal(head.weight, before)
    optimizer_params = [p for p in head.parameters() if p.requires_grad]
    assert optimizer_params == []
