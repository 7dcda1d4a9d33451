"""Label Gradient Alignment for any model: Algorithm 1 of Jackson & Schulman (2019), §2 and Eq. 2.

One step, with minibatches (X_ℓ, y_ℓ) and (X_u, w) and y_u = f(w):
    g_ℓ = ∇θ L(θ, X_ℓ, y_ℓ),  g_u = ∇θ L(θ, X_u, y_u)
    θ ← Adam(α_θ, g_u + T(i)·g_ℓ)
    w ← Adam(α_w, ∇_w ‖EMA(g_ℓ) − g_u‖²_normalized)
with ‖v‖²_normalized = Σ_i v_i² / (ε_norm + sqrt(EMA(v_i⁴))) (Eq. 2); both EMAs are constants (§2).

The w-gradient. L is −(1/B) Σ_b ⟨y_b, h_b(θ)⟩ plus terms free of y, where h = log softmax(model)
(classification, cross entropy) or h = model (regression, ½‖y − h‖²). So ∂g_u/∂y_b = −(1/B) J_bᵀ
with J_b = ∂h_b/∂θ, and with u = n ⊙ (EMA(g_ℓ) − g_u), n = 1/(ε_norm + sqrt(EMA(v⁴))):
    ∇_{y_b} Σ_i n_i (EMA(g_ℓ)_i − g_u,i)² = (−(1/B) J_b)(−2u) = (2/B) J_b u.
J·u for the whole minibatch is ONE forward-mode Jacobian-vector product (`jvp_label_gradient`),
replayed with the random state and batch statistics of the pass that computed g_u, on copies of the
buffers, so BatchNorm running statistics move only in the two ordinary forward passes.
`double_backward_label_gradient` is the reference: autograd through g_u built with create_graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, jvp

from gradalign.methods.divergence import raise_if_not_finite
from gradalign.config import Settings, require
from gradalign.errors import ConfigError
from gradalign.params import adam, buffer_copies, flat, replayed_rng, rng_snapshot, trainable, unflatten

TASKS = ("classification", "regression")
OPTIMIZERS = ("adam", "sgd")


def no_labeled_gradient(step: int) -> float:
    """T(i) = 0: θ trains on the imputed labels only, as in Eq. 10 (§3.1)."""
    return 0.0


class ConstantWeight:
    """T(i) = c for every i (picklable, unlike a lambda)."""

    def __init__(self, c: float):
        self.c = c

    def __call__(self, step: int) -> float:
        return self.c


@dataclass(frozen=True)
class LGASettings(Settings):
    """Every hyperparameter of Algorithm 1. The paper states only Figure 1's α_θ = α_w = ε_norm = 1e-3."""

    task: str = "classification"  # f = softmax + cross entropy; "regression": f = identity + ½‖y − out‖²
    alpha_theta: float = 1e-3  # Figure 1's value (and Adam's default); tuned values are not stated
    alpha_w: float = 1e-3  # Figure 1's value, the only one stated
    eps_norm: float = 1e-3  # Figure 1's value, the only one stated
    grad_ema_decay: float = 0.9  # EMA(g_ℓ): not stated; Adam's β1, a mean over ~10 minibatches while θ moves
    norm_ema_decay: float = 0.999  # EMA(v⁴): not stated; Adam's β2, a slowly varying per-parameter scale
    labeled_weight: Callable[[int], float] = field(default=no_labeled_gradient)  # T(i); §3.1 uses T ≡ 0
    optimizer: str = "adam"  # Algorithm 1's ADAMUPDATE; "sgd" = the plain gradient descent of §3.1
    adam_betas: tuple[float, float] = (0.9, 0.999)  # Adam's defaults, as in Oliver et al. (2018)
    adam_eps: float = 1e-8  # Adam's default (also TensorFlow's, the authors' framework)
    check_every: int = 50  # steps between NaN/Inf checks (one host sync each); 0 = never

    def validate(self) -> None:
        require(self, "task", self.task in TASKS, f"must be one of {TASKS}")
        require(self, "optimizer", self.optimizer in OPTIMIZERS, f"must be one of {OPTIMIZERS}")
        for name in ("alpha_theta", "alpha_w", "eps_norm", "adam_eps"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        for name in ("grad_ema_decay", "norm_ema_decay"):
            require(self, name, 0 <= getattr(self, name) < 1, "must be in [0, 1)")
        require(self, "adam_betas", all(0 <= b < 1 for b in self.adam_betas), "must lie in [0, 1)")
        require(self, "labeled_weight", callable(self.labeled_weight), "must be a function of the step, T(i)")
        require(self, "check_every", self.check_every >= 0, "must be >= 0")


@dataclass
class LGAState:
    """w, the two optimizers (their Adam moments) and the raw EMAs of g_ℓ and v⁴ (flat, length p)."""

    settings: LGASettings
    w: torch.Tensor  # (n_u, k) imputed-label parameters, y_u = f(w); Algorithm 1 starts at 0
    theta_optimizer: torch.optim.Optimizer
    w_optimizer: torch.optim.Optimizer
    ema_grad_labeled: torch.Tensor
    ema_v4: torch.Tensor
    step: int = 0  # i of the last completed iteration

    def state_dict(self) -> dict:
        return {
            "w": self.w.detach().clone(),
            "theta_optimizer": self.theta_optimizer.state_dict(),
            "w_optimizer": self.w_optimizer.state_dict(),
            "ema_grad_labeled": self.ema_grad_labeled.clone(),
            "ema_v4": self.ema_v4.clone(),
            "step": self.step,
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.w.copy_(state["w"])
        self.theta_optimizer.load_state_dict(state["theta_optimizer"])
        self.w_optimizer.load_state_dict(state["w_optimizer"])
        self.ema_grad_labeled.copy_(state["ema_grad_labeled"])
        self.ema_v4.copy_(state["ema_v4"])
        self.step = state["step"]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _optimizer(params, lr: float, settings: LGASettings) -> torch.optim.Optimizer:
    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return adam(params, lr, settings.adam_betas, settings.adam_eps)


def init_lga(
    model: torch.nn.Module, n_unlabeled: int, n_outputs: int, settings: LGASettings = LGASettings()
) -> LGAState:
    """Algorithm 1's initialisation: w = 0 ∈ R^{n_u×k}, θ as the model holds it, empty EMAs."""
    params = list(trainable(model).values())
    _require(len(params) > 0, "the model has no trainable parameters")
    _require(n_unlabeled >= 1 and n_outputs >= 1, f"need n_unlabeled, n_outputs >= 1; got {n_unlabeled}, {n_outputs}")
    like = params[0]
    w = torch.zeros(n_unlabeled, n_outputs, device=like.device, dtype=like.dtype, requires_grad=True)
    p = sum(q.numel() for q in params)
    zeros = torch.zeros(p, device=like.device, dtype=like.dtype)
    return LGAState(
        settings,
        w,
        _optimizer(params, settings.alpha_theta, settings),
        _optimizer([w], settings.alpha_w, settings),
        zeros,
        zeros.clone(),
    )


# ---- losses and label parameterisation -------------------------------------------------------------


def linear_map(outputs: torch.Tensor, task: str) -> torch.Tensor:
    """h with L = −(1/B) Σ_b ⟨y_b, h_b⟩ + (terms free of y): log softmax, or the outputs themselves."""
    return torch.log_softmax(outputs, dim=-1) if task == "classification" else outputs


def unlabeled_loss(outputs: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """L(θ, X, y) with soft targets y, mean over the batch (linear in y: the premise of Prop. 2)."""
    if task == "classification":
        return -(y * torch.log_softmax(outputs, dim=-1)).sum(-1).mean()
    return 0.5 * (outputs - y).square().sum(-1).mean()


def labeled_loss(outputs: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """Cross entropy with class indices, or ½‖y − out‖², mean over the batch."""
    return F.cross_entropy(outputs, y) if task == "classification" else unlabeled_loss(outputs, y, task)


def imputed_labels(w: torch.Tensor, task: str) -> torch.Tensor:
    """y_u = f(w): softmax for classification, identity for regression (Algorithm 1)."""
    return torch.softmax(w, dim=-1) if task == "classification" else w


@torch.no_grad()
def imputed_diagnostics(w: torch.Tensor, y_true: torch.Tensor) -> dict[str, float]:
    """LGA's imputed labels y_u = softmax(w): accuracy on the unlabeled pool, confidence (mean largest probability),
    and how far they moved from Algorithm 1's start w = 0 (mean total-variation distance from the uniform label)."""
    y = torch.softmax(w.double(), -1)
    return {
        "imputed_accuracy": float((y.argmax(-1) == y_true).double().mean()),
        "imputed_confidence": float(y.max(-1).values.mean()),
        "imputed_moved": float(0.5 * (y - 1.0 / y.shape[-1]).abs().sum(-1).mean()),
    }


def chain_to_w(y: torch.Tensor, grad_y: torch.Tensor, task: str) -> torch.Tensor:
    """∇_w from ∇_y through y = f(w); for softmax, y ⊙ (∇_y − ⟨y, ∇_y⟩)."""
    if task == "regression":
        return grad_y
    return y * (grad_y - (y * grad_y).sum(-1, keepdim=True))


# ---- the normalized distance (Eq. 2) ---------------------------------------------------------------


def ema_update(raw: torch.Tensor, value: torch.Tensor, decay: float, step: int) -> torch.Tensor:
    """Bias-corrected EMA (as Adam's moments): updates `raw` in place, returns raw / (1 − decay^step).

    decay = 0 gives EMA(x) = x, the §3.1 simplification.
    """
    raw.lerp_(value, 1.0 - decay)
    return raw / (1.0 - decay**step)


def eps_dominated_share(ema_v4: torch.Tensor, eps_norm: float) -> torch.Tensor:
    """Share of parameters whose ε_norm exceeds sqrt(EMA(v⁴)) in Eq. 2's denominator (a 0-d float tensor, no host
    sync; float64, exact for any p below 2⁵³): there the term is weighted by about 1/ε_norm, not normalised by its own
    scale, so at a share near 1 the normalisation is effectively off. `ema_v4`: the bias-corrected EMA(v⁴), flat."""
    return (ema_v4.sqrt() < eps_norm).double().mean()


def scaled_residual(v: torch.Tensor, ema_v4: torch.Tensor, eps_norm: float) -> torch.Tensor:
    """u = v / (ε_norm + sqrt(EMA(v⁴))), taken as 0 where the denominator is 0 (ε_norm = 0, v ≡ 0)."""
    denominator = eps_norm + ema_v4.sqrt()
    return torch.where(denominator > 0, v / denominator, torch.zeros_like(v))


# ---- the w-gradient: one JVP, and the double-backward reference ---------------------------------------


def unlabeled_gradient(model: torch.nn.Module, x_u: torch.Tensor, y_u: torch.Tensor, task: str):
    """(L_u, g_u per parameter, random state before the pass): the ordinary pass that computes g_u."""
    params = trainable(model)
    snapshot = rng_snapshot(x_u.device)
    loss = unlabeled_loss(model(x_u), y_u.detach(), task)
    grads = torch.autograd.grad(loss, list(params.values()), materialize_grads=True)
    return loss.detach(), grads, snapshot


def jvp_label_gradient(
    model: torch.nn.Module, x_u: torch.Tensor, u: torch.Tensor, task: str, snapshot=None
) -> torch.Tensor:
    """∇_{y_u} ‖EMA(g_ℓ) − g_u‖²_normalized = (2/B) J u, with J u from one forward-mode JVP.

    u: flat (p,) tangent n ⊙ (EMA(g_ℓ) − g_u). The model runs in its current mode (train: batch
    statistics of x_u, as in the g_u pass) on copies of its buffers, from the random state `snapshot`.
    """
    params = {name: p.detach() for name, p in trainable(model).items()}
    buffers = dict(model.named_buffers())

    def h(theta):
        copies = {name: b.clone() for name, b in buffers.items()}  # BN may update these, never the model's
        return linear_map(functional_call(model, (theta, copies), (x_u,)), task)

    with torch.no_grad(), replayed_rng(snapshot):
        _, ju = jvp(h, (params,), (unflatten(u, params),))
    return (2.0 / x_u.shape[0]) * ju


def double_backward_label_gradient(
    model: torch.nn.Module,
    x_u: torch.Tensor,
    y_u: torch.Tensor,
    target: torch.Tensor,
    normalizer: torch.Tensor,
    task: str,
    snapshot=None,
) -> torch.Tensor:
    """Reference: ∇_{y_u} Σ_i n_i (target_i − g_u,i(y_u))² by autograd through g_u (create_graph).

    target = EMA(g_ℓ), normalizer n = 1/(ε_norm + sqrt(EMA(v⁴))), both flat (p,) constants.
    Runs on copies of the buffers, from the random state `snapshot`, like `jvp_label_gradient`.
    """
    params = trainable(model)
    buffers = buffer_copies(model)
    y = y_u.detach().requires_grad_(True)
    with replayed_rng(snapshot):
        outputs = functional_call(model, (params, buffers), (x_u,))
    g_u = torch.autograd.grad(
        unlabeled_loss(outputs, y, task), list(params.values()), create_graph=True, materialize_grads=True
    )
    v = target - flat(g_u)
    return torch.autograd.grad((normalizer * v * v).sum(), y)[0]


# ---- one iteration of Algorithm 1 -------------------------------------------------------------------


def check_inputs(state_w: torch.Tensor, x_l, y_l, x_u, indices, task: str) -> None:
    """Shape, dtype and device checks on the host (no device sync), before any compute."""
    n_u, k = state_w.shape
    _require(x_l.shape[0] >= 1 and x_u.shape[0] >= 1, "empty labeled or unlabeled minibatch")
    _require(x_l.shape[0] == y_l.shape[0], f"x_l has {x_l.shape[0]} rows but y_l has {y_l.shape[0]}")
    _require(
        x_l.device == state_w.device and x_u.device == state_w.device and y_l.device == state_w.device,
        f"inputs must be on the model's device {state_w.device}",
    )
    if task == "classification":
        _require(y_l.dim() == 1 and not y_l.is_floating_point(), "classification y_l must be class indices (B,)")
    else:
        _require(y_l.dim() == 2 and y_l.shape[1] == k, f"regression y_l must have shape (B, {k})")
    _require(
        indices.dim() == 1 and indices.shape[0] == x_u.shape[0] and not indices.is_floating_point(),
        f"indices must be {x_u.shape[0]} integers, one per row of x_u",
    )
    if indices.device.type == "cpu":
        _require(bool(indices.min() >= 0) and bool(indices.max() < n_u), f"indices must lie in [0, {n_u})")


def lga_step(
    model: torch.nn.Module,
    state: LGAState,
    x_l: torch.Tensor,
    y_l: torch.Tensor,
    x_u: torch.Tensor,
    indices: torch.Tensor,
    extra_gradient=None,
) -> dict[str, torch.Tensor]:
    """One iteration of Algorithm 1; θ and w move simultaneously from the gradients at the same θ.

    indices: the rows of w that the unlabeled minibatch x_u holds. extra_gradient: optional
    per-parameter tensors added to g_θ (LGA + VAT adds the VAT gradient, §4). The model runs in its current mode
    (use train() for Algorithm 1); BN running statistics move in the labeled and the unlabeled pass
    only. Returns scalar tensors (no host sync unless a finiteness check is due).
    """
    s = state.settings
    check_inputs(state.w, x_l, y_l, x_u, indices, s.task)
    indices = indices.to(state.w.device)
    step = state.step + 1
    params = list(trainable(model).values())

    outputs_l = model(x_l)
    _require(
        outputs_l.shape[-1] == state.w.shape[1],
        f"the model gives {outputs_l.shape[-1]} outputs but w has {state.w.shape[1]} columns",
    )
    loss_l = labeled_loss(outputs_l, y_l, s.task)
    g_l = torch.autograd.grad(loss_l, params, materialize_grads=True)
    y_u = imputed_labels(state.w.detach()[indices], s.task)
    loss_u, g_u, snapshot = unlabeled_gradient(model, x_u, y_u, s.task)

    flat_l, flat_u = flat(g_l), flat(g_u)
    with torch.no_grad():
        target = ema_update(state.ema_grad_labeled, flat_l, s.grad_ema_decay, step)  # EMA(g_ℓ)
        v = target - flat_u
        ema_v4 = ema_update(state.ema_v4, v.pow(4), s.norm_ema_decay, step)
        u = scaled_residual(v, ema_v4, s.eps_norm)
    grad_y = jvp_label_gradient(model, x_u, u, s.task, snapshot)
    grad_w_rows = chain_to_w(y_u, grad_y, s.task)

    diagnostics = {
        "loss_labeled": loss_l.detach(),
        "loss_unlabeled": loss_u,
        "distance": (u * v).sum(),  # ‖EMA(g_ℓ) − g_u‖²_normalized, Eq. 2
        "grad_labeled_norm": flat_l.norm(),
        "grad_unlabeled_norm": flat_u.norm(),
        "grad_cosine": F.cosine_similarity(flat_l, flat_u, dim=0),
        "grad_w_norm": grad_w_rows.norm(),
        "eps_dominated": eps_dominated_share(ema_v4, s.eps_norm),  # share with ε_norm > sqrt(EMA(v⁴)), Eq. 2
    }
    if s.check_every and step % s.check_every == 0:
        raise_if_not_finite("LGA", step, diagnostics, "lower the learning rates or raise eps_norm")

    labeled_weight = float(s.labeled_weight(step))
    for p, gu, gl in zip(params, g_u, g_l):
        p.grad = gu + labeled_weight * gl if labeled_weight else gu
    if extra_gradient is not None:
        for p, g in zip(params, extra_gradient):
            p.grad.add_(g)
    state.theta_optimizer.step()
    state.w.grad = torch.zeros_like(state.w).index_add_(0, indices, grad_w_rows)
    state.w_optimizer.step()
    state.step = step
    return diagnostics
