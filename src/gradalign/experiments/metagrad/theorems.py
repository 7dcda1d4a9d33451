"""Meta-gradient part, convergence (notebook metagrad/01): Lemma 1 and Theorem 1 (`metagrad.thm1`), Theorem 2
(`metagrad.thm2`). Exact: small models in float64 on the CPU, so `gpu` and `paper` equal `cpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu
from gradalign.experiments.exact import EXACT, EXACT_CHOICE, F64, log_slope, log_uniform, one_thread
from gradalign.experiments.metagrad.algorithm1 import NOTEBOOK


# --- Lemma 1 and Theorem 1 ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Theorem1Config(Config):
    draws: int = 200  # per model
    features: int = 5
    classes: int = 3
    labeled: int = 8
    unlabeled: int = 6
    hidden: int = 6  # the MLP's width
    alpha_range: tuple[float, float] = (0.05, 2.0)  # α log-uniform (our choice)
    above: tuple[float, ...] = (1, 3, 10, 30, 100, 300, 1000)  # β = multiple × the theorem's bound on β

    def validate(self) -> None:
        super().validate()
        require(self, "draws", self.draws >= 1, "must be >= 1")
        for name in ("features", "labeled", "unlabeled", "hidden"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")
        lo, hi = self.alpha_range
        require(self, "alpha_range", 0 < lo <= hi, "must be (low, high) with 0 < low <= high")
        require(self, "above", len(self.above) >= 1 and min(self.above) >= 1, "must list multiples >= 1")


def thm1_checks(m: dict) -> dict[str, dict]:
    return {
        "lemma1_linear": check(
            m["linear"]["max_ratio"] <= 1 + EXACT,
            m["linear"]["max_ratio"],
            "max over draws of ‖∇²H‖ / (4α²M²L₀) <= 1, M and L₀ exact (linear f, MSE labeled loss)",
            "∇_ỹ H is Lipschitz with L_t <= 4α_t²M²L₀ (Lemma 1)",
        ),
        "lemma1_mlp": check(
            m["mlp"]["max_ratio"] <= 1,
            m["mlp"]["max_ratio"],
            "max over draws of ‖∇²H‖ / (4α²M²L₀) <= 1, M at θ_t and L₀ on the visited segment (tanh MLP, KL)",
            "∇_ỹ H is Lipschitz with L_t <= 4α_t²M²L₀ (Lemma 1)",
        ),
        "decrease_linear": check(
            m["linear"]["decrease_fraction"] == 1.0,
            m["linear"]["decrease_fraction"],
            "G(θₜ₊₁) ≤ G(θₜ) in every draw with α²β < 1/(4M²L₀) (linear f)",
            "each step of Algorithm 1 decreases the labeled loss, whatever the unlabeled batch (Theorem 1)",
        ),
        "decrease_mlp": check(
            m["mlp"]["decrease_fraction"] == 1.0,
            m["mlp"]["decrease_fraction"],
            "G(θₜ₊₁) ≤ G(θₜ) in every draw with α²β < 1/(4M²L₀) (tanh MLP, estimated constants)",
            "each step of Algorithm 1 decreases the labeled loss, whatever the unlabeled batch (Theorem 1)",
        ),
    }


@one_thread
def theorem1(cfg: Theorem1Config, device) -> dict:
    from gradalign.analysis.metagrad_theory import (
        jacobian_norms,
        labeled_hessian_norm,
        lemma1_local,
        linear_problem,
        meta_hessian_norm,
        mlp_problem,
        step_outcome,
    )

    gen = torch.Generator().manual_seed(cfg.seed)
    result = {}
    for model in ("linear", "mlp"):
        ratios, below, above = [], [], {u: [] for u in cfg.above}
        for _ in range(cfg.draws):
            alpha = (
                log_uniform(gen, *cfg.alpha_range) if cfg.alpha_range[0] < cfg.alpha_range[1] else cfg.alpha_range[0]
            )
            if model == "linear":
                p = linear_problem(gen, cfg.features, cfg.classes, cfg.labeled, cfg.unlabeled)
                bound = 4 * alpha**2 * p.M**2 * p.L0
                y = p.f(p.params, p.x_u).detach()
                ratios.append(meta_hessian_norm(p, alpha, y) / bound)
            else:
                p = mlp_problem(gen, cfg.features, cfg.hidden, cfg.classes, cfg.labeled, cfg.unlabeled)
                M, L0 = float(jacobian_norms(p).max()), labeled_hessian_norm(p, p.params)
                lemma = lemma1_local(p, alpha, 1 / (4 * alpha**2 * M**2 * L0), points=3)  # L₀ at θ_t and beyond
                bound = lemma["bound"]  # >= the first estimate, so every β below it stays on the measured segment
                ratios.append(lemma["Lt"] / bound)
            beta_max = 1 / bound  # α²β < 1/(4M²L₀)  ⇔  β < 1/(4α²M²L₀)
            s = step_outcome(p, alpha, float(torch.rand(1, generator=gen, dtype=F64)) * beta_max)
            below.append(s["G_after"] <= s["G_before"])
            for u in cfg.above:
                s = step_outcome(p, alpha, u * beta_max)
                above[u].append(s["G_after"] > s["G_before"])
        result[model] = {
            "max_ratio": max(ratios),
            "median_ratio": float(torch.tensor(ratios).median()),
            "decrease_fraction": sum(below) / len(below),
            "increase_fraction_above": {str(u): sum(v) / len(v) for u, v in above.items()},
        }
    m = {**result, "multiples": list(cfg.above)}
    return outcome(thm1_checks(m), m)


# --- Theorem 2 ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Theorem2Config(Config):
    features: int = 6
    classes: int = 3
    labeled: int = 8
    extra_unlabeled: int = 24  # D^u = the labeled inputs + these (D^l ⊆ D^u)
    batch: int = 8  # B^u
    alpha: float = 0.5
    beta_fraction: float = 0.5  # β = this × 1/(4α²M²L₀), so D₁ = β(1 − fraction) > 0
    steps: int = 3000
    seeds: int = 5
    horizons: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000)

    def validate(self) -> None:
        super().validate()
        for name in ("features", "labeled", "batch", "steps", "seeds"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")
        require(self, "extra_unlabeled", self.extra_unlabeled >= 0, "must be >= 0")
        require(self, "batch", self.batch <= self.labeled + self.extra_unlabeled, "must be <= the unlabeled set's size")
        require(self, "alpha", self.alpha > 0, "must be > 0")
        require(self, "beta_fraction", 0 < self.beta_fraction < 1, "must be in (0, 1)")
        ok = (
            len(self.horizons) >= 2
            and list(self.horizons) == sorted(set(self.horizons))
            and self.horizons[-1] <= self.steps
        )
        require(self, "horizons", ok and self.horizons[0] >= 1, "must be >= 2 increasing values in 1..steps")


def thm2_checks(m: dict) -> dict[str, dict]:
    return {
        "bound_holds": check(
            all(v <= b for v, b in zip(m["min_sq_grad"], m["bound"])),
            {"worst_ratio": max(v / b for v, b in zip(m["min_sq_grad"], m["bound"]))},
            "mean over seeds of the smallest ‖∇G(θₜ)‖² over t ≤ T, at most C/√T at every T (C of Eq. 49)",
            "min_t E‖∇G(θ_t)‖² <= C/√T (Theorem 2)",
        ),
        "rate_at_least_theorem": check(
            m["slope"] <= -0.5,
            m["slope"],
            "log-log slope of the mean smallest ‖∇G‖² over t ≤ T, against T: at most −0.5",
            "Algorithm 1 reaches E‖∇G‖² <= ε in O(1/ε²) steps (Theorem 2)",
        ),
    }


@one_thread
def theorem2(cfg: Theorem2Config, device) -> dict:
    import math

    from gradalign.analysis.metagrad_theory import algorithm1_run, linear_problem

    gen = torch.Generator().manual_seed(cfg.seed)
    runs, constants = [], []
    for _ in range(cfg.seeds):
        p = linear_problem(gen, cfg.features, cfg.classes, cfg.labeled, 1)
        pool = torch.cat([p.x_l, torch.randn(cfg.extra_unlabeled, cfg.features, generator=gen, dtype=F64)])
        p.M = float(pool.norm(dim=1).max())  # the Jacobian bound over every input an unlabeled batch may hold
        beta = cfg.beta_fraction / (4 * cfg.alpha**2 * p.M**2 * p.L0)
        run = algorithm1_run(p, pool, cfg.batch, cfg.alpha, beta, cfg.steps, gen)
        D1 = beta - 4 * cfg.alpha**2 * beta**2 * p.M**2 * p.L0
        prob = cfg.batch / len(pool)  # P(x_k in the batch), uniform sampling without replacement
        C = cfg.batch * run["R"] / cfg.alpha * math.sqrt(run["G1"] / (prob * cfg.labeled * D1))  # Eq. 49
        runs.append(run["sq_grad_norms"])
        constants.append({"C": C, "D1": D1, "R": run["R"], "G1": run["G1"], "p": prob, "M": p.M, "L0": p.L0})
    sq = torch.tensor(runs, dtype=F64)  # (seeds, steps + 1)
    running_min = torch.cummin(sq, dim=1).values.mean(0)
    mins = [float(running_min[T - 1]) for T in cfg.horizons]
    C = max(c["C"] for c in constants)  # one constant for the mean: the largest seed's (a valid upper bound)
    m = {
        "horizons": list(cfg.horizons),
        "min_sq_grad": mins,
        "bound": [C / math.sqrt(T) for T in cfg.horizons],
        "slope": log_slope(list(cfg.horizons), mins),
        "constants": constants,
        "curve_min_sq_grad": running_min.tolist()[:: max(1, cfg.steps // 300)],
    }
    return outcome(thm2_checks(m), m)


EXPERIMENTS = [
    Experiment(
        "metagrad.thm1",
        theorem1,
        Theorem1Config,
        same_as_cpu({}, {"draws": 20}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "linear model": "f(x; W) = W^T x with the MSE labeled loss: M = max ||x_u||, L0 = 2 lambda_max(X^T X)/N^l "
            "exactly, H quadratic",
            "MLP": "tanh MLP 5 -> 6 -> 3, softmax, KL labeled loss; M = max_i ||J_theta f(x_i^u; theta_t)||_2 (the "
            "point Lemma 1's proof uses), L0 and L_t the largest Hessian norms at 3 points of the segment "
            "the proof visits",
            "draws": "alpha log-uniform in [0.05, 2], beta uniform in (0, 1) x the bound; above it: 1 to 1000 x "
            "the bound",
        },
    ),
    Experiment(
        "metagrad.thm2",
        theorem2,
        Theorem2Config,
        same_as_cpu({}, {"steps": 300, "seeds": 2, "horizons": (10, 30, 100, 300)}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "problem": "linear f with the MSE labeled loss (Eq. 45's form), 8 labeled of 6 features, D^u = the labeled "
            "inputs + 24 more, B^u = 8 drawn uniformly without replacement, alpha 0.5, beta half the bound",
            "C": "Eq. 49 with M, L0 exact, p = B^u/N^u, and R measured along the run (the largest ||f(x_k) - y_k||)",
        },
    ),
]
