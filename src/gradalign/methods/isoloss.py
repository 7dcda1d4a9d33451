"""Siamese losses with a linear predictor W_P (Halvagal, Laborieux & Zenke 2022, §2-3).

Pure functions of two batches of embeddings z1, z2 of shape (B, M) (two augmented views; z2 may be
the target branch's output) and the predictor matrix W_P (M, M), which carries no gradient. Every
loss is ½‖·‖² per pair, averaged over the batch. SG is `.detach()`.

Gradients with respect to z1 (per pair, p = W_P z1), which the eigenmode analysis is built on:
    L        (Eq. 2)  W_Pᵀ(p − z2)
    L_noSG   (Eq. 6)  W_Pᵀ(p − z2) on z1 and −(p − z2) on z2
    L_ws     (Eq. 7)  −(p − z2) on z2 only
    L_iso    (Eq. 8)  (p − z2): the predictor-output gradient passed to z1 without W_Pᵀ
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _half_sq(v: torch.Tensor) -> torch.Tensor:
    return 0.5 * (v * v).sum(dim=1).mean()


def predictor_loss(z1, z2, W_P):
    """L = ½‖W_P z1 − SG(z2)‖²: BYOL/SimSiam with a DirectPred predictor (Eq. 2)."""
    return _half_sq(z1 @ W_P.T - z2.detach())


def no_stopgrad_loss(z1, z2, W_P):
    """L_noSG = ½‖W_P z1 − z2‖²: gradients flow through both branches (Eq. 6)."""
    return _half_sq(z1 @ W_P.T - z2)


def wrong_side_loss(z1, z2, W_P):
    """L_ws = ½‖SG(W_P z1) − z2‖²: the stop-gradient on the online branch instead (Eq. 7)."""
    return _half_sq((z1 @ W_P.T).detach() - z2)


def iso_loss(z1, z2, W_P):
    """L_iso = ½‖z1 − SG(z2 + z1 − W_P z1)‖² (Eq. 8). Its value equals L's; its z1-gradient is p − z2."""
    return _half_sq(z1 - (z2 + z1 - z1 @ W_P.T).detach())


def cosine_predictor_loss(z1, z2, W_P):
    """2 − 2 cos(W_P z1, SG(z2)), batch mean: the standard BYOL loss with a DirectPred predictor."""
    return (2 - 2 * F.cosine_similarity(z1 @ W_P.T, z2.detach(), dim=1)).mean()


def cosine_iso_loss(z1, z2, W_P):
    """IsoLoss for the cosine distance: value 2 − 2 cos(p, z2) with p = W_P z1; z1-gradient ∇_p of it.

    The generalisation of Eq. 8 used by the authors' public code for deep networks: the gradient the
    predictor output would receive is applied to z1 directly, so no eigenmode is scaled by λ^α twice.
    """
    p, z2 = (z1 @ W_P.T).detach(), z2.detach()
    g = _cosine_grad(p, z2)
    value = 2 - 2 * F.cosine_similarity(p, z2, dim=1)
    linear = (z1 * g).sum(dim=1)
    return (value + linear - linear.detach()).mean()


def _cosine_grad(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """∇_p of 2 − 2 cos(p, z), row by row."""
    pn, zn = p.norm(dim=1, keepdim=True), z.norm(dim=1, keepdim=True)
    cos = (p * z).sum(dim=1, keepdim=True) / (pn * zn)
    return -2 * (z / (pn * zn) - cos * p / pn**2)


LOSSES = {"noSG": no_stopgrad_loss, "ws": wrong_side_loss, "L": predictor_loss, "iso": iso_loss}
"""The four losses of Figure 2, in the figure's order (a-d)."""

DEEP_LOSSES = {
    "L": cosine_predictor_loss,
    "iso": cosine_iso_loss,
    "L_euclidean": predictor_loss,
    "iso_euclidean": iso_loss,
}
"""Losses for deep training (Table 1): cosine forms by default, as in the authors' public code."""
