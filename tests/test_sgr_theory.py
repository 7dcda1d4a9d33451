"""SGR's theory elements (`gradalign.experiments.sgr.theory`, notebook sgr/01): each experiment gives its
expected verdict at the smoke preset, every check that decides a verdict fails on a measurement made to fail
it, and bad configs are refused with a one-line ConfigError before any compute."""

from __future__ import annotations

import math

import pytest
import torch

from gradalign.analysis import local_theory as lt
from gradalign.analysis import nongreedy
from gradalign.errors import ConfigError
from gradalign.experiments.base import outcome
from gradalign.experiments.sgr import gradient_cost, theory, two_layer

EXPERIMENTS = {e.id: e for e in theory.EXPERIMENTS + two_layer.EXPERIMENTS + gradient_cost.EXPERIMENTS}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


# --- each experiment at smoke --------------------------------------------------------------------------

EXPECTED = {
    "sgr.eq7": (
        "reproduced",
        [
            "unit_norm",
            "equiangular",
            "simplex",
            "head_is_fixed",
            "lemma_gradient_and_logits",
            "lemma_loss_decreases",
            "etf_geometry_is_needed",
        ],
    ),
    "sgr.eq5-6": (
        "reproduced",
        ["stored_delta_is_output_gradient", "objective_matches_torch_func", "gradient_isolation", "lambda_lowers_sgr"],
    ),
    "sgr.prop34": (
        "reproduced",
        ["zero_sgr_gives_global_gradients", "normalised_zero_gives_parallel_updates", "gap_grows_with_sgr"],
    ),
    # Proposition 3.5 fails for a descent step on L2^SGR (Eq. 30 prints the step with the opposite sign)
    "sgr.prop35": (
        "not reproduced",
        ["eq29_expansion", "first_order_difference", "eq30_gradient_up_to_sign", "sgr_step_lowers_l2"],
    ),
    "sgr.thm33": (
        "reproduced",
        [
            "closed_form_gradients",
            "constants_are_exact",
            "learning_rates_in_range",
            "eq3_bound_holds",
            "eq4_bound_holds",
            "eps_zero_converges_eps_nonzero_stalls",
        ],
    ),
    "sgr.tab8": (
        "reproduced",
        ["eq35_matches_autograd", "library_uses_full_autograd", "table8_counts", "cost_scales_as_3mn"],
    ),
}


def test_every_experiment_is_listed():
    assert set(EXPECTED) == set(EXPERIMENTS)
    assert all(e.notebook == "notebooks/sgr/01_theory.ipynb" for e in EXPERIMENTS.values())


@pytest.mark.parametrize("exp_id", list(EXPECTED))
def test_smoke_gives_the_expected_verdict(exp_id):
    exp = EXPERIMENTS[exp_id]
    result = exp.run(exp.resolve("smoke"), "cpu")
    status, names = EXPECTED[exp_id]
    assert list(result["checks"]) == names
    assert result["verdict"]["status"] == status, result["verdict"]
    if exp_id == "sgr.prop35":
        assert result["verdict"]["failed"] == ["sgr_step_lowers_l2"]
        as_printed = result["metrics"]["fractions"]["0.001"]["as_printed"]["assumption_and_delta_condition"]
        assert as_printed["fraction"] >= 0.95  # the proof's own algebra holds where its condition holds


# --- every verdict-deciding check fed a failing case ---------------------------------------------------

