"""The pages of the book: the `root:` and `file:` entries of `_toc.yml`, in order.

Read with a pattern rather than a YAML parser, so that `gradalign run` and the report need no book
toolchain; `_toc.yml` is ours and keeps one entry per line.
"""

from __future__ import annotations

import re
from pathlib import Path

from gradalign.environment import project_root

ENTRY = re.compile(r"^\s*-?\s*(?:root|file):\s*(\S+)\s*$", re.MULTILINE)


def toc_files(root: Path | None = None) -> list[str]:
    """Every page of `_toc.yml` (the root page first), as paths without suffix relative to the project root."""
    path = (root or project_root()) / "_toc.yml"
    return ENTRY.findall(path.read_text()) if path.exists() else []


def in_book(notebook: str, root: Path | None = None) -> bool:
    """Whether `notebook` (a path relative to the project root, with its suffix) is a page of the book."""
    return str(Path(notebook).with_suffix("").as_posix()) in toc_files(root)
