"""Where the results store lives: `root` when given, else `$GRADALIGN_RESULTS`, else `results/` of the checkout.

A foundation of its own so that code below the results layer (the book's supervised reference, which reads
committed runs) finds the same folder as `results.ResultStore`.
"""

from __future__ import annotations

import os
from pathlib import Path

from gradalign.environment import project_root
from gradalign.errors import ConfigError


def results_root(root: str | Path | None = None) -> Path:
    """The results store's root; an empty `GRADALIGN_RESULTS` is refused (it would mean the working folder)."""
    env = os.environ.get("GRADALIGN_RESULTS")
    if root is None and env is not None and not env.strip():
        raise ConfigError("GRADALIGN_RESULTS is set but empty; unset it (results/ of the checkout) or name a folder")
    return Path(root or env or project_root() / "results")
