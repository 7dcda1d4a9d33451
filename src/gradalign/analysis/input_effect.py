"""Figure 3 of Yang et al. (2024), §4.4: how much the updates of the earlier modules in one step change a
module's local loss through its input alone.

ΔL_k = L_k(θ′_k; x′_{k−1}) − L_k(θ′_k; x_{k−1}), k = 2 … K, with x_{k−1} the input module k had before the
step (what layer-wise and SGR training feed it), x′_{k−1} the same batch through the updated modules
1 … k−1, and θ′_k module k's parameters after its own update, held fixed so that only the input changes (our
reading of "the change of classification loss in each layer caused by the input update from prior layers").
Below zero: the earlier updates handed module k an input it does better on. Two more forward passes a step.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def module_inputs(modules, x: torch.Tensor) -> list[torch.Tensor]:
    """The input of every module on batch x with the current parameters (no graph): x_0, x_1, ..., x_{K−1}."""
    inputs = [x]
    with torch.no_grad():
        for module in modules[:-1]:
            inputs.append(module(inputs[-1]))
    return inputs


def input_effect(modules, heads, x: torch.Tensor, y: torch.Tensor, old: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """ΔL_k for k = 2 … K (keys `input_effect_k`), after a step taken from the inputs `old`
    (`module_inputs` before the step)."""
    new = module_inputs(modules, x)
    out = {}
    with torch.no_grad():
        for k in range(1, len(modules)):
            before = F.cross_entropy(heads[k](modules[k](old[k])), y)
            after = F.cross_entropy(heads[k](modules[k](new[k])), y)
            out[f"input_effect_{k + 1}"] = after - before
    return out
