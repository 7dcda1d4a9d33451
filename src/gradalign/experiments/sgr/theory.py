"""SGR part, theory (notebook sgr/01): the fixed ETF head (Eq. 7, Lemma C.2), the SGR objective (Eq. 5-6),
and Proposition 3.4. Propositions 3.5 and Theorem 3.3: `two_layer`; Eq. 35 and Table 8: `gradient_cost`.

All six are exact: small models in float64 on the CPU whatever the device, so `gpu` and `paper` equal `cpu`.
The models and measurements are in `gradalign.analysis.local_theory` and `gradalign.analysis.sgr_gradient_cost`;
each element's checks are built by a function of a dict of its measurements (`*_checks`), so that a test can
feed every check a failing case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.methods.sgr import SGR_LAMBDA
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu
from gradalign.experiments.sgr.exact import (
    EXACT,
    EXACT_CHOICE,
    F64,
    NOTEBOOK,
    chain_rules,
    teacher_data,
    log_uniform,
    one_thread,
    rel_error,
    log_slope,
)


# --- Eq. 7 and Lemma C.2 -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ETFConfig(Config):
    shapes: tuple[tuple[int, int], ...] = (
        (3, 2),
        (10, 10),
        (64, 10),
        (512, 100),
    )  # (d, K) of the heads whose geometry is measured
    draws: int = 1000  # Lemma C.2: random (K, d, x, y, η), η log-uniform in [0.01, 100] (our choice)
    max_classes: int = 10

    def validate(self) -> None:
        super().validate()
        ok = all(len(s) == 2 and s[0] >= s[1] >= 2 for s in self.shapes)
        require(self, "shapes", len(self.shapes) >= 1 and ok, "must be (d, K) pairs with d >= K >= 2")
        require(self, "draws", self.draws >= 1, "must be >= 1")
        require(self, "max_classes", self.max_classes >= 2, "must be >= 2")


def eq7_checks(m: dict) -> dict[str, dict]:
    gradient = max(m["gradient_error"], m["logit_error"])
    lemma = m["decrease_fraction"] == 1.0 and m["others_fall_fraction"] == 1.0 and m["min_label_gain"] > 0
    return {
        "unit_norm": check(
            m["norm_error"] < EXACT, m["norm_error"], "max_k | |m_k| - 1 | < 1e-12", "‖m_k‖ = 1 (Eq. 7)"
        ),
        "equiangular": check(
            m["cosine_error"] < EXACT,
            m["cosine_error"],
            "max_(i != j) |m_i^T m_j + 1/(K-1)| < 1e-12",
            "m_iᵀm_j = −1/(K−1) for i ≠ j (Eq. 7)",
        ),
        "simplex": check(
            m["sum_norm"] < EXACT and m["ranks_ok"],
            {"sum_norm": m["sum_norm"], "rank_K_minus_1": m["ranks_ok"]},
            "|sum_k m_k| < 1e-12 and rank K - 1, every shape",
            "the K class vectors form a centred simplex",
        ),
        "head_is_fixed": check(
            m["head_fixed"],
            m["head_fixed"],
            "a buffer, no parameter, unchanged by backward",
            "the ETF head is never trained (§3.3)",
        ),
        "lemma_gradient_and_logits": check(
            gradient < EXACT,
            gradient,
            "Eq. 26 vs autograd, and the logit changes vs Eq. 23-24 per unit eta: max error < 1e-12",
            "δx = −(1 − p_y) m_y + Σ over k ≠ y of p_k m_k; one step moves logit y by +K/(K−1)·(1 − p_y)·η, logit k by "
            "−K/(K−1)·p_k·η",
        ),
        "lemma_loss_decreases": check(
            lemma,
            {k: m[k] for k in ("decrease_fraction", "others_fall_fraction", "min_label_gain")},
            "in every draw, for eta in [0.01, 100]: CE falls, the label logit rises, every other logit falls",
            "a CE gradient step on a feature through a fixed ETF moves it towards its class vector (Lemma C.2)",
        ),
        "etf_geometry_is_needed": check(
            m["random_head_other_rise_fraction"] > 0,
            m["random_head_other_rise_fraction"],
            "with random unit-norm class vectors, some other logit rises in > 0 of the draws",
            "control: the exact logit moves of Eq. 23-24 come from the ETF's geometry",
        ),
    }


@one_thread
def etf_head(cfg: ETFConfig, device) -> dict:
    from torch.nn import functional as F

    from gradalign.analysis.local_theory import etf_geometry, lemma_c2_step
    from gradalign.models.etf import FixedETFHead, etf_matrix

    gen = torch.Generator().manual_seed(cfg.seed)
    geometry = [etf_geometry(etf_matrix(d, K, gen, F64)) for d, K in cfg.shapes]
    head = FixedETFHead(6, 4, gen)
    before, feature = head.weight.clone(), torch.randn(5, 6, generator=gen, requires_grad=True)
    F.cross_entropy(head(feature), torch.arange(5) % 4).backward()
    fixed = not list(head.parameters()) and "weight" in dict(head.named_buffers()) and feature.grad is not None
    rows, random_rows = [], []
    for _ in range(cfg.draws):
        K = int(torch.randint(2, cfg.max_classes + 1, (1,), generator=gen))
        d = K + int(torch.randint(0, K + 1, (1,), generator=gen))
        x = log_uniform(gen, 0.1, 3.0) * torch.randn(d, generator=gen, dtype=F64)
        y, eta = int(torch.randint(K, (1,), generator=gen)), log_uniform(gen, 1e-2, 1e2)
        rows.append(lemma_c2_step(etf_matrix(d, K, gen, F64), x, y, eta))
        other = torch.randn(d, K, generator=gen, dtype=F64)
        random_rows.append(lemma_c2_step(other / other.norm(dim=0), x, y, eta))
    m = {
        **{k: max(g[k] for g in geometry) for k in ("norm_error", "cosine_error", "sum_norm")},
        "ranks_ok": all(g["rank"] == K - 1 for g, (_, K) in zip(geometry, cfg.shapes)),
        "head_fixed": bool(fixed and torch.equal(head.weight, before)),
        "gradient_error": max(r["gradient_error"] for r in rows),
        "logit_error": max(r["logit_error"] for r in rows),
        "decrease_fraction": sum(r["loss_after"] < r["loss_before"] for r in rows) / len(rows),
        "others_fall_fraction": sum(r["other_logits_fall"] for r in rows) / len(rows),
        "min_label_gain": min(r["label_logit_gain"] for r in rows),
        "random_head_other_rise_fraction": sum(not r["other_logits_fall"] for r in random_rows) / len(rows),
        "random_head_loss_rise_fraction": sum(r["loss_after"] > r["loss_before"] for r in random_rows) / len(rows),
    }
    geometry = {f"{d}x{K}": g for g, (d, K) in zip(geometry, cfg.shapes)}
    return outcome(eq7_checks(m), {**m, "geometry": geometry})


# --- Eq. 5-6: the SGR objective under Algorithm 1 -------------------------------------------------------


@dataclass(frozen=True)
class ObjectiveConfig(Config):
    widths: tuple[int, ...] = (8, 16, 16, 16)  # input features, then each module's width: 3 modules (our choice)
    classes: int = 4
    batch: int = 32
    lam: float = SGR_LAMBDA  # λ of Eq. 5
    reduction: str = "mean"  # Algorithm 1's nn.MSELoss()
    lr: float = 0.1  # SGD, one optimizer per module as in Algorithm 1 (our choice of rate)
    steps: int = 100

    def validate(self) -> None:
        from gradalign.methods.sgr import REDUCTIONS

        super().validate()
        chain_rules(self, 2)
        require(self, "lam", self.lam > 0, "must be > 0")
        require(self, "reduction", self.reduction in REDUCTIONS, f"must be one of {REDUCTIONS}")
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "steps", self.steps >= 1, "must be >= 1")


def eq5_6_checks(m: dict) -> dict[str, dict]:
    start, with_lam, without = m["sgr_start"], m["sgr_end_with_lambda"], m["sgr_end_lambda_0"]
    lower = len(start) > 0 and all(a < b and a < s for a, b, s in zip(with_lam, without, start))
    return {
        "stored_delta_is_output_gradient": check(
            m["delta_error"] < EXACT,
            m["delta_error"],
            "max |delta stored - dL_k/dx_k (torch.func)| < 1e-12",
            "the δ module k stores for module k+1 is ∂L_k/∂x_k (§3.2, δ stored at every module)",
        ),
        "objective_matches_torch_func": check(
            m["sgr_error"] < EXACT and m["gradient_error"] < 1e-10,
            {"sgr": m["sgr_error"], "gradient": m["gradient_error"]},
            "L_k^SGR to 1e-12 and the gradient of Eq. 5 to 1e-10 (relative) against nested torch.func.grad",
            "module_step computes L_k + λ L_k^SGR (Eq. 5-6, Algorithm 1) and its gradient in θ_k",
        ),
        "gradient_isolation": check(
            m["leaks"] == 0 and len(m["sgr_gradient_norm"]) > 0 and min(m["sgr_gradient_norm"]) > 0,
            {"leaks": m["leaks"], "sgr_gradient_norm": m["sgr_gradient_norm"]},
            "no earlier parameter reached, the passed output detached, and lambda L^SGR moves theta_k",
            "the SGR term trains θ_k only: it does not break gradient isolation (§3.2)",
        ),
        "lambda_lowers_sgr": check(
            lower,
            {"start": start, "lambda": with_lam, "lambda_0": without},
            "after the last step every L_k^SGR (k >= 2) is below its lambda = 0 value and below its start",
            "training with λ > 0 reconciles neighbouring gradients (Eq. 5) on a fixed batch",
        ),
    }


@one_thread
def sgr_objective(cfg: ObjectiveConfig, device) -> dict:
    from gradalign.analysis.local_theory import algorithm1_pass, audit_first_pass, local_chain, sgr_terms
    from gradalign.methods.divergence import raise_if_exploded

    x0, y = teacher_data(torch.Generator().manual_seed(cfg.seed), cfg.batch, cfg.widths[0], cfg.classes)
    audit = audit_first_pass(*local_chain(cfg.widths, cfg.classes, cfg.seed), x0, y, cfg.lam)
    curves = {}
    for name, lam in (("sgr", cfg.lam), ("lambda_0", 0.0)):
        blocks, heads = local_chain(cfg.widths, cfg.classes, cfg.seed)  # the same initial weights for both
        opts = [torch.optim.SGD([*b.parameters(), *h.parameters()], lr=cfg.lr) for b, h in zip(blocks, heads)]
        terms, losses = [sgr_terms(blocks, heads, x0, y, cfg.reduction)], []
        for t in range(1, cfg.steps + 1):
            steps = algorithm1_pass(blocks, heads, opts, x0, y, lam, cfg.reduction)
            losses.append([float(s.loss_local) for s in steps])
            raise_if_exploded(f"sgr.eq5-6's Algorithm 1 ({name})", t, {"local losses": losses[-1]}, "lower lr")
            terms.append(sgr_terms(blocks, heads, x0, y, cfg.reduction))
        curves[name] = {"sgr": [list(t) for t in zip(*terms)], "loss": [list(t) for t in zip(*losses)]}
    m = {
        **audit,
        "sgr_start": [t[0] for t in curves["sgr"]["sgr"]],
        "sgr_end_with_lambda": [t[-1] for t in curves["sgr"]["sgr"]],
        "sgr_end_lambda_0": [t[-1] for t in curves["lambda_0"]["sgr"]],
        "loss_end_with_lambda": [t[-1] for t in curves["sgr"]["loss"]],
        "loss_end_lambda_0": [t[-1] for t in curves["lambda_0"]["loss"]],
    }
    return outcome(eq5_6_checks(m), m, curves)


# --- Proposition 3.4 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZeroSGRConfig(Config):
    widths: tuple[int, ...] = (8, 12, 12, 12, 12)  # input, then 4 modules (our choice)
    classes: int = 4
    batch: int = 16
    sigmas: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1)  # sizes of the perturbation of the heads (our choice)
    scales: tuple[float, ...] = (0.5, 2.0, 3.0)  # loss scale of modules 1..L-1 in the normalised case (our choice)

    def validate(self) -> None:
        super().validate()
        chain_rules(self, 2)
        s = self.sigmas
        ok = len(s) >= 2 and s[0] > 0 and list(s) == sorted(set(s))
        require(self, "sigmas", ok, "must be >= 2 strictly increasing values > 0")
        require(self, "scales", len(self.scales) == len(self.widths) - 2, "must give one scale per module but the last")
        require(self, "scales", all(v > 0 for v in self.scales), "must be > 0")


def prop34_checks(m: dict) -> dict[str, dict]:
    growing = all(a < b for a, b in zip(m["gap"], m["gap"][1:]))
    return {
        "zero_sgr_gives_global_gradients": check(
            m["sgr_at_zero"] < EXACT**2 and m["gap_at_zero"] < EXACT,
            {"sgr": m["sgr_at_zero"], "relative_gap": m["gap_at_zero"]},
            "sum_k |dL_k/dx_(k-1) - dL_(k-1)/dx_(k-1)|^2 < 1e-24 and |local - global| / |global| < 1e-12",
            "when every L_k^SGR = 0, ∇θ_k L_L = ∇θ_k L_k for all k < L (Proposition 3.4)",
        ),
        "normalised_zero_gives_parallel_updates": check(
            m["normalised_sgr"] < EXACT**2 and m["eq6_sgr"] > 1e-6 and m["ratio_error"] < EXACT,
            {k: m[k] for k in ("normalised_sgr", "eq6_sgr", "ratio_error", "min_cosine")},
            "Algorithm 1's term < 1e-24 while Eq. 6's > 1e-6, and |grad L_k - s_k grad L_L| / |grad L_k| < 1e-12",
            "with Algorithm 1's normalised term and loss scales s_k, zero means local = s_k × global updates",
        ),
        "gap_grows_with_sgr": check(
            growing and 0.9 <= m["slope"] <= 1.1,
            {"slope": m["slope"], "gap": m["gap"]},
            "the gap rises with sigma; log-log slope against sqrt(sum_k L_k^SGR) in [0.9, 1.1]",
            "the further from zero the SGR terms, the further local updates from global BP (linearly)",
        ),
    }


@one_thread
def zero_sgr(cfg: ZeroSGRConfig, device) -> dict:
    from gradalign.analysis.local_theory import local_and_global_gradients, local_chain, rest_of_network_heads

    gen = torch.Generator().manual_seed(cfg.seed)
    x0, y = teacher_data(gen, cfg.batch, cfg.widths[0], cfg.classes)
    blocks, heads = local_chain(cfg.widths, cfg.classes, cfg.seed)
    ones = [1.0] * len(blocks)

    def measure(sigma: float, weights) -> dict:
        r = local_and_global_gradients(
            blocks, rest_of_network_heads(blocks, heads[-1], sigma, cfg.seed), weights, x0, y
        )
        return {**r, "gap": rel_error(torch.cat(r["local"]), torch.cat(r["global"]))}

    def cosines(r) -> list[float]:
        return [float(a @ b / (a.norm() * b.norm())) for a, b in zip(r["local"], r["global"])]

    exact, scaled = measure(0.0, ones), measure(0.0, [*cfg.scales, 1.0])
    per_sample = [0.5 + torch.rand(cfg.batch, generator=gen, dtype=F64) for _ in cfg.scales]  # in [0.5, 1.5)
    reweighted = measure(0.0, [*per_sample, 1.0])
    family = [measure(s, ones) for s in cfg.sigmas]
    size, gap = [math.sqrt(r["sgr_eq6"]) for r in family], [r["gap"] for r in family]
    m = {
        "sgr_at_zero": exact["sgr_eq6"],
        "gap_at_zero": exact["gap"],
        "normalised_sgr": scaled["sgr_normalised"],
        "eq6_sgr": scaled["sgr_eq6"],
        "ratio_error": max(rel_error(s * g, loc) for loc, g, s in zip(scaled["local"], scaled["global"], cfg.scales)),
        "min_cosine": min(cosines(scaled)),
        "sigma": list(cfg.sigmas),
        "sgr_size": size,
        "sgr_normalised": [r["sgr_normalised"] for r in family],
        "gap": gap,
        "slope": log_slope(size, gap),
        "per_sample_weights": {"normalised_sgr": reweighted["sgr_normalised"], "cosines": cosines(reweighted)},
    }
    return outcome(prop34_checks(m), m)


EXPERIMENTS = [
    Experiment(
        "sgr.eq7",
        etf_head,
        ETFConfig,
        same_as_cpu({}, {"draws": 100}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "lemma draws": "K in 2..10, d in K..2K, x = s N(0, I) with s log-uniform in [0.1, 3], eta log-uniform in "
            "[0.01, 100]",
            "control": "the same draws with random unit-norm class vectors instead of the ETF",
        },
    ),
    Experiment(
        "sgr.eq5-6",
        sgr_objective,
        ObjectiveConfig,
        same_as_cpu({}, {"steps": 20}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "example": "3 modules Linear + tanh (8 -> 16 -> 16 -> 16), linear local heads, 4 classes, one fixed batch "
            "of 32 Gaussian inputs labelled by a random linear teacher, SGD lr 0.1, 100 steps",
        },
    ),
    Experiment(
        "sgr.prop34",
        zero_sgr,
        ZeroSGRConfig,
        same_as_cpu({}, {}),
        1,
        NOTEBOOK,
        choices={
            **EXACT_CHOICE,
            "zero case": "the local head of module k is a copy of modules k+1..L and the last head (4 modules of "
            "Linear + tanh, width 12, batch 16)",
            "perturbation": "every head parameter moved by sigma times a fixed random direction (scaled to its RMS)",
        },
    ),
]
