"""IsoLoss part (Halvagal, Laborieux & Zenke 2022), notebook isoloss/01: the predictor and the decoupled
loss (Eq. 1-2), the rate of each eigenmode (Eq. 5-8), the NTK of a linear network (Appendix A.1).

float64 on the CPU whatever the device: the paper's own setting runs here in full, so `gpu` and `paper` equal `cpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu

NB_ANALYSIS = "notebooks/isoloss/01_eigenmode_analysis.ipynb"


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-300))


# --- Eq. 1-2: the predictor and the decoupled loss -------------------------------------------------


@dataclass(frozen=True)
class DecouplingConfig(Config):
    N: int = 16
    M: int = 8
    batch: int = 512
    alpha: float = 0.5
    tau: float = 0.99  # running-estimate decay for the DirectPredictor check
    estimate_steps: int = 3000

    def validate(self) -> None:
        super().validate()
        for name in ("N", "M", "batch", "estimate_steps"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "alpha", self.alpha > 0, "must be > 0")
        require(self, "tau", 0 <= self.tau < 1, "must be in [0, 1)")


def decoupling_checks(
    commute: float,
    basis: float,
    decoupled: float,
    mode_grad: float,
    estimate_err: float,
    tol_est: float,
    matrix_err: float,
    top_offset: float,
    closed: float,
) -> dict[str, dict]:
    """Eq. 1-2's checks from the measured relative gaps; tol_est: the tolerance of the running estimate;
    top_offset: the largest eigenvalue of DirectPred's normalised spectrum minus (1 + eps)."""
    return {
        "predictor_shares_eigenbasis": check(
            commute < 1e-12 and basis < 1e-12,
            max(commute, basis),
            "||W_P C - C W_P|| / ||C|| and ||U^T W_P U - D^alpha|| / ||D^alpha|| < 1e-12",
            "W_P = U D^alpha U^T is diagonal in the eigenbasis of E[zz^T] (Eq. 1)",
        ),
        "loss_decouples_into_modes": check(
            decoupled < 1e-12,
            decoupled,
            "relative gap < 1e-12",
            "L = 1/2 sum_m |lambda_m^alpha z1_m - SG(z2_m)|^2 (Eq. 2)",
        ),
        "mode_gradient": check(
            mode_grad < 1e-12,
            mode_grad,
            "relative gap to autograd < 1e-12",
            "dL/dz1_m = lambda_m^alpha (lambda_m^alpha z1_m - z2_m), one mode at a time",
        ),
        "running_estimate_converges": check(
            estimate_err < tol_est,
            estimate_err,
            f"||C_running - E[zz^T]|| / ||E[zz^T]|| < {tol_est:.3f}",
            "DirectPred's running correlation estimates E[zz^T]",
        ),
        "normalised_predictor": check(
            matrix_err < 2 * tol_est and abs(top_offset) < 1e-12,
            matrix_err,
            f"||W_P(running) - f_alpha(E[zz^T]/lambda_max)|| rel. < {2 * tol_est:.3f}; max s = 1 + eps",
            "DirectPred's W_P: eigenvalues clamped, divided by the largest, raised to alpha",
        ),
        "closed_form_predictor": check(
            closed < 1e-12, closed, "relative gap < 1e-12", "the toy simulations' W_P = f_alpha(W W^T)"
        ),
    }


