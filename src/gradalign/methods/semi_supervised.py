"""The objective every loss-based method of LGA's benchmark shares (Oliver et al. 2018, book/appendix/protocols.md):

    loss = Σ_ℓ CE(x_ℓ, y_ℓ) / B + weight · ramp(t) · Σ_u term_u / B,   B = B_ℓ + B_u,

and one optimizer step on it. A method's step function computes its Σ_u term_u and calls these.
A step function has the signature `step(run, ramp, x_l, y_l, x_u, idx_u) -> diagnostics`, where `run`
provides `model`, `optimizer`, `settings` (the method's own dataclass), `augment(x)` and `extra` (the
method's state, if any); diagnostics are detached scalar tensors (no host synchronisation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def clean_pass(run, x_l: torch.Tensor, x_u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits_l, logits_u) of the first clean pass on [augment(x_ℓ); augment(x_u)]: the only pass that moves
    BatchNorm statistics. x_u is augmented first, then x_ℓ (one generator: the order fixes the draws)."""
    x_u_aug = run.augment(x_u)
    logits = run.model(torch.cat([run.augment(x_l), x_u_aug]))
    return logits[: len(x_l)], logits[len(x_l) :]


def oliver_objective(
    logits_l: torch.Tensor, y_l: torch.Tensor, unlabeled_sum: torch.Tensor, batch: int, weight: float, ramp: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, labeled term, unlabeled term): the sums divided by the full batch size B."""
    labeled = F.cross_entropy(logits_l, y_l, reduction="sum") / batch
    unlabeled = unlabeled_sum / batch
    return labeled + weight * ramp * unlabeled, labeled, unlabeled


def descend(run, loss: torch.Tensor, labeled: torch.Tensor, unlabeled: torch.Tensor) -> dict[str, torch.Tensor]:
    """One optimizer step on `loss`; the step's diagnostics."""
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    return {"loss": loss.detach(), "loss_labeled": labeled.detach(), "loss_unlabeled": unlabeled.detach()}
