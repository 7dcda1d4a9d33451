"""Theorem 3.3's two-layer model for SGR (Yang et al. 2024, §3.1, Appendix A), in float64: x1 = Θ1 x0,
x2 = W x1 + θ2 with W fixed, and squared losses, so that the last loss is a quadratic in (θ1, θ2) whose
smoothness and PL constants are eigenvalues of its Hessian. The checks are in `gradalign.experiments.sgr.two_layer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import hessian

F64 = torch.float64


# --- Theorem 3.3: a two-layer model with a quadratic last loss -------------------------------------------


@dataclass
class QuadraticTwoLayer:
    """x1 = Θ1 x0 (layer 1, Θ1: d×d0); x2 = W x1 + θ2 (layer 2: a fixed map W, d×d, and a trainable shift θ2).
    L2 = (1/2n) Σ_i ‖x2,i − y_i‖² is a convex quadratic in (Θ1, θ2) jointly, so Assumptions 3.1-3.2 hold with
    constants that are eigenvalues of its (constant) Hessian. Layer 1's local loss L1 = (1/2n) Σ_i ‖U x1,i − y_i‖²
    goes through a fixed head U = W R(angle), R a rotation by `angle` radians: U = W at angle 0, where L1 is
    L2 without the shift θ2. The theorem assumes nothing about L1.

    U may hold one head per run (R × d × d); then Θ1 (R × d × d0), θ2 (R × d) and every result carry the run
    dimension first, so that many runs train at once."""

    x0: torch.Tensor  # n × d0
    y: torch.Tensor  # n × d
    W: torch.Tensor
    U: torch.Tensor

    def _residual2(self, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
        return self.x0 @ t1.mT @ self.W.T + t2.unsqueeze(-2) - self.y

    def loss2(self, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
        return 0.5 * self._residual2(t1, t2).square().sum(-1).mean(-1)

    def loss1(self, t1: torch.Tensor) -> torch.Tensor:
        return 0.5 * (self.x0 @ t1.mT @ self.U.mT - self.y).square().sum(-1).mean(-1)

    def gradient2(self, t1: torch.Tensor, t2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(∇θ1 L2, ∇θ2 L2) in closed form: with residuals e2 = x2 − y, ∇θ1 L2 = Wᵀ E2ᵀ X0 / n, ∇θ2 L2 = mean_i e2,i."""
        e2 = self._residual2(t1, t2)
        return self.W.T @ e2.mT @ self.x0 / self.x0.shape[0], e2.mean(-2)

    def gradient1(self, t1: torch.Tensor) -> torch.Tensor:
        """∇θ1 L1 = Uᵀ E1ᵀ X0 / n with residuals e1 = U x1 − y."""
        e1 = self.x0 @ t1.mT @ self.U.mT - self.y
        return self.U.mT @ e1.mT @ self.x0 / self.x0.shape[0]


def quadratic_two_layer(seed: int, samples: int, d0: int, d: int, angles=(0.0,)) -> QuadraticTwoLayer:
    """Inputs N(0.5, I) (our choice: a non-zero mean couples Θ1 with the shift θ2), targets from a random affine
    teacher plus noise 0.3 (so L2* > 0), W = Q1 diag(0.7 … 1.3) Q2 (well conditioned, our choice), and one head
    of layer 1 per angle (R × d × d, the same rotation generator for every angle). The same seed gives the same
    x0, y, W whatever the angles."""
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(samples, d0, generator=gen, dtype=F64) + 0.5
    q1, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64))
    q2, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64))
    W = q1 @ torch.diag(torch.linspace(0.7, 1.3, d, dtype=F64)) @ q2
    teacher, shift = torch.randn(d0, d, generator=gen, dtype=F64), torch.randn(1, d, generator=gen, dtype=F64)
    y = x0 @ teacher + shift + 0.3 * torch.randn(samples, d, generator=gen, dtype=F64)
    skew = torch.randn(d, d, generator=gen, dtype=F64)
    skew = (skew - skew.T) / torch.linalg.matrix_norm(skew - skew.T, 2)  # exp(a·skew) turns by at most a radians
    heads = torch.stack([W @ torch.linalg.matrix_exp(a * skew) for a in angles])
    return QuadraticTwoLayer(x0, y, W, heads)


def _hessian_of_loss2(p: QuadraticTwoLayer) -> tuple[torch.Tensor, int]:
    d, d0 = p.W.shape[1], p.x0.shape[1]

    def loss(v):
        return p.loss2(v[: d * d0].reshape(d, d0), v[d * d0 :])

    return hessian(loss)(torch.zeros(d * d0 + p.W.shape[0], dtype=F64)), d * d0


def theorem33_constants(p: QuadraticTwoLayer) -> dict:
    """The constants of Assumptions 3.1-3.2 for L2, from its Hessian H (torch.func.hessian; exact, H is constant):
    L = λ_max(H), L1 = λ_max(H_θ1θ1), L2 = λ_max(H_θ2θ2), and μ = 2 λ_min(H) for the PL condition as the paper
    writes it (‖∇L2‖² ≥ μ (L2 − L2*): for a quadratic, ‖H δ‖² ≥ λ_min δᵀHδ = 2 λ_min (L2 − L2*)). L2* from least
    squares of y on [x0, 1] (W is invertible, so Θ1 reaches every linear map)."""
    H, split = _hessian_of_loss2(p)
    eig = torch.linalg.eigvalsh(H)
    design = torch.cat([p.x0, torch.ones(p.x0.shape[0], 1, dtype=F64)], 1)
    fitted = design @ torch.linalg.lstsq(design, p.y).solution
    return {
        "L": float(eig[-1]),
        "L1": float(torch.linalg.eigvalsh(H[:split, :split])[-1]),
        "L2": float(torch.linalg.eigvalsh(H[split:, split:])[-1]),
        "mu": 2 * float(eig[0]),
        "L2_star": float(0.5 * (fitted - p.y).square().sum(1).mean()),
    }


