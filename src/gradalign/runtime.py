"""Device selection, seeding and thread pinning (deterministic CPU results).

Device names and GRADALIGN_THREADS come from users; both are checked here, before any compute, and a
bad one is a one-line `ConfigError` naming the valid choices.
"""

from __future__ import annotations

import contextlib
import os
import random
import re

from gradalign.errors import ConfigError

DEFAULT_THREADS = 2
"""CPU threads used by runs: seeded CPU training is bit-identical at a fixed thread count."""

MAX_THREADS = 1024
THREADS_VARIABLE = "GRADALIGN_THREADS"
_CUDA_NAME = re.compile(r"cuda(?::(\d+))?")


def device_choices() -> list[str]:
    """The device names this machine accepts: auto, cpu, and cuda, cuda:0, ... where CUDA is present."""
    import torch

    cuda = ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu"] + cuda


def _canonical_device(name: str) -> str:
    """`name` checked against this machine: 'cpu' or 'cuda[:N]' (auto resolved), else a ConfigError."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    match = _CUDA_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise ConfigError(f"unknown device {name!r}; choose one of: {', '.join(device_choices())}")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {name!r} requested but CUDA is not available here; choose one of: {', '.join(device_choices())}"
        )
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise ConfigError(
            f"device {name!r} is not there ({torch.cuda.device_count()} CUDA device(s)); "
            f"choose one of: {', '.join(device_choices())}"
        )
    return name


def check_device(name: str) -> None:
    """Raise a one-line ConfigError unless `name` is a device this machine has (see `select_device`)."""
    _canonical_device(name)


def select_device(name: str = "auto"):
    """`auto` picks CUDA when present, else CPU; `cpu`, `cuda` and `cuda:N` must exist on this machine."""
    import torch

    return torch.device(_canonical_device(name))


def threads_from_env() -> int:
    """The CPU thread count of runs: GRADALIGN_THREADS (an integer in [1, 1024], ASCII digits only: int() would
    also take a full-width "２" or an Arabic-Indic digit); unset or empty: 2."""
    raw = os.environ.get(THREADS_VARIABLE, "")
    if not raw.strip():
        return DEFAULT_THREADS
    if not re.fullmatch(r"\s*\+?[0-9]+\s*", raw, re.ASCII) or int(raw) < 1:
        raise ConfigError(f"{THREADS_VARIABLE} must be an integer >= 1; got {raw!r}")
    if int(raw) > MAX_THREADS:
        raise ConfigError(f"{THREADS_VARIABLE} must be an integer >= 1 and <= {MAX_THREADS}; got {raw!r}")
    return int(raw)


def pin_threads(n: int | None = None) -> int:
    """Fix torch's intra-op thread count (`n`, else GRADALIGN_THREADS, default 2)."""
    import torch

    if n is None:
        n = threads_from_env()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ConfigError(f"thread count must be an integer >= 1 and <= {MAX_THREADS}; got {n!r}")
    torch.set_num_threads(n)
    return n


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def flushed_denormals(device):
    """On the CPU, flush denormal floats to zero for the block: a deep VGG without BN (Table 7) carries
    vanishing activations and gradients, and denormal arithmetic made its steps ~10x slower here (measured:
    16 s against 1.5 s per SGR step of VGG-57 at width 0.125). Values below ~1e-38 become 0; CUDA
    flushes them in its fast paths anyway."""
    if device.type != "cpu":
        yield
        return
    import torch

    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