RATIO = {"largest": 1.0, "at_eigenvector": 1.0}
PASSING = {
    theory.eq7_checks: {
        "norm_error": 1e-15,
        "cosine_error": 3e-16,
        "sum_norm": 1e-14,
        "ranks_ok": True,
        "head_fixed": True,
        "gradient_error": 1e-15,
        "logit_error": 3e-14,
        "decrease_fraction": 1.0,
        "others_fall_fraction": 1.0,
        "min_label_gain": 1e-6,
        "random_head_other_rise_fraction": 0.7,
    },
    theory.eq5_6_checks: {
        "delta_error": 0.0,
        "sgr_error": 0.0,
        "gradient_error": 2e-16,
        "leaks": 0,
        "sgr_gradient_norm": [0.15, 0.24],
        "sgr_start": [0.157, 0.137],
        "sgr_end_with_lambda": [0.008, 0.010],
        "sgr_end_lambda_0": [0.014, 0.025],
    },
    theory.prop34_checks: {
        "sgr_at_zero": 0.0,
        "gap_at_zero": 0.0,
        "normalised_sgr": 1e-32,
        "eq6_sgr": 0.03,
        "ratio_error": 3e-16,
        "min_cosine": 1.0,
        "gap": [1.6e-4, 1.6e-3, 1.6e-2, 0.16],
        "slope": 1.0,
    },
    two_layer.prop35_checks: {
        "eq29_error": 5e-15,
        "first_order_error": 2e-13,
        "eq30_error": 0.0,
        "holds": {0.01: {"draws": 500, "fraction": 0.97}, 0.1: {"draws": 500, "fraction": 0.96}},
        "threshold": 0.95,
    },
    two_layer.thm33_checks: {
        "gradient_error": 0.0,
        "constant_ratios": {"L": RATIO, "L1": RATIO, "L2": RATIO, "mu": {"smallest": 1.0, "at_eigenvector": 1.0}},
        "rates_ok": True,
        "eq3_violation": 1e-17,
        "eq4_violation": 3e-18,
        "global_final_gap": 6e-18,
        "local_final_gap": 0.027,
    },
    gradient_cost.tab8_checks: {
        "linear_loss_error": 0.0,
        "held_error": 0.0,
        "library_full_error": 5e-15,
        "library_vs_held": 0.02,
        "counts_ok": True,
        "fit_mn": 3.0,
        "fit_m": 1.0,
        "flop_counter_is_4mn": True,
    },
}


def _ratios(**changes):
    base = dict(PASSING[two_layer.thm33_checks]["constant_ratios"])
    for key, value in changes.items():
        name, field = key.split("__")
        base[name] = {**base[name], field: value}
    return base


