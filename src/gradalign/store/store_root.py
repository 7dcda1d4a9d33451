"""Where the results store lives: `root` when given, else `$GRADALIGN_RESULTS`, else `results/` of the checkout.

A foundation of its own so that code below the results layer (the book's supervised reference, which reads
committed runs) finds the same folder as `results.ResultStore`. It also holds the one rule for a folder named by an
environment variable (`env_folder`): set but empty is refused in one line, never read as unset. The results store,
the run cache (`runcache.cache_root`), the data root (`data.fashion_mnist.data_root`, which the image sets and
ImageNet read too) and the commands' checks before any compute (`storage.check_data_env`) all apply it.
"""

from __future__ import annotations

import os
from pathlib import Path

from gradalign.environment import project_root
from gradalign.errors import ConfigError


def env_folder(variable: str, unset: str) -> str | None:
    """The folder named by the environment variable `variable`, None when it is unset. Set but empty (or blank) is
    a one-line ConfigError: read as unset it would silently mean `unset` (the checkout's folder, the default)."""
    value = os.environ.get(variable)
    if value is not None and not value.strip():
        raise ConfigError(f"{variable} is set but empty; give it a folder, or unset it for {unset}")
    return value


def results_root(root: str | Path | None = None) -> Path:
    """The results store's root; an empty `GRADALIGN_RESULTS` is refused (it would mean the working folder)."""
    env = env_folder("GRADALIGN_RESULTS", "./results") if root is None else os.environ.get("GRADALIGN_RESULTS")
    return Path(root or env or project_root() / "results")
