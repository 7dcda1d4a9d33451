"""Device selection, seeding and thread pinning (deterministic CPU results)."""

from __future__ import annotations

import os
import random

from gradalign.errors import ConfigError

DEFAULT_THREADS = 2
"""CPU threads used by runs: seeded CPU training is bit-identical at a fixed thread count."""


def select_device(name: str = "auto"):
    """`auto` picks CUDA when present, else CPU; `cpu` and `cuda[:i]` are taken as given."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu" or name.startswith("cuda"):
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} requested but CUDA is not available; use 'auto' or 'cpu'")
        return torch.device(name)
    raise ConfigError(f"unknown device {name!r}; choose one of: auto, cpu, cuda")


def pin_threads(n: int | None = None) -> int:
    """Fix torch's intra-op thread count (env GRADALIGN_THREADS, default 2)."""
    import torch

    n = n or int(os.environ.get("GRADALIGN_THREADS", DEFAULT_THREADS))
    torch.set_num_threads(n)
    return n


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
