"""Small exact problems for the theory of meta-gradient pseudo labels (Zhang et al. 2020, §3.2, §3.4 and
Appendix B), in float64. The checks are in `gradalign.experiments.metagrad.theory`.

- `linear_problem`: f(x; W) = Wᵀx with the MSE labeled loss, where Lemma 1's constants are exact:
  J_θ f(x) = I ⊗ xᵀ has spectral norm ‖x‖, so M = max_i ‖x_i^u‖; ∇²G = (2/N^l) Xᵀ X ⊗ I, so
  L₀ = 2 λ_max(Xᵀ X)/N^l; and H(ỹ) is quadratic, so its Lipschitz constant L_t is the spectral norm of ∇²H.
- `mlp_problem`: a tanh MLP with softmax outputs and the KL labeled loss, where M is measured at θ_t (the only
  point Lemma 1's proof uses it) and L₀ is estimated on the segment of inner-step parameters θ̂(ỹ) the proof
  visits (our choice; a global constant cannot be measured).

Algorithm 1 with plain SGD as its optimizer is preconditioned gradient descent on G: at ỹ = f(x^u; θ_t),
θ_{t+1} = θ_t − (4α²β/(B^u)²) Σ_i J_iᵀ J_i ∇G(θ_t) (Eq. 4-6 with Eq. 8); `preconditioned_step` computes that
form for the test that compares it with `algorithm1_step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import hessian, jacrev
from torch.nn import functional as F

from gradalign.methods.metagrad import (
    algorithm1_step,
    classifier,
    exact_meta_gradient,
    labeled_gradient,
    meta_objective,
)

F64 = torch.float64


@dataclass
class Problem:
    """One draw: f(params, x), the parameters θ_t, a labeled set (x_l, y_l), an unlabeled batch x_u, the
    labeled loss's name, and for the linear model its exact constants M and L₀."""

    f: object
    params: dict
    x_l: torch.Tensor
    y_l: torch.Tensor
    x_u: torch.Tensor
    loss: str
    M: float | None = None
    L0: float | None = None

    def G(self, params: dict | None = None) -> float:
        from gradalign.methods.metagrad import LABELED_LOSSES

        return float(LABELED_LOSSES[self.loss](self.f(self.params if params is None else params, self.x_l), self.y_l))


def linear_f(params: dict, x: torch.Tensor) -> torch.Tensor:
    return x @ params["W"]


def linear_problem(gen: torch.Generator, features: int, classes: int, n_l: int, n_u: int, scale: float = 1.0):
    """Gaussian inputs (std `scale`), one-hot labels from a random linear teacher, W ~ N(0, 1/features)."""
    x_l = scale * torch.randn(n_l, features, generator=gen, dtype=F64)
    x_u = scale * torch.randn(n_u, features, generator=gen, dtype=F64)
    teacher = torch.randn(features, classes, generator=gen, dtype=F64)
    y_l = F.one_hot((x_l @ teacher).argmax(1), classes).to(F64)
    W = torch.randn(features, classes, generator=gen, dtype=F64) / features**0.5
    M = float(x_u.norm(dim=1).max())
    L0 = float(2 * torch.linalg.eigvalsh(x_l.T @ x_l).max() / n_l)
    return Problem(linear_f, {"W": W}, x_l, y_l, x_u, "mse", M, L0)