def theorem33_rate_ranges(c: dict, eta1: float) -> dict:
    """Theorem 3.3's ranges: 0 < η1 ≤ min((√(L1² + 8L²) − L1)/(4L²), 2/μ, 1/(2 L2)) and
    max(0, (1 − √(1 − 2 L2 η1))/L2) < η2 ≤ (1 + √(1 − 2 L2 η1))/L2."""
    L, L1, L2 = c["L"], c["L1"], c["L2"]
    eta1_max = min((math.sqrt(L1**2 + 8 * L**2) - L1) / (4 * L**2), 2 / c["mu"], 1 / (2 * L2))
    root = math.sqrt(max(0.0, 1 - 2 * L2 * eta1))
    return {"eta1_max": eta1_max, "eta2_low": max(0.0, (1 - root) / L2), "eta2_high": (1 + root) / L2}


def theorem33_rates(c: dict, fraction: float, position: float) -> tuple[float, float, float]:
    """(η1, η2, α): η1 = `fraction` of its largest allowed value, η2 at `position` ∈ (0, 1] of its range (1: the
    top), α = η1/2 (Theorem 3.3)."""
    eta1 = fraction * theorem33_rate_ranges(c, 0.0)["eta1_max"]
    r = theorem33_rate_ranges(c, eta1)
    return eta1, r["eta2_low"] + position * (r["eta2_high"] - r["eta2_low"]), eta1 / 2


def local_training(p: QuadraticTwoLayer, eta1, eta2, global_bp, steps: int, seed: int) -> dict:
    """Eq. 1-2 for R runs at once (one head of layer 1 each; `eta1`, `eta2`, `global_bp`: R values) from one
    random start: θ1 ← θ1 − η1 ∇θ1 L1(θ1), then θ2 ← θ2 − η2 ∇θ2 L2(θ1_new, θ2); global BP uses ∇θ1 L2(θ1, θ2)
    in the first update (ε = 0). Returns L2^(i,i) for i = 0..steps (R × (steps + 1)) and
    ‖ε^(i)‖ = ‖∇θ1 L2^(i,i) − ∇θ1 L1^(i)‖ for i < steps (R × steps; 0 for global BP)."""
    gen = torch.Generator().manual_seed(seed)
    runs, d, d0 = p.U.shape[0], p.W.shape[1], p.x0.shape[1]
    t1 = torch.randn(d, d0, generator=gen, dtype=F64).expand(runs, d, d0)
    t2 = torch.randn(d, generator=gen, dtype=F64).expand(runs, d)
    eta1 = torch.as_tensor(eta1, dtype=F64)[:, None, None]
    eta2 = torch.as_tensor(eta2, dtype=F64)[:, None]
    global_bp = torch.as_tensor(global_bp)[:, None, None]
    losses, eps = [p.loss2(t1, t2)], []
    for _ in range(steps):
        g1_last, g1_local = p.gradient2(t1, t2)[0], p.gradient1(t1)
        eps.append(torch.where(global_bp, 0.0, g1_last - g1_local).flatten(1).norm(dim=1))
        t1 = t1 - eta1 * torch.where(global_bp, g1_last, g1_local)
        t2 = t2 - eta2 * p.gradient2(t1, t2)[1]
        losses.append(p.loss2(t1, t2))
    return {"loss": torch.stack(losses, 1), "eps": torch.stack(eps, 1)}


def assumption_ratios(p: QuadraticTwoLayer, c: dict, points: int, gen: torch.Generator) -> dict:
    """The constants measured back on L2. For each Lipschitz constant of Assumption 3.2 (L: every parameter;
    L1: θ1 only; L2: θ2 only), the quotient ‖Δ∇‖/‖Δθ‖ over its constant, largest over random pairs of points, and
    along the top eigenvector of its Hessian block, where it is attained (1). For μ (Assumption 3.1),
    ‖∇L2‖²/(L2 − L2*) over μ, smallest over random points, and at a minimiser plus the eigenvector of λ_min (1)."""
    H, split = _hessian_of_loss2(p)
    n, d, d0 = H.shape[0], p.W.shape[1], p.x0.shape[1]

    def gradient(v):
        g1, g2 = p.gradient2(v[:split].reshape(d, d0), v[split:])
        return torch.cat([g1.reshape(-1), g2])

    out = {}
    for name, b in {"L": slice(0, n), "L1": slice(0, split), "L2": slice(split, n)}.items():
        top = torch.zeros(n, dtype=F64)
        top[b] = torch.linalg.eigh(H[b, b])[1][:, -1]
        quotients = []
        for k in range(points + 1):
            v, s = torch.randn(n, generator=gen, dtype=F64), top.clone()
            if k < points:
                s[b] = torch.randn(s[b].shape, generator=gen, dtype=F64)
            quotients.append(float((gradient(v + s) - gradient(v))[b].norm() / s.norm()) / c[name])
        out[name] = {"largest": max(quotients), "at_eigenvector": quotients[-1]}
    x_star = -torch.linalg.solve(H, gradient(torch.zeros(n, dtype=F64)))  # L2 is quadratic: ∇L2(v) = Hv + ∇L2(0)
    quotients = []
    for v in [*torch.randn(points, n, generator=gen, dtype=F64), x_star + torch.linalg.eigh(H)[1][:, 0]]:
        gap = float(p.loss2(v[:split].reshape(d, d0), v[split:])) - c["L2_star"]
        quotients.append(float(gradient(v).square().sum()) / gap / c["mu"])
    out["mu"] = {"smallest": min(quotients), "at_eigenvector": quotients[-1]}
    return out
