"""LGA §3.1: gradients against autograd and closed forms; the propositions and Figure 1 at smoke scale."""

import pytest
import torch

from gradalign.records import runner
from gradalign.methods.gradient_descent import gradient_descent_closed_form, gradient_descent_iterates
from gradalign.data.linear_regression import diagonal_problem, gaussian_problem
from gradalign.experiments.lga.linear import first_passage
from gradalign.methods.lga_linear import (
    LGAState,
    c_coefficients,
    diagonal_recurrence,
    gradient_residual,
    imputed_label_gradient,
    lga_step,
    normalized_sq_distance,
    run_lga,
)


@pytest.fixture(autouse=True)
def _run_cache(tmp_path, monkeypatch):
    """Experiments cache their sub-runs under $GRADALIGN_CACHE: a fresh folder per test."""
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))


def _autograd_label_gradient(problem, theta, y_u, eps):
    th = theta.clone().requires_grad_(True)
    y = y_u.clone().requires_grad_(True)
    g_l = torch.autograd.grad(0.5 * ((problem.y_l - problem.X_l @ th) ** 2).mean(), th)[0]
    g_u = torch.autograd.grad(0.5 * ((y - problem.X_u @ th) ** 2).mean(), th, create_graph=True)[0]
    return torch.autograd.grad(0.5 * normalized_sq_distance(g_l - g_u, eps), y)[0]


def test_imputed_label_gradient_matches_double_backward():
    problem = gaussian_problem(4, 12, 9, seed=3)
    theta, y_u = torch.randn(4, dtype=torch.float64), torch.randn(9, dtype=torch.float64)
    r = gradient_residual(theta, y_u, problem)
    for eps in (0.0, 1e-3, 0.5):
        ours = imputed_label_gradient(r, problem.X_u, eps)
        ref = _autograd_label_gradient(problem, theta, y_u, eps)
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_stop_gradient_matters():
    """Without the stop-gradient in the normalizer (Eq. 22) the gradient would differ."""
    problem = gaussian_problem(3, 10, 6, seed=4)
    theta, y_u = torch.randn(3, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    y = y_u.clone().requires_grad_(True)
    g_l = problem.X_l.T @ (problem.X_l @ theta - problem.y_l) / 10
    g_u = problem.X_u.T @ (problem.X_u @ theta - y) / 6
    v = g_l - g_u
    no_sg = torch.autograd.grad(0.5 * (v * v / (1e-3 + v**2)).sum(), y)[0]
    ours = imputed_label_gradient(gradient_residual(theta, y_u, problem), problem.X_u, 1e-3)
    assert (no_sg - ours).abs().max() > 1e-3


def test_eq7_closed_form_matches_gradient_descent():
    problem = gaussian_problem(6, 30, 1, seed=0)
    sim = gradient_descent_iterates(problem.X_l, problem.y_l, 0.05, 200)
    closed = gradient_descent_closed_form(problem.X_l, problem.y_l, 0.05, range(201))
    torch.testing.assert_close(sim, closed, rtol=0, atol=1e-11)


def test_diagonal_problem_has_the_requested_spectra():
    problem = diagonal_problem([0.5, 2.0, 3.0], [1.0, 0.25, 4.0], 1.5, n_l=7, n_u=5, seed=2)
    eye = torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(
        problem.X_l.T @ problem.X_l / 7, eye * torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
    )
    torch.testing.assert_close(
        problem.X_u.T @ problem.X_u / 5, eye * torch.tensor([1.0, 0.25, 4.0], dtype=torch.float64)
    )
    torch.testing.assert_close(problem.b, torch.full((3,), 1.5, dtype=torch.float64))


def test_full_algorithm_equals_per_coordinate_recurrence():
    lam_l, lam_u = [0.5, 1.0, 2.0], [2.0, 0.5, 1.0]
    problem = diagonal_problem(lam_l, lam_u, 1.0, n_l=6, n_u=4, seed=0)
    out = run_lga(problem, 3000, 1e-3, 1e-3, 1e-3, show_progress=False)
    rec = diagonal_recurrence(lam_l, lam_u, 1.0, 4, 3000, 1e-3, 1e-3, 1e-3)
    torch.testing.assert_close(c_coefficients(out["theta"], problem), rec, rtol=0, atol=1e-10)


def test_supervised_optimum_is_a_fixed_point_and_other_points_are_not():
    problem = gaussian_problem(3, 10, 8, seed=1)
    opt = problem.supervised_optimum()
    star = LGAState(opt, problem.X_u @ opt)
    moved = lga_step(star, problem, 1e-2, 1e-2, 1e-3)
    torch.testing.assert_close(moved.theta, opt, rtol=0, atol=1e-14)
    away = lga_step(LGAState(opt + 0.1, star.y_u), problem, 1e-2, 1e-2, 1e-3)
    assert (away.theta - opt - 0.1).abs().max() > 1e-6


def test_first_passage():
    c = torch.tensor([[0.0, 0.0], [0.6, 0.2], [0.95, 0.4]])
    assert first_passage(c, 0.5) == [1, None]


# The smoke presets, with lga.alg1's cost benchmark cut to one warm-up and one timed round (its ratio is a
# target beside the verdict, never asserted here): the benchmark's rounds dominate the file's time on two cores.
SMOKE_OVERRIDES: dict = {}


def test_smoke_experiments_reproduce_the_claims(store):
    for element_id in ("lga.alg1", "lga.prop1", "lga.fig1", "lga.prop2-3"):
        record = runner.run(element_id, "smoke", SMOKE_OVERRIDES.get(element_id), store=store)
        failed = [k for k, c in record["checks"].items() if not c["passed"]]
        assert not failed, (element_id, failed)


def test_seeded_runs_are_bit_identical(store, tmp_path, monkeypatch):
    from gradalign.records.results import ResultStore

    a = runner.run("lga.fig1", "smoke", {"steps": 3000}, store=store)
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "other cache"))  # nothing shared: computed twice
    b = runner.run("lga.fig1", "smoke", {"steps": 3000}, store=ResultStore(tmp_path / "other"))
    assert a["curves"] == b["curves"] and a["metrics"] == b["metrics"]
