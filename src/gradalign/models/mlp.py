"""Fully connected ReLU networks (LGA's synthetic study, §3.2: 4 layers of 128 hidden units)."""

from __future__ import annotations

from torch import nn


def relu_mlp(d: int, hidden: int, layers: int, classes: int) -> nn.Sequential:
    """`layers` linear layers (d -> hidden -> ... -> classes) with ReLU between them."""
    sizes = [d] + [hidden] * (layers - 1) + [classes]
    modules = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        modules.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)
