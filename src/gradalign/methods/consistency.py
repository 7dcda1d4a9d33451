"""Unlabeled losses of the consistency baselines, as evaluated by Oliver et al. (2018).

Oliver et al., "Realistic Evaluation of Deep Semi-Supervised Learning Algorithms" (NeurIPS 2018),
code `brain-research/realistic-ssl-evaluation` (lib/ssl_utils.py, lib/ssl_framework.py,
third_party/vat/vat_utils.py); facts in book/appendix/protocols.md, section LGA.

- Π-Model and Mean Teacher: mean over classes of the squared difference of softmaxes (`softmax_mse`).
- EntMin (Grandvalet & Bengio 2005): Shannon entropy of the prediction (`entropy`).
- VAT (Miyato et al. 2018): the direction is FOUND with KL(p_clean ‖ p(x + r)) (standard VAT power
  iteration), but the LOSS is KL(p_perturbed ‖ p_clean) with p_clean a constant, the direction
  Oliver et al. chose ("the authors found this direction worked better"; `forward_kl` of
  student = perturbed against teacher = clean).
- Only the first clean pass updates BatchNorm running statistics; every extra pass runs inside
  `frozen_bn_stats`.

Every function returns per-example values (B,); the caller sums and divides by the full batch size.
All of them run on any device without host synchronisation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from gradalign.errors import ConfigError


def _check_logits(name: str, logits: Tensor) -> None:
    if logits.ndim != 2:
        raise ConfigError(f"{name} must be (batch, classes) logits, got shape {tuple(logits.shape)}")


def _check_pair(a: Tensor, b: Tensor) -> None:
    _check_logits("logits", a)
    if a.shape != b.shape:
        raise ConfigError(f"logit shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")


def softmax_mse(logits: Tensor, target_logits: Tensor) -> Tensor:
    """Per-example mean over classes of (softmax(logits) − softmax(target_logits))², target detached.

    Shape (B,). Π-Model and Mean Teacher (Oliver et al.: `mse_from_logits`, MSE between softmaxes).
    """
    _check_pair(logits, target_logits)
    return (logits.softmax(-1) - target_logits.detach().softmax(-1)).square().mean(-1)


def entropy(logits: Tensor) -> Tensor:
    """Per-example Shannon entropy (nats) of softmax(logits), shape (B,). EntMin (Grandvalet & Bengio 2005)."""
    _check_logits("logits", logits)
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def kl_divergence(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """Per-example KL(softmax p ‖ softmax q), shape (B,), via log_softmax. Nothing is detached."""
    _check_pair(p_logits, q_logits)
    log_p = p_logits.log_softmax(-1)
    return (log_p.exp() * (log_p - q_logits.log_softmax(-1))).sum(-1)


@contextlib.contextmanager
def frozen_bn_stats(model: nn.Module) -> Iterator[nn.Module]:
    """BatchNorm layers keep normalising with batch statistics (train mode), but their buffers
    (running_mean, running_var, num_batches_tracked) are left bit-exactly as they were on exit.

    Oliver et al.: only the first clean pass updates BN statistics. The buffers are swapped for
    clones during the block and the original tensors put back afterwards, so nothing is written in
    place: graphs of earlier passes, which save the running buffers, still backpropagate.
    """
    saved = []
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            buffers = dict(module._buffers)
            saved.append((module, buffers))
            for name, buf in buffers.items():
                if buf is not None:
                    module._buffers[name] = buf.clone()
    try:
        yield model
    finally:
        for module, buffers in saved:
            module._buffers.update(buffers)


def _normalize(d: Tensor) -> Tensor:
    """Per-example unit L2 norm over all non-batch dims; max-abs scaling first, as in the VAT code."""
    dims = tuple(range(1, d.ndim))
    d = d / (1e-12 + d.abs().amax(dim=dims, keepdim=True))
    return d / (1e-6 + d.square().sum(dim=dims, keepdim=True)).sqrt()


def _check_vat(x: Tensor, clean_logits: Tensor, eps: float, xi: float, power_iterations: int) -> None:
    _check_logits("clean_logits", clean_logits)
    if x.ndim < 2 or not x.is_floating_point():
        raise ConfigError(f"x must be a floating (batch, ...) tensor, got {x.dtype} {tuple(x.shape)}")
    if x.shape[0] != clean_logits.shape[0]:
        raise ConfigError(f"batch sizes differ: x {x.shape[0]} vs clean_logits {clean_logits.shape[0]}")
    if not eps > 0 or not xi > 0:
        raise ConfigError(f"VAT needs eps > 0 and xi > 0, got eps={eps}, xi={xi}")
    if isinstance(power_iterations, bool) or not isinstance(power_iterations, int) or power_iterations < 1:
        raise ConfigError(f"power_iterations must be an integer >= 1, got {power_iterations!r}")


def _forward(model: nn.Module, x: Tensor, augment: Callable[[Tensor], Tensor] | None) -> Tensor:
    return model(x if augment is None else augment(x))


def vat_perturbation(
    model: nn.Module,
    x: Tensor,
    clean_logits: Tensor,
    eps: float,
    xi: float = 1e-6,
    power_iterations: int = 1,
    generator: torch.Generator | None = None,
    augment: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """r_adv of VAT (Miyato et al. 2018, Eq. 12-13), detached, shape of x, per-example L2 norm eps.

    d ~ N(0, I) (from `generator`, on x's device, else the device's global RNG), normalised per
    example; each power iteration: r = xi·d, g = ∇_r KL(p_clean ‖ p(x + r)), d = normalise(g).
    clean_logits are detached; passes run inside `frozen_bn_stats`. `augment`, if given, is applied
    to each perturbed input before the model: Oliver et al. augment inside the network, afresh at
    every pass, VAT's passes included. The power iteration runs in float32 even inside a bf16 autocast
    (`training.fast`): an r of norm ξ = 1e-6 is far below bfloat16's resolution of x + r.
    """
    _check_vat(x, clean_logits, eps, xi, power_iterations)
    target = clean_logits.detach()
    x = x.detach()
    d = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    full_precision = torch.autocast(device_type=x.device.type, enabled=False)
    with torch.enable_grad(), frozen_bn_stats(model), full_precision:
        for _ in range(power_iterations):
            r = (xi * _normalize(d)).requires_grad_()
            divergence = kl_divergence(target, _forward(model, x + r, augment)).sum()
            (d,) = torch.autograd.grad(divergence, r)
    return eps * _normalize(d.detach())


def vat_loss(
    model: nn.Module,
    x: Tensor,
    clean_logits: Tensor,
    eps: float,
    xi: float = 1e-6,
    power_iterations: int = 1,
    generator: torch.Generator | None = None,
    augment: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """(per-example KL(p_perturbed ‖ p_clean) (B,), perturbed logits (B, K)).

    Oliver et al.'s direction (book/appendix/protocols.md: "KL(p_perturbed ‖ p_clean) (the authors found this
    direction worked better)"), p_clean a constant; the gradient reaches the model through the
    perturbed pass, which also runs inside `frozen_bn_stats`. VAT+EntMin adds
    0.1 · entropy(perturbed logits). See `vat_perturbation` for the arguments.
    """
    r_adv = vat_perturbation(model, x, clean_logits, eps, xi, power_iterations, generator, augment)
    with frozen_bn_stats(model):
        perturbed = _forward(model, x + r_adv, augment)
    return kl_divergence(perturbed, clean_logits.detach()), perturbed
