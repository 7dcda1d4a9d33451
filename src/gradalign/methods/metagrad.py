"""Meta-gradient pseudo labels (Zhang et al. 2020, §3.1-3.3): Algorithm 1's exact meta-gradient, the
first-order form (Eq. 7-11) as the paper's finite difference and as one Jacobian-vector product, and the
pseudo-label update of Algorithm 2 as the official code (`Sakura03/SemiMeta`) writes it.

Notation (§3.1): f(x; θ) the class probabilities (softmax of the logits); ỹ_i = f(x_i^u; θ_t) the initial
pseudo labels (Eq. 2); L^u(θ, ỹ) = (1/B^u) Σ_i Φ^MSE(f(x_i^u; θ), ỹ_i) the consistency loss (Eq. 3, with the
MSE of §3.2, Φ^MSE(p, y) = ‖p − y‖²); G(θ) = (1/B^l) Σ_k Φ(f(x_k^l; θ), y_k) the labeled loss (Φ^KL, or
Φ^MSE as Theorem 2's proof assumes); θ̂(ỹ) = θ_t − α ∇θ L^u(θ_t, ỹ) (Eq. 4); H(ỹ) = G(θ̂(ỹ)) (Lemma 1).

- exact (Algorithm 1, Eq. 5): ∇ỹ = ∇_ỹ H, a gradient through a gradient (`torch.func`).
- first-order (Eq. 8): ∇ỹ_i = −(α/B^u) ∇θᵀ(∂L/∂ỹ_i)(x_i^u, ỹ_i; θ_t) · ∇θ G(θ_t) = (2α/B^u) J_θ f(x_i^u; θ_t) g,
  g = ∇θ G(θ_t) (Eq. 9), since ∂Φ^MSE/∂ỹ = −2 (f − ỹ).
  - `first_order_fd`: Eq. 11, the central difference (α/(B^u ε)) (f(θ + εg) − f(θ − εg)), ε = c/‖g‖.
  - `first_order_jvp`: J_θ f · g by forward mode (`torch.func.jvp`); no ε, about one forward pass.

At Algorithm 1's own pseudo labels ỹ = f(x^u; θ_t) every Φ^MSE term is at its minimum, so ∇θ L^u = 0,
θ̂ = θ_t and ∇G(θ̂) = ∇G(θ_t): Eq. 8 *is* Eq. 5 there, for every α. What §3.2 approximates is only the
mixed second derivative, by a finite difference; the JVP computes it exactly. Away from ỹ = f (a perturbed
ỹ) the two differ at order α² (tested in the notebook).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, jvp
from torch.nn import functional as F

SEMIMETA_C = 0.01  # ε = 0.01 / ‖g‖ (§3.2, after [24]; the code's --epsilon)


def classifier(model: nn.Module, buffers: dict | None = None):
    """f(params, x): the softmax of `model`'s logits, called with `params` (and `buffers`, default its own).
    Every function below takes such an `f`; Lemma 1's exact check passes a linear f instead."""
    fixed = {**dict(model.named_buffers()), **(buffers or {})}

    def f(params: dict, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(functional_call(model, {**fixed, **params}, (x,)), dim=-1)

    return f


def kl_loss(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/B) Σ_i Φ^KL(p_i, y_i), Φ^KL(p, y) = Σ_n y_n log(y_n / p_n) (§3.2; 0 log 0 = 0). Equals the mean cross
    entropy for one-hot y, and the code's `F.kl_div(log p, y, reduction="batchmean")`."""
    return (torch.xlogy(y, y) - y * torch.log(p)).sum(-1).mean()


def mse_loss(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/B) Σ_i Φ^MSE(p_i, y_i) = (1/B) Σ_i ‖p_i − y_i‖² (Eq. 3; the code's `norm(p − y, dim=1)².mean()`)."""
    return (p - y).square().sum(-1).mean()


LABELED_LOSSES = {"kl": kl_loss, "mse": mse_loss}


def _loss(name: str):
    if name not in LABELED_LOSSES:
        raise ValueError(f"labeled loss must be one of {', '.join(LABELED_LOSSES)}, got {name!r}")
    return LABELED_LOSSES[name]


def labeled_gradient(f, params: dict, x_l, y_l, loss: str = "kl") -> dict:
    """g = ∇θ G(θ) (Eq. 9), by name."""
    phi = _loss(loss)
    return grad(lambda p: phi(f(p, x_l), y_l))(params)


def inner_step(f, params: dict, x_u, y_u, alpha: float) -> dict:
    """θ̂ = θ − α ∇θ L^u(θ, y_u) (Eq. 4; with y_u = ŷ the actual update of Algorithm 1 under plain SGD)."""
    g_u = grad(lambda p: mse_loss(f(p, x_u), y_u))(params)
    return {k: params[k] - alpha * g_u[k] for k in params}


def meta_objective(f, params: dict, x_l, y_l, x_u, alpha: float, loss: str = "kl"):
    """H(ỹ) = G(θ̂(ỹ)) (Lemma 1): the labeled loss after one SGD step on the pseudo-labeled batch."""
    phi = _loss(loss)

    def H(y_tilde: torch.Tensor) -> torch.Tensor:
        return phi(f(inner_step(f, params, x_u, y_tilde, alpha), x_l), y_l)

    return H


def exact_meta_gradient(f, params: dict, x_l, y_l, x_u, alpha: float, y_tilde=None, loss: str = "kl"):
    """∇ỹ = ∇_ỹ H(ỹ) (Eq. 5, Algorithm 1), at ỹ = f(x^u; θ) unless `y_tilde` is given."""
    if y_tilde is None:
        y_tilde = f(params, x_u).detach()
    return grad(meta_objective(f, params, x_l, y_l, x_u, alpha, loss))(y_tilde)


def jacobian_vector(f, params: dict, x_u, direction: dict) -> torch.Tensor:
    """J_θ f(x^u; θ) · v for every unlabeled input, by forward mode (one forward pass with tangents)."""
    _, tangent = jvp(lambda p: f(p, x_u), (params,), (direction,))
    return tangent


def first_order_jvp(f, params: dict, x_l, y_l, x_u, alpha: float, loss: str = "kl") -> torch.Tensor:
    """Eq. 8 exactly: ∇ỹ_i = (2α/B^u) J_θ f(x_i^u; θ) g, with g = ∇θ G(θ) (Eq. 9)."""
    g = labeled_gradient(f, params, x_l, y_l, loss)
    return 2.0 * alpha / x_u.shape[0] * jacobian_vector(f, params, x_u, g)


def shifted(params: dict, direction: dict, step) -> dict:
    return {k: params[k] + step * direction[k] for k in params}


def gradient_norm(g: dict) -> torch.Tensor:
    return torch.sqrt(sum(t.square().sum() for t in g.values()))


def first_order_fd(f, params: dict, x_l, y_l, x_u, alpha: float, c: float = SEMIMETA_C, loss: str = "kl"):
    """Eq. 11: ∇ỹ_i ≈ (α/(B^u ε)) (f(x_i^u; θ + εg) − f(x_i^u; θ − εg)), ε = c/‖g‖ (§3.2: c = 0.01)."""
    g = labeled_gradient(f, params, x_l, y_l, loss)
    eps = c / gradient_norm(g)
    plus = f(shifted(params, g, eps), x_u)
    minus = f(shifted(params, g, -eps), x_u)
    return alpha / (x_u.shape[0] * eps) * (plus - minus)


def renormalised(y: torch.Tensor) -> torch.Tensor:
    """ReLU, then each row divided by its sum (a zero row is left zero), as the code does after the step."""
    y = torch.relu(y)
    sums = y.sum(-1, keepdim=True)
    return y / torch.where(sums == 0, torch.ones_like(sums), sums)


def coded_pseudo_labels(
    f, params: dict, x_l, y_l, x_u, lr: float, c: float = SEMIMETA_C, form: str = "fd"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 2's pseudo labels as `train_meta.py` computes them (model in eval mode: pass the running
    statistics to `classifier`): ŷ = renormalised(ỹ − lr · (f(θ + εg) − f(θ − εg)) / ε), ε = c/‖g‖, g the gradient
    of the mean labeled cross entropy. The code drops Eq. 11's α/B^u and takes β = α = lr (book/appendix/protocols.md).
    `form="jvp"` replaces the difference quotient by its limit 2 J_θ f · g. Returns (ŷ, the raw ∇ỹ)."""
    if form not in ("fd", "jvp"):
        raise ValueError(f"form must be 'fd' or 'jvp', got {form!r}")
    g = grad(lambda p: kl_loss(f(p, x_l), y_l))(params)
    if form == "jvp":  # one forward pass with tangents gives ỹ and J_θf·g
        y_tilde, tangent = jvp(lambda p: f(p, x_u), (params,), (g,))
        grad_y = 2.0 * tangent
    else:
        y_tilde = f(params, x_u)
        eps = c / gradient_norm(g)
        grad_y = (f(shifted(params, g, eps), x_u) - f(shifted(params, g, -eps), x_u)) / eps
    return renormalised(y_tilde - lr * grad_y).detach(), grad_y.detach()


def algorithm1_step(f, params: dict, x_l, y_l, x_u, alpha: float, beta: float, loss: str = "kl", meta="exact"):
    """One step of Algorithm 1 with plain SGD as its Optimizer (the setting of Theorems 1-2): the pseudo
    labels ŷ = ỹ − β ∇ỹ (Eq. 6), then θ_{t+1} = θ_t − α ∇θ L^u(θ_t, ŷ). `meta`: "exact" (Eq. 5) or "jvp" (Eq. 8).
    Returns (θ_{t+1}, ŷ, ∇ỹ). Then G(θ_{t+1}) = H(ŷ) and G(θ_t) = H(ỹ) (Theorem 3's proof)."""
    if meta == "exact":
        grad_y = exact_meta_gradient(f, params, x_l, y_l, x_u, alpha, loss=loss)
    elif meta == "jvp":
        grad_y = first_order_jvp(f, params, x_l, y_l, x_u, alpha, loss)
    else:
        raise ValueError(f"meta must be 'exact' or 'jvp', got {meta!r}")
    y_hat = f(params, x_u).detach() - beta * grad_y
    return inner_step(f, params, x_u, y_hat, alpha), y_hat, grad_y


def mixup(x_l, y_l, x_u, y_hat, lam: torch.Tensor):
    """Eq. 12: x^in = λ x^l + (1 − λ) x^u and y^in = λ y + (1 − λ) ŷ, one λ per pair (as drawn, no max(λ, 1 − λ))."""
    shape = (-1,) + (1,) * (x_l.dim() - 1)
    return lam.view(shape) * x_l + (1 - lam.view(shape)) * x_u, lam.view(-1, 1) * y_l + (1 - lam.view(-1, 1)) * y_hat


def mixed_kl(model: nn.Module, x_in, y_in) -> torch.Tensor:
    """Φ^KL on the mixed batch, batch mean: the code's `F.kl_div(log_softmax(f(x^in)), y^in, "batchmean")`."""
    return F.kl_div(F.log_softmax(model(x_in), dim=1), y_in, reduction="batchmean")


def algorithm2_loss(model: nn.Module, x_l, y_l, x_u, y_hat, lam, weight: float = 1.0) -> torch.Tensor:
    """Eq. 13 as coded: KL (batch mean) on the mixed batch + weight · (1/B) Σ ‖f(x^u) − ŷ‖² (the clean labeled
    CE is not in the loss). `y_l` one-hot; `model` in train mode."""
    x_in, y_in = mixup(x_l, y_l, x_u, y_hat, lam)
    return mixed_kl(model, x_in, y_in) + weight * mse_loss(torch.softmax(model(x_u), dim=1), y_hat)
