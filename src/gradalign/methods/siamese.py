"""One step of Siamese training with a DirectPred predictor (Halvagal, Laborieux & Zenke 2022, §3, Table 1).

Online branch: backbone -> projector -> z. The predictor W_P = U D^α Uᵀ is not learned (Eq. 1,
DirectPred): it is rebuilt every step from a running correlation of the online z of both views (one
update per step with the two views together; the authors' code updates once per view). Target: an EMA
copy (BYOL; updated by the caller after the step) or the online output detached (SimSiam). Loss
`DEEP_LOSSES[loss]` (L, Eq. 2, or L_iso, Eq. 8, cosine forms) summed over both orderings of the views.
A linear readout on detached features (own optimizer) tracks accuracy; its loss shares the backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gradalign.methods.divergence import raise_if_not_finite


def siamese_step(
    run, x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor, k: int, previous_loss
) -> dict[str, torch.Tensor]:
    """One SGD step of `run.net` (and the readout) on two views; (loss, readout hits, labelled count).

    `run` provides net, target (or None), predictor, loss_fn, readout, opt, readout_opt and `autocast`
    (bool). The finiteness check shares the host read the eigendecomposition needs anyway.
    """
    with torch.autocast(x1.device.type, dtype=torch.bfloat16, enabled=run.autocast):
        (h1, z1), (h2, z2) = run.net(x1), run.net(x2)
        if run.target is not None:
            with torch.no_grad():
                t1, t2 = run.target(x1)[1], run.target(x2)[1]
        else:
            t1, t2 = z1.detach(), z2.detach()
    z1, z2, t1, t2 = (v.float() for v in (z1, z2, t1, t2))
    run.predictor.update(torch.cat([z1, z2]))
    raise_if_not_finite(
        "Siamese training", k, {"the previous loss": previous_loss, "the projector correlation": run.predictor.C}
    )
    W_P = run.predictor.matrix()
    loss = run.loss_fn(z1, t2, W_P) + run.loss_fn(z2, t1, W_P)
    logits, y = run.readout(torch.cat([h1, h2]).detach().float()), labels.repeat(2)
    labelled = (y >= 0).sum().float()
    readout_loss = F.cross_entropy(logits, y, ignore_index=-1, reduction="sum") / labelled.clamp(min=1)
    run.opt.zero_grad(set_to_none=True)
    run.readout_opt.zero_grad(set_to_none=True)
    (loss + readout_loss).backward()  # disjoint parameters (features detached): one backward for both
    run.opt.step()
    run.readout_opt.step()
    return {"loss": loss.detach(), "hits": logits.argmax(1).eq(y).sum().float(), "labelled": labelled}