FAILING = [
    (theory.eq7_checks, "unit_norm", {"norm_error": 1e-9}),
    (theory.eq7_checks, "equiangular", {"cosine_error": 1e-9}),
    (theory.eq7_checks, "simplex", {"sum_norm": 1e-6}),
    (theory.eq7_checks, "simplex", {"ranks_ok": False}),
    (theory.eq7_checks, "head_is_fixed", {"head_fixed": False}),
    (theory.eq7_checks, "lemma_gradient_and_logits", {"gradient_error": 1e-8}),
    (theory.eq7_checks, "lemma_gradient_and_logits", {"logit_error": 1e-8}),
    (theory.eq7_checks, "lemma_loss_decreases", {"decrease_fraction": 0.999}),
    (theory.eq7_checks, "lemma_loss_decreases", {"others_fall_fraction": 0.99}),
    (theory.eq7_checks, "lemma_loss_decreases", {"min_label_gain": 0.0}),
    (theory.eq7_checks, "etf_geometry_is_needed", {"random_head_other_rise_fraction": 0.0}),
    (theory.eq5_6_checks, "stored_delta_is_output_gradient", {"delta_error": 1e-9}),
    (theory.eq5_6_checks, "objective_matches_torch_func", {"sgr_error": 1e-9}),
    (theory.eq5_6_checks, "objective_matches_torch_func", {"gradient_error": 1e-8}),
    (theory.eq5_6_checks, "gradient_isolation", {"leaks": 1}),
    (theory.eq5_6_checks, "gradient_isolation", {"sgr_gradient_norm": [0.15, 0.0]}),
    (theory.eq5_6_checks, "lambda_lowers_sgr", {"sgr_end_with_lambda": [0.008, 0.030]}),  # above lambda = 0
    (theory.eq5_6_checks, "lambda_lowers_sgr", {"sgr_end_with_lambda": [0.008, 0.2], "sgr_end_lambda_0": [0.014, 0.3]}),
    (theory.prop34_checks, "zero_sgr_gives_global_gradients", {"sgr_at_zero": 1e-20}),
    (theory.prop34_checks, "zero_sgr_gives_global_gradients", {"gap_at_zero": 1e-9}),
    (theory.prop34_checks, "normalised_zero_gives_parallel_updates", {"normalised_sgr": 1e-20}),
    (theory.prop34_checks, "normalised_zero_gives_parallel_updates", {"eq6_sgr": 0.0}),  # the case shows nothing
    (theory.prop34_checks, "normalised_zero_gives_parallel_updates", {"ratio_error": 1e-6}),
    (theory.prop34_checks, "gap_grows_with_sgr", {"slope": 0.5}),
    (theory.prop34_checks, "gap_grows_with_sgr", {"gap": [1.6e-4, 1.6e-3, 1.5e-3, 0.16]}),
    (two_layer.prop35_checks, "eq29_expansion", {"eq29_error": 1e-9}),
    (two_layer.prop35_checks, "first_order_difference", {"first_order_error": 1e-6}),
    (two_layer.prop35_checks, "eq30_gradient_up_to_sign", {"eq30_error": 1e-9}),
    (two_layer.prop35_checks, "sgr_step_lowers_l2", {"holds": {0.01: {"draws": 500, "fraction": 0.2}}}),
    (
        two_layer.prop35_checks,
        "sgr_step_lowers_l2",
        {"holds": {0.01: {"draws": 500, "fraction": 0.97}, 0.1: {"draws": 500, "fraction": 0.9}}},
    ),
    (two_layer.prop35_checks, "sgr_step_lowers_l2", {"holds": {0.01: {"draws": 0, "fraction": 1.0}}}),
    (two_layer.thm33_checks, "closed_form_gradients", {"gradient_error": 1e-9}),
    (two_layer.thm33_checks, "constants_are_exact", {"constant_ratios": _ratios(L__largest=1.01)}),  # L too small
    (two_layer.thm33_checks, "constants_are_exact", {"constant_ratios": _ratios(mu__smallest=0.99)}),  # mu too large
    (two_layer.thm33_checks, "constants_are_exact", {"constant_ratios": _ratios(L1__at_eigenvector=0.9)}),  # not tight
    (two_layer.thm33_checks, "learning_rates_in_range", {"rates_ok": False}),
    (two_layer.thm33_checks, "eq3_bound_holds", {"eq3_violation": 1e-6}),
    (two_layer.thm33_checks, "eq4_bound_holds", {"eq4_violation": 1e-6}),
    (two_layer.thm33_checks, "eps_zero_converges_eps_nonzero_stalls", {"global_final_gap": 1e-5}),
    (two_layer.thm33_checks, "eps_zero_converges_eps_nonzero_stalls", {"local_final_gap": 1e-5}),
    (gradient_cost.tab8_checks, "eq35_matches_autograd", {"linear_loss_error": 1e-9}),
    (gradient_cost.tab8_checks, "eq35_matches_autograd", {"held_error": 1e-9}),
    (gradient_cost.tab8_checks, "library_uses_full_autograd", {"library_full_error": 1e-6}),
    (gradient_cost.tab8_checks, "library_uses_full_autograd", {"library_vs_held": 1e-9}),
    (gradient_cost.tab8_checks, "table8_counts", {"counts_ok": False}),
    (gradient_cost.tab8_checks, "cost_scales_as_3mn", {"fit_mn": 2.5}),
    (gradient_cost.tab8_checks, "cost_scales_as_3mn", {"fit_m": 0.0}),
    (gradient_cost.tab8_checks, "cost_scales_as_3mn", {"flop_counter_is_4mn": False}),
]


@pytest.mark.parametrize("fn", list(PASSING), ids=lambda f: f.__name__)
def test_passing_measurements_pass_every_check(fn):
    checks = fn(PASSING[fn])
    assert all(c["passed"] for c in checks.values()), [k for k, c in checks.items() if not c["passed"]]
    assert outcome(checks)["verdict"]["status"] == "reproduced"


