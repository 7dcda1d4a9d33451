"""The exponential moving average of a network (BYOL's target). Mean Teacher uses torch's AveragedModel;
LGA's bias-corrected gradient EMAs live with Algorithm 1 (`methods.lga.ema_update`)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def ema_network_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """theta_t <- tau theta_t + (1 - tau) theta_o for parameters; buffers (BatchNorm statistics) copied (BYOL)."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1 - tau)
    for t, o in zip(target.buffers(), online.buffers()):
        t.copy_(o)