def mlp_problem(gen: torch.Generator, features: int, hidden: int, classes: int, n_l: int, n_u: int):
    """A tanh MLP (features → hidden → classes) with softmax outputs and the KL labeled loss."""
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, classes)).to(F64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=F64) / p.shape[-1] ** 0.5)
    x_l = torch.randn(n_l, features, generator=gen, dtype=F64)
    x_u = torch.randn(n_u, features, generator=gen, dtype=F64)
    teacher = torch.randn(features, classes, generator=gen, dtype=F64)
    y_l = F.one_hot((x_l @ teacher).argmax(1), classes).to(F64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    return Problem(classifier(model), params, x_l, y_l, x_u, "kl")


def _flat_fn(fn, like: dict):
    """fn(params) as a function of one flat vector (for Hessians)."""
    names, shapes = list(like), [t.shape for t in like.values()]
    sizes = [t.numel() for t in like.values()]

    def flat_fn(v):
        return fn({n: c.view(s) for n, c, s in zip(names, v.split(sizes), shapes)})

    return flat_fn, torch.cat([t.reshape(-1) for t in like.values()])


def jacobian_norms(problem: Problem) -> torch.Tensor:
    """‖J_θ f(x_i^u; θ_t)‖₂ for every unlabeled input (spectral norm of the classes × parameters Jacobian)."""
    flat_f, v = _flat_fn(lambda p: problem.f(p, problem.x_u), problem.params)
    J = jacrev(flat_f)(v)  # (B, classes, P)
    return torch.linalg.matrix_norm(J, ord=2)


def hessian_norm(fn, at: torch.Tensor) -> float:
    """Spectral norm of ∇²fn at a flat point."""
    return float(torch.linalg.eigvalsh(hessian(fn)(at)).abs().max())


def meta_hessian_norm(problem: Problem, alpha: float, y: torch.Tensor) -> float:
    """‖∇²_ỹ H(y)‖₂: H's local Lipschitz constant at y."""
    H = meta_objective(problem.f, problem.params, problem.x_l, problem.y_l, problem.x_u, alpha, problem.loss)
    shape = y.shape
    hess = hessian(lambda v: H(v.view(shape)))(y.reshape(-1))
    return float(torch.linalg.eigvalsh(hess).abs().max())


def labeled_hessian_norm(problem: Problem, params: dict) -> float:
    from gradalign.methods.metagrad import LABELED_LOSSES

    phi = LABELED_LOSSES[problem.loss]
    fn, v = _flat_fn(lambda p: phi(problem.f(p, problem.x_l), problem.y_l), params)
    return hessian_norm(fn, v)


def step_outcome(problem: Problem, alpha: float, beta: float, meta: str = "exact") -> dict:
    """One Algorithm 1 step: G before and after, ‖∇ỹ‖, and the ỹ, ŷ of the step."""
    new, y_hat, grad_y = algorithm1_step(
        problem.f, problem.params, problem.x_l, problem.y_l, problem.x_u, alpha, beta, problem.loss, meta
    )
    return {
        "G_before": problem.G(),
        "G_after": problem.G(new),
        "grad_norm": float(grad_y.norm()),
        "y_tilde": problem.f(problem.params, problem.x_u).detach(),
        "y_hat": y_hat,
        "params": new,
    }


def lemma1_local(problem: Problem, alpha: float, beta: float, points: int = 5) -> dict:
    """Lemma 1 on a nonlinear problem: M = max_i ‖J_θ f(x_i^u; θ_t)‖; L₀ and L_t the largest Hessian norms of G
    at θ̂(y) and of H at y, for `points` y on the segment from ỹ to ŷ = ỹ − β∇ỹ."""
    from gradalign.methods.metagrad import inner_step

    y_tilde = problem.f(problem.params, problem.x_u).detach()
    grad_y = exact_meta_gradient(
        problem.f, problem.params, problem.x_l, problem.y_l, problem.x_u, alpha, loss=problem.loss
    )
    segment = [y_tilde - s * beta * grad_y for s in torch.linspace(0, 1, points, dtype=F64)]
    inner = [inner_step(problem.f, problem.params, problem.x_u, y, alpha) for y in segment]
    M = float(jacobian_norms(problem).max())
    L0 = max(labeled_hessian_norm(problem, p) for p in inner)
    Lt = max(meta_hessian_norm(problem, alpha, y) for y in segment)
    return {"M": M, "L0": L0, "Lt": Lt, "bound": 4 * alpha**2 * M**2 * L0}


def preconditioned_step(problem: Problem, alpha: float, beta: float) -> dict:
    """θ_t − (4α²β/(B^u)²) Σ_i J_iᵀ J_i ∇G(θ_t): Algorithm 1's update at ỹ = f(x^u; θ_t), written out."""
    g = labeled_gradient(problem.f, problem.params, problem.x_l, problem.y_l, problem.loss)
    flat_f, v = _flat_fn(lambda p: problem.f(p, problem.x_u), problem.params)
    J = jacrev(flat_f)(v)  # (B, classes, P)
    gv = torch.cat([t.reshape(-1) for t in g.values()])
    P = torch.einsum("bcp,bcq->pq", J, J)
    step = 4 * alpha**2 * beta / problem.x_u.shape[0] ** 2 * (P @ gv)
    new, offset = {}, 0
    for name, t in problem.params.items():
        new[name] = t - step[offset : offset + t.numel()].view_as(t)
        offset += t.numel()
    return new


def algorithm1_run(problem: Problem, x_pool: torch.Tensor, batch: int, alpha: float, beta: float, steps: int, gen):
    """Algorithm 1 (exact meta-gradient, plain SGD) for `steps` steps, unlabeled batches of `batch` drawn
    uniformly without replacement from `x_pool` each step. Returns ‖∇G(θ_t)‖² for t = 1..steps+1, G(θ_1), and
    R = the largest ‖f(x_k^l; θ_t) − y_k‖ seen (Theorem 2's constant, measured along the run)."""
    params, sq_norms, R = problem.params, [], 0.0
    G1 = problem.G(params)
    for _ in range(steps + 1):
        g = labeled_gradient(problem.f, params, problem.x_l, problem.y_l, problem.loss)
        sq_norms.append(float(sum(t.square().sum() for t in g.values())))
        R = max(R, float((problem.f(params, problem.x_l) - problem.y_l).norm(dim=1).max()))
        if len(sq_norms) > steps:
            break
        x_u = x_pool[torch.randperm(len(x_pool), generator=gen)[:batch]]
        params = algorithm1_step(problem.f, params, problem.x_l, problem.y_l, x_u, alpha, beta, problem.loss)[0]
    return {"sq_grad_norms": sq_norms, "G1": G1, "R": R}
