"""Which library code a piece of code runs, and a fingerprint of it to tell when a stored record is stale.

The closure follows `import gradalign...` statements transitively through the package's source (with the
parent packages an import executes). The fingerprint maps each file of the closure to the sha256 of its
bytes: a record stores the fingerprint of its experiment's module, and the book compares it with today's
to flag the record as stale (the code that produced it has changed since) and name the files that changed.
Raw bytes, not a parse tree: the same on every Python version, at the price of flagging comment edits.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def module_file(name: str) -> Path | None:
    """The source file of a gradalign module name (`gradalign.a.b`), or None."""
    rel = Path(*name.split(".")[1:])
    if not rel.parts:
        return PACKAGE / "__init__.py"
    for candidate in (PACKAGE / rel / "__init__.py", PACKAGE / rel.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


def gradalign_imports(source: str) -> set[str]:
    """Module names a source text imports from gradalign (a `from a import b` also counts a.b)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n == "gradalign" or n.startswith("gradalign.")}


def library_closure(source: str, parents: bool = True) -> list[Path]:
    """The gradalign source files a piece of code imports, followed transitively.

    `parents`: also the `__init__` of every parent package, which Python runs first (the book's notebook
    cache wants them all); without, only the modules named in import statements (a fingerprint of what
    computes a result, not of the registries the package's `__init__` files fill).
    """
    seen: dict[str, Path] = {}
    todo = list(gradalign_imports(source))
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1 if parents else len(parts), len(parts) + 1):  # a.b.c runs a/__init__, a/b/__init__
            sub = ".".join(parts[:i])
            path = module_file(sub)
            if path is not None and sub not in seen:
                seen[sub] = path
                todo += list(gradalign_imports(path.read_text()))
    return sorted(set(seen.values()))


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def code_fingerprint(module: str) -> dict[str, str]:
    """{path relative to the package: sha256 prefix} of every file module `module` runs (itself included)."""
    files = library_closure(f"import {module}", parents=False)
    return {path.relative_to(PACKAGE).as_posix(): file_digest(path.read_bytes()) for path in files}


def changed_files(stored: dict[str, str], current: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two fingerprints, sorted."""
    return sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))
