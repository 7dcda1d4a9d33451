"""SGR part, theory (notebook sgr/01): two-layer models, Proposition 3.5 (fixed ETF heads, one step with the
SGR term) and Theorem 3.3 (non-greedy local learning and its bound in ‖ε‖). Exact: float64, one thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu
from gradalign.experiments.sgr.exact import EXACT, EXACT_CHOICE, F64, NOTEBOOK, log_uniform, one_thread, rel_error


# --- Proposition 3.5 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TwoLayerConfig(Config):
    dims: tuple[int, int, int] = (8, 6, 6)  # d0, d1, d2 (our choice)
    classes: int = 4
    draws: int = 1000
    eta: float = 0.01  # one learning rate for both layers, as in the proof (our choice: η‖x0‖² ≈ 0.08, a small step)
    other_etas: tuple[float, ...] = (0.001, 0.1)  # the claim is checked at these too (our choice)
    sigma_low: float = 1e-3  # σ, the distance from L2^SGR = 0, log-uniform in [low, high] (our choice)
    sigma_high: float = 0.3
    small_sgr: float = 0.3  # "L2^SGR small": ‖δx1 − ∂L2/∂x1‖ ≤ 0.3 ‖δx1‖ (our choice)
    threshold: float = 0.95  # the claim holds if L̂2′ ≤ L2′ in at least 95 % of the qualifying draws (our choice)
    step_sizes: tuple[float, ...] = (1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # η‖x0‖², per draw (our choice)

    def validate(self) -> None:
        super().validate()
        require(self, "classes", self.classes >= 2, "must be >= 2")
        require(
            self, "dims", self.dims[0] >= 1 and min(self.dims[1:]) >= self.classes, "need d0 >= 1, d1, d2 >= classes"
        )
        require(self, "draws", self.draws >= 1, "must be >= 1")
        require(self, "eta", self.eta > 0, "must be > 0")
        require(self, "other_etas", all(e > 0 for e in self.other_etas), "must be > 0")
        require(self, "sigma_low", 0 < self.sigma_low <= self.sigma_high, "must be in (0, sigma_high]")
        require(self, "small_sgr", self.small_sgr > 0, "must be > 0")
        require(self, "threshold", 0 < self.threshold <= 1, "must be in (0, 1]")
        require(self, "step_sizes", len(self.step_sizes) >= 1, "must list at least one value of eta |x0|^2")
        require(self, "step_sizes", all(s > 0 for s in self.step_sizes), "must be > 0")


def prop35_checks(m: dict) -> dict[str, dict]:
    """`holds`: per learning rate, the fraction of qualifying draws (assumption true, L2^SGR small) where a descent
    step on L2 + L2^SGR (autograd) gives L̂2′ ≤ L2′, and the number of such draws. `first_order_error`: the largest
    gap, over draws, learning rates and the three readings of the SGR step, between dL̂2′/dλ at λ = 0 by autograd
    and its closed form (`analysis.local_theory.prop35_first_order`), relative to a bound on its size."""
    worst = min(h["fraction"] for h in m["holds"].values())
    enough = all(h["draws"] > 0 for h in m["holds"].values())
    return {
        "eq29_expansion": check(
            m["eq29_error"] < EXACT,
            m["eq29_error"],
            "max |x2′ − Eq. 29| < 1e-12",
            "x2′ after one step of each layer (Eq. 29)",
        ),
        "first_order_difference": check(
            m["first_order_error"] < EXACT,
            m["first_order_error"],
            "dL̂2′/dλ at λ = 0, autograd vs closed form, every draw, η and reading of the SGR step: "
            "max error / (η ‖G‖ ‖x1′‖) < 1e-12",
            "to first order in λ, L̂2′ − L2′ = λη (δx2′ᵀδx2)(rᵀx1′) with rᵀx1′ = δx1ᵀx1 − δx2ᵀx2 − η‖x0‖² rᵀδx1 "
            "(descent step, δx2 held constant; Eq. 27-30)",
        ),
        "eq30_gradient_up_to_sign": check(
            m["eq30_error"] < EXACT,
            m["eq30_error"],
            "−δx2 rᵀ (r = δx1 − θ2ᵀδx2) vs autograd of ½‖r‖² with δx2 held constant: max error < 1e-12",
            "Eq. 30's SGR term, whose descent step is +η δx2 rᵀ: Eq. 30 prints −η δx2 rᵀ",
        ),
        "sgr_step_lowers_l2": check(
            enough and worst >= m["threshold"],
            {f"η = {eta}": h for eta, h in m["holds"].items()},
            f"L̂2′ ≤ L2′ in ≥ {m['threshold']:.0%} of the draws where the assumption holds and the SGR term is small, "
            "at every η",
            "one descent step with the SGR term lowers the inference loss L2′ more than one without it (Prop. 3.5)",
        ),
    }


@one_thread
def two_layer(cfg: TwoLayerConfig, device) -> dict:
    from gradalign.analysis.local_theory import PROP35_VARIANTS, prop35_step, two_layer_draw
    from gradalign.methods.divergence import raise_if_exploded

    gen = torch.Generator().manual_seed(cfg.seed)
    etas = (cfg.eta, *cfg.other_etas)
    rows = {eta: [] for eta in etas}
    swept = {s: [] for s in cfg.step_sizes}  # the same draws at η = s / ‖x0‖²

    def step(draw, eta, k):
        row = prop35_step(draw, eta)
        losses = {
            "loss L2' without SGR": row["loss_without"],
            **{f"loss L2' with SGR ({v})": x for v, x in row["loss_with"].items()},
        }
        raise_if_exploded(f"sgr.prop35's step of draw {k} (eta = {eta:g})", 1, losses, "lower eta")
        return row

    for k in range(cfg.draws):
        draw = two_layer_draw(cfg.dims, cfg.classes, log_uniform(gen, cfg.sigma_low, cfg.sigma_high), gen)
        for eta in etas:
            rows[eta].append(step(draw, eta, k))
        x0_sq = float(draw.x0.square().sum())
        for s in cfg.step_sizes:
            swept[s].append(step(draw, s / x0_sq, k))
    conditions = {
        "assumption": lambda r: r["assumption"],
        "not_assumption": lambda r: not r["assumption"],
        "delta_condition": lambda r: r["delta_condition"],
        "assumption_and_delta_condition": lambda r: r["assumption"] and r["delta_condition"],
    }

    def share(rs, variant, condition) -> dict:
        chosen = [r for r in rs if condition(r) and r["relative_sgr"] <= cfg.small_sgr]
        holds = sum(r["loss_with"][variant] <= r["loss_without"] for r in chosen)
        return {"draws": len(chosen), "fraction": holds / max(len(chosen), 1)}

    table = {
        str(eta): {v: {c: share(rs, v, f) for c, f in conditions.items()} for v in PROP35_VARIANTS}
        for eta, rs in rows.items()
    }
    first = rows[cfg.eta]
    every = [r for rs in (*rows.values(), *swept.values()) for r in rs]
    m = {
        "eq29_error": max(r["eq29_error"] for rs in rows.values() for r in rs),
        "eq30_error": max(r["eq30_error"] for r in first),
        "first_order_error": max(r["first_order"][v]["error"] for r in every for v in SWEPT_VARIANTS),
        "holds": {eta: table[str(eta)]["autograd"]["assumption"] for eta in etas},
        "threshold": cfg.threshold,
    }
    metrics = {
        **m,
        "step_size_sweep": _sweep(swept, cfg.small_sgr),
        "holds": {str(eta): h for eta, h in m["holds"].items()},
        "fractions": table,
        "assumption_share": sum(r["assumption"] for r in first) / len(first),
        "assumption_implies_delta_condition": sum(r["delta_condition"] for r in first if r["assumption"])
        / max(1, sum(r["assumption"] for r in first)),
    }
    curves = {
        **{f"margin_{v}": [r["loss_without"] - r["loss_with"][v] for r in first] for v in ("autograd", "as_printed")},
        "decrease_without": [r["loss_before"] - r["loss_without"] for r in first],
        "assumption": [r["assumption"] for r in first],
        "relative_sgr": [r["relative_sgr"] for r in first],
    }
    return outcome(prop35_checks(m), metrics, curves)


SWEPT_VARIANTS = ("as_printed", "constant_delta", "autograd")
"""The readings of layer 2's SGR step shown against η‖x0‖²: Eq. 30 as printed, the descent step with δx2 held
constant (the proof's algebra), and the descent step by full autograd."""


def _sweep(swept: dict[float, list[dict]], small_sgr: float) -> dict:
    """Per η‖x0‖² (the same draws): the fraction of the qualifying draws (assumption true, SGR term small) and of
    all draws where L̂2′ ≤ L2′, per reading; how often the sign of the first-order term (λ = 0) gives the sign of
    L̂2′ − L2′ at λ = 1; and the median relative error of the issue's form of the first-order term (‖δx2‖² for
    δx2′ᵀδx2) against the exact one, which grows with η."""

    def fraction(rs, v):
        return sum(r["loss_with"][v] <= r["loss_without"] for r in rs) / max(len(rs), 1)

    out = {"step_size": list(swept), "qualifying_draws": [], "issue_form_error": []}
    out |= {f"{group}_{v}": [] for group in ("qualifying", "all", "sign_agrees") for v in SWEPT_VARIANTS}
    for rs in swept.values():
        chosen = [r for r in rs if r["assumption"] and r["relative_sgr"] <= small_sgr]
        out["qualifying_draws"].append(len(chosen))
        for v in SWEPT_VARIANTS:
            out[f"qualifying_{v}"].append(fraction(chosen, v))
            out[f"all_{v}"].append(fraction(rs, v))
            agree = [(r["loss_with"][v] - r["loss_without"]) * r["first_order"][v]["autograd"] > 0 for r in rs]
            out[f"sign_agrees_{v}"].append(sum(agree) / len(rs))
        exact = torch.tensor([r["first_order"]["constant_delta"]["closed_form"] for r in rs], dtype=F64)
        issue = torch.tensor([r["first_order"]["issue_form"] for r in rs], dtype=F64)
        out["issue_form_error"].append(float(((issue - exact).abs() / exact.abs().clamp_min(1e-300)).median()))
    return out


# --- Theorem 3.3 ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NonGreedyConfig(Config):
    problems: int = 3  # seeds of the data, the fixed map W and the start
    samples: int = 64
    d0: int = 4
    d: int = 3
    angles: tuple[float, ...] = (0.0, 0.1, 0.3, 0.6, 1.0)  # rotation of layer 1's head away from W (radians)
    rates: tuple[tuple[float, float], ...] = (
        (1.0, 0.5),
        (1.0, 0.05),
        (1.0, 1.0),
        (0.3, 0.5),
    )  # (η1 / its bound, η2's place in its range)
    steps: int = 2000
    kept: int = 60  # log-spaced iterations kept for the figure (all are checked)
    points: int = 20  # random points at which the constants are measured back

    def validate(self) -> None:
        super().validate()
        for name in ("problems", "samples", "d0", "d", "steps", "kept", "points"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "samples", self.samples > self.d0, "must exceed d0 (L2 must satisfy the PL condition)")
        require(self, "angles", len(self.angles) >= 1 and min(self.angles) >= 0, "must be >= 1 angles >= 0")
        ok = all(len(r) == 2 and 0 < r[0] <= 1 and 0 < r[1] <= 1 for r in self.rates)
        require(self, "rates", len(self.rates) >= 1 and ok, "must be (fraction, position) pairs in (0, 1]")


def thm33_checks(m: dict) -> dict[str, dict]:
    ratios = m["constant_ratios"]
    attained = max(abs(r["at_eigenvector"] - 1) for r in ratios.values())
    bounded = max(ratios[k]["largest"] for k in ("L", "L1", "L2")) <= 1 + 1e-9 and ratios["mu"]["smallest"] >= 1 - 1e-9
    return {
        "closed_form_gradients": check(
            m["gradient_error"] < EXACT,
            m["gradient_error"],
            "relative error vs autograd < 1e-12",
            "the model's gradients ∇θ1 L2, ∇θ2 L2, ∇θ1 L1 (closed form)",
        ),
        "constants_are_exact": check(
            bounded and attained < 1e-9,
            {k: r for k, r in ratios.items()},
            "measured quotient / constant <= 1 (>= 1 for mu) at random points, = 1 along the eigenvectors (1e-9)",
            "L, L1, L2 and μ from the Hessian are the best constants of Assumptions 3.1-3.2",
        ),
        "learning_rates_in_range": check(
            m["rates_ok"],
            m["rates_ok"],
            "every (eta1, eta2) inside Theorem 3.3's ranges",
            "the theorem's conditions hold",
        ),
        "eq3_bound_holds": check(
            m["eq3_violation"] <= EXACT,
            m["eq3_violation"],
            "max_i ([L2 - L2*]_(i+1) - (1 - alpha mu)[L2 - L2*]_i - alpha |eps_i|^2) / [L2 - L2*]_0 <= 1e-12",
            "every iteration obeys Eq. 3: the bound on the next L2 grows with ‖ε‖²",
        ),
        "eq4_bound_holds": check(
            m["eq4_violation"] <= EXACT,
            m["eq4_violation"],
            "max_i (L2 - L2* - Eq. 4's bound) / [L2 - L2*]_0 <= 1e-12",
            "the accumulated bound of Eq. 4 holds at every iteration",
        ),
        "eps_zero_converges_eps_nonzero_stalls": check(
            m["global_final_gap"] < 1e-10 and m["local_final_gap"] > 1e-3,
            {"global_bp": m["global_final_gap"], "local_smallest": m["local_final_gap"]},
            "final (L2 - L2*)/(L2 - L2*)_0: < 1e-10 with global BP (eps = 0), > 1e-3 for local learning, every angle",
            "with ε = 0 L2 converges to its optimum; with ε ≠ 0 it can stop short (§3.1)",
        ),
    }


def _worst_ratios(per_problem: list[dict]) -> dict:
    """The worst of `assumption_ratios` over problems: largest "largest", smallest "smallest", and the
    eigenvector quotient farthest from 1."""
    pick = {"largest": max, "smallest": min, "at_eigenvector": lambda v: max(v, key=lambda t: abs(t - 1))}
    return {k: {q: pick[q]([r[k][q] for r in per_problem]) for q in per_problem[0][k]} for k in per_problem[0]}


@one_thread
def non_greedy(cfg: NonGreedyConfig, device) -> dict:
    from gradalign.analysis import nongreedy as lt

    m = {"gradient_error": 0.0, "rates_ok": True, "global_final_gap": 0.0, "local_final_gap": math.inf}
    runs, problems, ratios, eq3, eq4 = [], [], [], [], []
    angles = [None, *cfg.angles]  # None: global BP
    for seed in range(cfg.seed, cfg.seed + cfg.problems):
        gen = torch.Generator().manual_seed(seed)
        p = lt.quadratic_two_layer(seed, cfg.samples, cfg.d0, cfg.d, [a or 0.0 for a in angles] * len(cfg.rates))
        c = lt.theorem33_constants(p)  # L2 and its constants do not depend on layer 1's head
        ratios.append(lt.assumption_ratios(p, c, cfg.points, gen))
        t1 = torch.randn(cfg.d, cfg.d0, generator=gen, dtype=F64, requires_grad=True)
        t2 = torch.randn(cfg.d, generator=gen, dtype=F64, requires_grad=True)
        for u in p.U[1 : len(angles)]:
            one = lt.QuadraticTwoLayer(p.x0, p.y, p.W, u)
            auto = [*torch.autograd.grad(one.loss2(t1, t2), (t1, t2)), torch.autograd.grad(one.loss1(t1), t1)[0]]
            ours = [*one.gradient2(t1.detach(), t2.detach()), one.gradient1(t1.detach())]
            m["gradient_error"] = max(m["gradient_error"], *map(rel_error, ours, auto))
        rates = [lt.theorem33_rates(c, fraction, position) for fraction, position in cfg.rates]
        for eta1, eta2, _ in rates:
            r = lt.theorem33_rate_ranges(c, eta1)
            m["rates_ok"] &= 0 < eta1 <= r["eta1_max"] and r["eta2_low"] < eta2 <= r["eta2_high"]
        per_run = [(rate, angle) for rate in rates for angle in angles]
        run = lt.local_training(
            p,
            [eta1 for (eta1, _, _), _ in per_run],
            [eta2 for (_, eta2, _), _ in per_run],
            [angle is None for _, angle in per_run],
            cfg.steps,
            seed,
        )
        alpha = torch.tensor([a for (_, _, a), _ in per_run], dtype=F64)[:, None]
        contraction = 1 - alpha * c["mu"]
        gap = run["loss"] - c["L2_star"]
        eps2 = run["eps"].square()
        bound3 = contraction * gap[:, :-1] + alpha * eps2  # Eq. 3's bound on gap[:, 1:]
        bound4 = [gap[:, 0]]
        for i in range(cfg.steps):
            bound4.append(contraction[:, 0] * bound4[-1] + alpha[:, 0] * eps2[:, i])
        bound4 = torch.stack(bound4[1:], 1)  # Eq. 4's bound on gap[:, 1:]
        eq3.append(float(((gap[:, 1:] - bound3) / gap[:, :1]).max()))
        eq4.append(float(((gap[:, 1:] - bound4) / gap[:, :1]).max()))
        final = gap[:, -1] / gap[:, 0]
        is_global = torch.tensor([angle is None for _, angle in per_run])
        m["global_final_gap"] = max(m["global_final_gap"], float(final[is_global].abs().max()))
        m["local_final_gap"] = min(m["local_final_gap"], float(final[~is_global].min()))
        problems.append({**c, "rates": [{"eta1": e1, "eta2": e2, "alpha": a} for e1, e2, a in rates]})
        kept = torch.unique(torch.logspace(0, math.log10(cfg.steps), cfg.kept, dtype=F64).round().long()) - 1
        for j, angle in enumerate(angles):  # the figure: the first pair of rates
            runs.append(
                {
                    "problem": seed,
                    "angle": angle,
                    "iteration": (kept + 1).tolist(),  # gaps after iteration i+1 and their bounds
                    "eps": run["eps"][j, kept].tolist(),
                    "gap": gap[j, 1:][kept].tolist(),
                    "eq3_bound": bound3[j, kept].tolist(),
                    "eq4_bound": bound4[j, kept].tolist(),
                    "gap_start": float(gap[j, 0]),
                    "final_gap": float(gap[j, -1]),
                    "final_eps": float(run["eps"][j, -1]),
                    "mu": c["mu"],
                }
            )
    m |= {"eq3_violation": max(eq3), "eq4_violation": max(eq4), "constant_ratios": _worst_ratios(ratios)}
    return outcome(thm33_checks(m), {**m, "problems": problems}, {"runs": runs})


EXPERIMENTS = [
    Experiment(
        "sgr.prop35",
        two_layer,
        TwoLayerConfig,
        same_as_cpu({}, {"draws": 150}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "draws": "d0, d1, d2 = 8, 6, 6, K = 4, x0 ~ N(0, I), theta2 at distance sigma (log-uniform in [1e-3, 0.3]) "
            "from the point where both layers' logits agree",
            "step": "one learning rate for both layers, η in {0.01, 0.001, 0.1}; λ = 1",
            "step sizes": "the same draws at η‖x0‖² in {0.001, 0.003, ..., 10} (η set per draw), for the figure "
            "of L̂2′ ≤ L2′ against η‖x0‖²; not a check",
            "small SGR term": "‖δx1 − θ2ᵀδx2‖ ≤ 0.3 ‖δx1‖",
            "threshold": "the claim holds if L̂2′ ≤ L2′ in ≥ 95% of the qualifying draws",
        },
        note="Eq. 30 writes the SGR step with the sign of an ascent on the SGR term; a descent step (what training "
        "does) lowers L2′ less than the plain step in most draws that meet the assumption at small η. With the "
        "printed sign the conclusion holds where δx2ᵀx2 ≤ δx1ᵀx1, which the stated assumption does not imply. "
        "As η‖x0‖² grows past 1, the η‖x0‖² rᵀδx1 term that the proof drops takes over, and the descent step "
        "comes to help in most draws (the page's sweep over η‖x0‖²).",
    ),
    Experiment(
        "sgr.thm33",
        non_greedy,
        NonGreedyConfig,
        same_as_cpu({}, {"problems": 1, "rates": ((1.0, 0.5),), "steps": 400, "points": 5}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "model": "x1 = Theta1 x0, x2 = W x1 + theta2 (W fixed, well conditioned), squared losses, n = 64, d0 = 4, "
            "d = 3: L2 is a quadratic, its constants are eigenvalues of its Hessian",
            "layer 1's head": "U = W R(angle), angle in {0, 0.1, 0.3, 0.6, 1} rad",
            "learning rates": "eta1 = 1 or 0.3 x its bound; eta2 at 0.05, 0.5 or 1 of its range",
        },
    ),
]