@pytest.mark.parametrize(("fn", "name", "changes"), FAILING, ids=lambda v: getattr(v, "__name__", str(v)))
def test_failing_measurement_fails_that_check_only(fn, name, changes):
    checks = fn({**PASSING[fn], **changes})
    assert [k for k, c in checks.items() if not c["passed"]] == [name]
    assert outcome(checks)["verdict"] == {
        "status": "not reproduced",
        "failed": [name],
        "unmet": [],
        "within_noise": [],
        "unstable": [],
    }
    assert outcome(checks, scope="reduced")["verdict"]["status"] == "not reproduced"


def test_every_check_has_a_failing_case():
    failing = {(fn, name) for fn, name, _ in FAILING}
    every = {(fn, name) for fn, m in PASSING.items() for name in fn(m)}
    assert every == failing
    assert sorted(name for _, names in EXPECTED.values() for name in names) == sorted(name for _, name in every)


# --- bad configs ---------------------------------------------------------------------------------------

BAD = [
    ("sgr.eq7", {"shapes": [[3, 4]]}, "d >= K"),
    ("sgr.eq7", {"draws": 0}, "draws must be >= 1"),
    ("sgr.eq7", {"draws": "many"}, "draws"),
    ("sgr.eq5-6", {"widths": [8, 16]}, "widths must list"),
    ("sgr.eq5-6", {"lam": 0.0}, "lam must be > 0"),
    ("sgr.eq5-6", {"reduction": "max"}, "reduction must be one of"),
    ("sgr.eq5-6", {"steps": 0}, "steps must be >= 1"),
    ("sgr.eq5-6", {"lr": float("nan")}, "lr"),
    ("sgr.prop34", {"sigmas": [1e-2, 1e-3]}, "strictly increasing"),
    ("sgr.prop34", {"scales": [1.0]}, "one scale per module"),
    ("sgr.prop34", {"scales": [1.0, -1.0, 2.0]}, "scales must be > 0"),
    ("sgr.prop35", {"dims": [8, 2, 6]}, "d1, d2 >= classes"),
    ("sgr.prop35", {"threshold": 1.5}, "threshold must be in (0, 1]"),
    ("sgr.prop35", {"sigma_low": 1.0}, "sigma_low must be in (0, sigma_high]"),
    ("sgr.prop35", {"other_etas": [-0.1]}, "other_etas must be > 0"),
    ("sgr.prop35", {"step_sizes": [0.1, 0.0]}, "step_sizes must be > 0"),
    ("sgr.prop35", {"step_sizes": []}, "step_sizes must list"),
    ("sgr.thm33", {"samples": 3}, "samples must exceed d0"),
    ("sgr.thm33", {"rates": [[1.5, 0.5]]}, "rates must be"),
    ("sgr.thm33", {"angles": [-0.1]}, "angles must be"),
    ("sgr.tab8", {"sizes": [[4, 4]]}, "sizes must be >= 2"),
    ("sgr.tab8", {"classes": 1}, "classes must be >= 2"),
]


@pytest.mark.parametrize(("exp_id", "overrides", "fragment"), BAD)
def test_bad_config_is_a_one_line_config_error(exp_id, overrides, fragment):
    with pytest.raises(ConfigError) as err:
        EXPERIMENTS[exp_id].resolve("smoke", overrides)
    assert fragment in str(err.value) and "\n" not in str(err.value)


# --- the models behind the checks ---------------------------------------------------------------------


def test_prop35_draw_at_zero_sigma_has_no_sgr_term_and_every_variant_equals_the_plain_step():
    """σ = 0: M2ᵀθ2 = M1ᵀ, so both layers have the same logits and ∂L2/∂x1 = δx1; the SGR gradient vanishes."""
    draw = lt.two_layer_draw((8, 6, 6), 4, 0.0, torch.Generator().manual_seed(5))
    step = lt.prop35_step(draw, 0.01)
    assert step["relative_sgr"] < 1e-12
    assert all(abs(v - step["loss_without"]) < 1e-12 for v in step["loss_with"].values())