def decoupling(cfg: DecouplingConfig, device) -> dict:
    """W_P = U D^α Uᵀ (Eq. 1) and L = ½ Σ_m |λ_m^α ẑ1_m − ẑ2_m|² (Eq. 2), checked numerically."""
    from gradalign.analysis.eigen_dynamics import isotropic_views
    from gradalign.methods.directpred import DirectPredictor, closed_form_predictor, eigen_power
    from gradalign.methods.isoloss import predictor_loss

    gen = torch.Generator().manual_seed(cfg.seed)
    W = torch.randn(cfg.M, cfg.N, generator=gen, dtype=torch.float64) / cfg.N**0.5
    x1, x2 = isotropic_views(cfg.batch, cfg.N, 0.1, gen)
    z1, z2 = (x1 @ W.T).requires_grad_(True), x2 @ W.T
    C = z1.detach().T @ z1.detach() / cfg.batch
    lam, U = torch.linalg.eigh(C)
    W_P = eigen_power(C, cfg.alpha)
    commute = float((W_P @ C - C @ W_P).norm() / C.norm())
    basis = _rel(U.T @ W_P @ U, torch.diag(lam**cfg.alpha))
    loss = predictor_loss(z1, z2, W_P)
    zh1, zh2 = z1.detach() @ U, z2 @ U
    per_mode = 0.5 * ((lam**cfg.alpha * zh1 - zh2) ** 2).mean(0)  # Eq. 2, last line, one term per mode
    decoupled = abs(loss.item() - per_mode.sum().item()) / loss.item()
    grad = torch.autograd.grad(loss, z1)[0] @ U  # ∂L/∂ẑ1 = λ^α (λ^α ẑ1 − ẑ2) / B (text before Eq. 5)
    mode_grad = _rel(grad, lam**cfg.alpha * (lam**cfg.alpha * zh1 - zh2) / cfg.batch)

    # DirectPred in a deep network: a running estimate of E[zzᵀ]; here E[zzᵀ] = (1 + σ²) W Wᵀ is known.
    pred = DirectPredictor(cfg.M, alpha=cfg.alpha, tau=cfg.tau, dtype=torch.float64)
    for _ in range(cfg.estimate_steps):
        a, _ = isotropic_views(cfg.batch, cfg.N, 0.1, gen)
        pred.update(a @ W.T)
    truth = 1.01 * W @ W.T
    estimate_err = _rel(pred.C, truth)
    s, _ = pred.spectrum()
    target = eigen_power(truth / torch.linalg.eigvalsh(truth).max(), cfg.alpha)
    matrix_err = _rel(pred.matrix(), target)
    closed = _rel(closed_form_predictor(W, cfg.alpha), eigen_power(W @ W.T, cfg.alpha))
    tol_est = 4 * (cfg.M / (cfg.batch * 2 / (1 - cfg.tau))) ** 0.5  # a few standard errors of the EMA estimate
    checks = decoupling_checks(
        commute, basis, decoupled, mode_grad, estimate_err, tol_est, matrix_err, float(s.max()) - 1 - pred.eps, closed
    )
    metrics = {
        "eigenvalues": lam.tolist(),
        "per_mode_loss": per_mode.tolist(),
        "loss": loss.item(),
        "estimate_rel_error": estimate_err,
    }
    return outcome(checks, metrics)


# --- Eq. 5-8: the rate of each eigenmode under each loss ----------------------------------------


@dataclass(frozen=True)
class RatesConfig(Config):
    N: int = 32
    M: int = 8
    batch: int = 4096  # exact-moment batch (>= 3N): its gradient is the expected gradient
    mc_samples: int = 50_000  # fresh Gaussian samples, as in the paper's simulations
    alphas: tuple[float, ...] = (0.5, 1.0, 2.0)
    sigma: float = 0.1
    init_scale: float = 0.3  # W = scale·randn(M, N): eigenvalues of W Wᵀ on both sides of 1
    lr: float = 1e-2

    def validate(self) -> None:
        super().validate()
        require(self, "batch", self.batch >= 3 * self.N, "must be >= 3 N (exact moments)")
        require(self, "M", 1 <= self.M <= self.N, "must be in [1, N]")
        require(self, "alphas", len(self.alphas) >= 1 and all(a > 0 for a in self.alphas), "must be positive")
        require(self, "sigma", self.sigma >= 0, "must be >= 0")
        require(self, "mc_samples", self.mc_samples >= 100, "must be >= 100")


def rates_checks(
    exact_gap: float, closed_gap: float, step_gap: float, mc_gap: float, mc_samples: int
) -> dict[str, dict]:
    """Eq. 5-8's checks from the largest measured gaps over every loss and alpha (mc_gap: the median relative
    gap of the rates sampled with mc_samples fresh samples)."""
    return {
        "rates_match_eq5_8": check(
            exact_gap < 1e-9,
            exact_gap,
            "max_m |r_m(autograd, exact-moment batch) - r(lambda_m)| < 1e-9, every loss and alpha",
            "each eigenmode evolves on its own at the rate of Eq. 5 (L), 6 (noSG), 7 (ws), 8 (iso)",
        ),
        "closed_form_expected_gradient": check(
            closed_gap < 1e-10,
            closed_gap,
            "relative gap < 1e-10",
            "E[grad_W loss] = P(W_P) W for each loss (our closed form)",
        ),
        "discrete_step_keeps_eigenbasis": check(
            step_gap < 1e-10,
            step_gap,
            "max relative |lambda' - lambda (1 + lr r)^2| < 1e-10",
            "a gradient step maps lambda to lambda (1 + lr r(lambda))^2",
        ),
        "monte_carlo_rates": check(
            mc_gap < 0.1,
            mc_gap,
            f"median relative gap with {mc_samples} fresh samples < 0.1",
            "the paper's sampled expected gradient follows the same rates up to sampling noise",
        ),
    }


