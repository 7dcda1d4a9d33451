"""The divergence check: one host read for a set of quantities; the error names the step and the quantity."""

from __future__ import annotations

import torch

from gradalign.errors import DivergenceError


def raise_if_not_finite(
    what: str, step: int, quantities: dict[str, torch.Tensor | None], hint: str = "lower the learning rate"
) -> None:
    """DivergenceError `"<what> diverged at step <step>: <name> = nan; <hint>"` if any value is NaN or Inf."""
    quantities = {name: v for name, v in quantities.items() if v is not None}
    if not quantities:
        return
    flags = torch.stack([torch.isfinite(v.detach()).all() for v in quantities.values()]).tolist()
    for (name, value), ok in zip(quantities.items(), flags):
        if not ok:
            shown = value.item() if value.numel() == 1 else "non-finite entries"
            raise DivergenceError(f"{what} diverged at step {step}: {name} = {shown}; {hint}")