def test_prop35_sign_of_the_first_order_effect():
    """To first order in η, L̂2′ − L2′ = +η ‖δx2‖² rᵀx1 for the descent step (δx2 held constant), the opposite
    for Eq. 30 as printed: under δx2ᵀx2 ≤ δx1ᵀx1 (rᵀx1 ≥ 0) the printed step helps and the descent step hurts."""
    gen = torch.Generator().manual_seed(11)
    tested = 0
    for _ in range(20):
        step = lt.prop35_step(lt.two_layer_draw((8, 6, 6), 4, 0.05, gen), 1e-5)
        if step["delta_condition"]:
            assert step["loss_with"]["constant_delta"] >= step["loss_without"] >= step["loss_with"]["as_printed"]
            tested += 1
    assert tested >= 5


@pytest.mark.parametrize("step_size", [1e-3, 1.0, 10.0])
def test_prop35_first_order_term_matches_autograd_and_its_shortcuts_do_not(step_size):
    """dL̂2′/dλ at λ = 0 (autograd through the step) equals the closed form of `prop35_first_order` for each
    reading of the SGR step, at small and large η‖x0‖². Failing cases, the same derivative written two wrong ways
    once η‖x0‖² is not small: without the η‖x0‖² rᵀδx1 term that the proof drops, and the δx2-constant form used
    for the autograd reading (missing its H2θ2r term)."""
    gen = torch.Generator().manual_seed(3)
    worst, dropped, no_hessian = 0.0, 0.0, 0.0
    for _ in range(30):
        draw = lt.two_layer_draw((8, 6, 6), 4, 0.2, gen)
        x0_sq = float(draw.x0.square().sum())
        eta = step_size / x0_sq
        first = lt.prop35_step(draw, eta)["first_order"]
        worst = max(worst, *(first[v]["error"] for v in ("autograd", "constant_delta", "as_printed")))
        x1 = draw.theta1 @ draw.x0
        x2 = draw.theta2 @ x1
        dx1 = lt.ce_feature_gradient(draw.M1, x1, draw.y)
        dx2 = lt.ce_feature_gradient(draw.M2, x2, draw.y)
        r = dx1 - draw.theta2.T @ dx2
        exact = first["constant_delta"]["autograd"]
        kept, term = float(dx1 @ x1 - dx2 @ x2), eta * x0_sq * float(r @ dx1)
        short = exact * kept / (kept - term)  # η (δx2′ᵀδx2) (δx1ᵀx1 − δx2ᵀx2): the term dropped
        dropped = max(dropped, abs(short - exact) / abs(exact))
        no_hessian = max(no_hessian, abs(first["autograd"]["autograd"] - exact) / abs(exact))
    assert worst < 1e-12
    if step_size >= 1:
        assert dropped > 0.1 and no_hessian > 0.1


def test_quadratic_model_constants_match_a_closed_form_when_w_is_orthogonal():
    """With W orthogonal, L2's Hessian is I_d ⊗ E[[x0; 1][x0; 1]ᵀ] up to a rotation: its eigenvalues are those of
    the second-moment matrix of [x0, 1], and L2 = λ_max of the θ2 block = 1."""
    p = nongreedy.quadratic_two_layer(3, 40, 3, 2)
    q, _ = torch.linalg.qr(torch.randn(2, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    p = nongreedy.QuadraticTwoLayer(p.x0, p.y, q, p.U)
    c = nongreedy.theorem33_constants(p)
    design = torch.cat([p.x0, torch.ones(40, 1, dtype=torch.float64)], 1)
    moments = torch.linalg.eigvalsh(design.T @ design / 40)
    assert math.isclose(c["L"], float(moments[-1]), rel_tol=1e-12)
    assert math.isclose(c["mu"], 2 * float(moments[0]), rel_tol=1e-10)
    assert math.isclose(c["L1"], float(torch.linalg.eigvalsh(p.x0.T @ p.x0 / 40)[-1]), rel_tol=1e-12)
    assert math.isclose(c["L2"], 1.0, rel_tol=1e-12)