def eigenmode_rates(cfg: RatesConfig, device) -> dict:
    """Measured per-mode rates (autograd on the library's losses) against Eq. 5-8, for each α."""
    from gradalign.analysis.eigen_dynamics import (
        LOSS_NAMES,
        expected_gradient,
        isotropic_views,
        measured_mode_rates,
        mode_rate,
    )
    from gradalign.methods.directpred import closed_form_predictor
    from gradalign.methods.isoloss import LOSSES

    gen = torch.Generator().manual_seed(cfg.seed)
    W = cfg.init_scale * torch.randn(cfg.M, cfg.N, generator=gen, dtype=torch.float64)
    exact_gap = closed_gap = step_gap = mc_gap = 0.0
    measured = {}
    for alpha in cfg.alphas:
        W_P = closed_form_predictor(W, alpha)
        for loss in LOSS_NAMES:

            def grad_of(x1, x2):
                Wr = W.clone().requires_grad_(True)
                return torch.autograd.grad(LOSSES[loss](x1 @ Wr.T, x2 @ Wr.T, W_P), Wr)[0]

            g = grad_of(*isotropic_views(cfg.batch, cfg.N, cfg.sigma, gen, exact_moments=True))
            lam, r = measured_mode_rates(W, g)
            predicted = mode_rate(loss, lam, alpha, cfg.sigma)
            exact_gap = max(exact_gap, float((r - predicted).abs().max()))
            closed_gap = max(closed_gap, _rel(g, expected_gradient(W, loss, alpha, cfg.sigma)))
            lam_next = torch.linalg.eigvalsh((W - cfg.lr * g) @ (W - cfg.lr * g).T)
            mapped = (lam * (1 + cfg.lr * predicted) ** 2).sort().values  # as a set: large steps may reorder modes
            step_gap = max(step_gap, float(((lam_next - mapped) / mapped).abs().max()))
            _, r_mc = measured_mode_rates(W, grad_of(*isotropic_views(cfg.mc_samples, cfg.N, cfg.sigma, gen)))
            mc_gap = max(mc_gap, float(((r_mc - predicted) / predicted.abs().clamp(min=1e-3)).abs().median()))
            measured[f"{loss}_alpha{alpha:g}"] = {
                "lambda": lam.tolist(),
                "measured": r.tolist(),
                "monte_carlo": r_mc.tolist(),
                "predicted": predicted.tolist(),
            }
    grid = torch.linspace(0.0, 2.5, 251, dtype=torch.float64)
    curves = {
        "lambda": grid.tolist(),
        **{
            f"{loss}_alpha{a:g}": mode_rate(loss, grid, a, cfg.sigma).tolist()
            for loss in LOSS_NAMES
            for a in cfg.alphas
        },
        **{
            f"{loss}_alpha{a:g}_sigma0": mode_rate(loss, grid, a, 0.0).tolist()
            for loss in LOSS_NAMES
            for a in cfg.alphas
        },
    }
    checks = rates_checks(exact_gap, closed_gap, step_gap, mc_gap, cfg.mc_samples)
    return outcome(
        checks,
        {"max_gap_exact": exact_gap, "max_gap_closed_form": closed_gap, "median_gap_mc": mc_gap, "modes": measured},
        curves,
    )


# --- Appendix A.1: the NTK of a linear network ---------------------------------------------------


@dataclass(frozen=True)
class NTKConfig(Config):
    dims: tuple[int, ...] = (4, 16, 64, 256, 1024, 4096)
    samples: int = 16
    M: int = 3
    repeats: int = 8

    def validate(self) -> None:
        super().validate()
        require(
            self,
            "dims",
            len(self.dims) >= 2 and list(self.dims) == sorted(set(self.dims)) and self.dims[0] >= 1,
            "must be >= 2 strictly increasing input dimensions",
        )
        for name in ("samples", "M", "repeats"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")


def _ntk(fn, W: torch.Tensor) -> torch.Tensor:
    """Θ = J Jᵀ with J the Jacobian of fn(W) (all samples' outputs, flattened) w.r.t. W."""
    J = torch.func.jacrev(fn)(W).reshape(-1, W.numel())
    return J @ J.T


def ntk_checks(eq11: float, slope: float, rms: list[float], align: list[float], relu_min_eig: float) -> dict[str, dict]:
    """Appendix A.1's checks: the relative gap to Eq. 11, the log-log slope of the Gram matrix's RMS distance to
    the identity against N, that distance and the smallest alignment at each N (increasing), and the smallest
    eigenvalue over the largest of a ReLU network's NTK."""
    return {
        "ntk_is_kronecker": check(
            eq11 < 1e-12,
            eq11,
            "||Theta(autograd) - (X X^T) kron I_M|| / ||.|| < 1e-12",
            "Theta(x_i, x_j) = (x_i^T x_j) I_M for z = U^T W x, any orthogonal U (Eq. 11)",
        ),
        "gram_approaches_identity": check(
            -0.6 < slope < -0.4 and rms[-1] < 0.05,
            {"slope": slope, "rms_at_largest_N": rms[-1]},
            "log-log slope of RMS(X X^T - I) vs N in (-0.6, -0.4) and RMS < 0.05 at the largest N",
            "x_i^T x_j -> delta_ij for high-dimensional i.i.d. Gaussian inputs",
        ),
        "updates_align_with_gradient": check(
            all(a > 0 for a in align) and align[-1] > 0.99,
            align,
            "cos(-Theta grad L, -grad L) > 0 always and > 0.99 at the largest N",
            "Eq. 4: positive alignment; Eq. 12: perfect alignment as N grows",
        ),
        "relu_ntk_psd": check(
            relu_min_eig > -1e-12,
            relu_min_eig,
            "min eigenvalue / max eigenvalue of a ReLU net's NTK > -1e-12",
            "the NTK is positive semi-definite for nonlinear networks too (text before Eq. 4)",
        ),
    }


def ntk_identity(cfg: NTKConfig, device) -> dict:
    """Eq. 9-12: Θ(x_i, x_j) = (x_iᵀ x_j) I_M exactly, and x_iᵀ x_j → δ_ij as N grows (x ~ N(0, I/N))."""
    from gradalign.methods.isoloss import predictor_loss

    gen = torch.Generator().manual_seed(cfg.seed)
    n, M = cfg.samples, cfg.M
    # Eq. 11 exactly, for the rotated output ẑ = Uᵀ W x.
    N0 = 10
    W = torch.randn(M, N0, generator=gen, dtype=torch.float64)
    X = torch.randn(n, N0, generator=gen, dtype=torch.float64)
    U = torch.linalg.qr(torch.randn(M, M, generator=gen, dtype=torch.float64))[0]
    theta = _ntk(lambda w: X @ w.T @ U, W)  # rows: (sample, output)
    kron = torch.kron(X @ X.T, torch.eye(M, dtype=torch.float64))
    eq11 = _rel(theta, kron)
    relu_theta = _ntk(lambda w: torch.relu(X @ w.T), W)
    relu_min_eig = float(torch.linalg.eigvalsh(relu_theta).min() / torch.linalg.eigvalsh(relu_theta).max())

    rms, align = [], []
    for N in cfg.dims:
        r_rms, r_align = [], []
        for _ in range(cfg.repeats):
            X = torch.randn(n, N, generator=gen, dtype=torch.float64) / N**0.5
            K = X @ X.T
            r_rms.append(float(((K - torch.eye(n, dtype=K.dtype)) ** 2).mean().sqrt()))
            # Eq. 4 / 12: representational update under the NTK against -∇_ẑ L, over the whole data set.
            W = torch.randn(M, N, generator=gen, dtype=torch.float64)
            Z1 = (X @ W.T).requires_grad_(True)
            Z2 = X @ W.T + 0.1 * torch.randn(n, M, generator=gen, dtype=torch.float64)
            W_P = torch.diag(torch.rand(M, generator=gen, dtype=torch.float64) + 0.5)
            g = torch.autograd.grad(predictor_loss(Z1, Z2, W_P), Z1)[0].reshape(-1)
            update = -torch.kron(K, torch.eye(M, dtype=K.dtype)) @ g  # -Θ ∇L (Eq. 3, 10)
            r_align.append(float(update @ -g / (update.norm() * g.norm())))
        rms.append(sum(r_rms) / len(r_rms))
        align.append(min(r_align))
    logd, logr = torch.log(torch.tensor(cfg.dims, dtype=torch.float64)), torch.log(torch.tensor(rms))
    slope = float(((logd - logd.mean()) * (logr - logr.mean())).sum() / ((logd - logd.mean()) ** 2).sum())
    checks = ntk_checks(eq11, slope, rms, align, relu_min_eig)
    return outcome(
        checks,
        {"rms_gram_minus_identity": rms, "min_alignment": align, "slope": slope},
        {"N": list(cfg.dims), "rms": rms, "alignment": align},
    )


EXPERIMENTS = [
    Experiment(
        "isoloss.eq1-2",
        decoupling,
        DecouplingConfig,
        same_as_cpu({}, {"batch": 256, "estimate_steps": 400, "tau": 0.95}),
        1,
        NB_ANALYSIS,
    ),
    Experiment(
        "isoloss.eq5-8",
        eigenmode_rates,
        RatesConfig,
        same_as_cpu({}, {"N": 12, "M": 4, "batch": 512, "mc_samples": 20_000, "alphas": (0.5, 1.0)}),
        1,
        NB_ANALYSIS,
    ),
    Experiment(
        "isoloss.a1", ntk_identity, NTKConfig, same_as_cpu({}, {"dims": (4, 64, 4096), "repeats": 3}), 1, NB_ANALYSIS
    ),
]
