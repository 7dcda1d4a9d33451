"""Which library code a piece of code runs, and a fingerprint of it to tell when a stored record is stale.

The closure follows `import gradalign...` statements transitively through the package's source (with the
parent packages an import executes). The fingerprint maps each file of the closure to the sha256 of its
bytes: a record stores the fingerprint of its experiment's module, and the book compares it with today's
to flag the record as stale (the code that produced it has changed since) and name the files that changed.
Raw bytes are the first test: the same on every Python version. A comment edit moves them, so a record also
stores a behaviour fingerprint (below), which a comment, a reformat or a moved function does not move.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/gradalign


@functools.lru_cache(maxsize=1024)
def gradalign_imports(source: str) -> frozenset[str]:
    """Module names a source text imports from gradalign (a `from a import b` also counts a.b)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(n for n in names if n == "gradalign" or n.startswith("gradalign."))


def library_closure(source: str, parents: bool = True, package: Path = PACKAGE) -> list[Path]:
    """The gradalign source files a piece of code imports, followed transitively.

    `parents`: also the `__init__` of every parent package, which Python runs first (the book's notebook
    cache wants them all); without, only the modules named in import statements (a fingerprint of what
    computes a result, not of the registries the package's `__init__` files fill).
    """
    modules = module_index(package)
    seen: dict[str, str] = {}
    looked: set[str] = set()  # names already looked up (a name, not a module: `from a import b` counts a.b)
    todo = list(gradalign_imports(source))
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1 if parents else len(parts), len(parts) + 1):  # a.b.c runs a/__init__, a/b/__init__
            sub = ".".join(parts[:i])
            if sub in looked:
                continue
            looked.add(sub)
            path = modules.get(sub)
            if path is not None:
                seen[sub] = path
                with open(path, encoding="utf-8") as handle:
                    todo += list(gradalign_imports(handle.read()))
    return sorted({Path(path) for path in seen.values()})


def module_index(package: Path = PACKAGE) -> dict[str, str]:
    """{module name: source file} of every module in `package` (a package's `__init__.py` before a module file
    of the same name, as Python's import takes it), from one walk of its folders: a closure looks up about a
    hundred names, and two file checks per name took most of its time. The walk also lists names no import
    reaches (a folder that is not a package); only names taken from import statements are looked up in it."""
    root, index = str(package), {}
    for folder, _, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        prefix = "gradalign" if rel == "." else "gradalign." + rel.replace(os.sep, ".")
        for file in files:
            if file == "__init__.py":
                index[prefix] = os.path.join(folder, file)
            elif file.endswith(".py"):
                index.setdefault(f"{prefix}.{file[:-3]}", os.path.join(folder, file))
    return index


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def code_fingerprint(module: str) -> dict[str, str]:
    """{path relative to the package: sha256 prefix} of every file module `module` runs (itself included)."""
    files = library_closure(f"import {module}", parents=False)
    return {path.relative_to(PACKAGE).as_posix(): file_digest(path.read_bytes()) for path in files}


def changed_files(stored: dict[str, str], current: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two fingerprints, sorted."""
    return sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))


# --- Behaviour: the same code in other bytes -------------------------------------------------------------------
# A record is current when the code it ran cannot have changed its numbers. Bytes are too strict for that (a
# comment, a reformat or a moved function moves them), so a record also stores the *behaviour fingerprint*:
# every top-level definition its experiment reaches, hashed by its syntax tree without docstrings, keyed by its
# name, not by its file. Moving a function to another module keeps the fingerprint; renaming it or changing
# its body moves it. What it cannot tell (a body edited without effect on the numbers) the smoke canary
# decides (`gradalign.records.canary`).


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """`tree` with every bare string statement (docstrings, string comments) removed; an emptied body gets
    `pass`, so that a function that was only a docstring still parses the same way."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            node.body = kept or [ast.Pass()]
    return tree


def _statement_keys(stmt: ast.stmt) -> list[str]:
    """The names a top-level statement defines: a def or class its name, an assignment its targets, an import
    what it binds (`import <name>`); any other statement is keyed by its own digest."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = sorted({n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
        return names or [f"<statement {_digest(stmt)}>"]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [f"import {a.asname or a.name}" for a in stmt.names]
    return [f"<statement {_digest(stmt)}>"]


def _digest(node: ast.AST) -> str:
    return file_digest(ast.dump(node, include_attributes=False).encode())


def _import_value(stmt: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    """What an import binds, independent of where the package keeps it: a gradalign import by the name it
    binds to (the definition itself is in the fingerprint under its own name), any other by module and name."""
    module = stmt.module if isinstance(stmt, ast.ImportFrom) else None
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and (module or "").startswith("gradalign"):
        return f"gradalign:{alias.name}"
    if isinstance(stmt, ast.Import) and alias.name.startswith("gradalign"):
        return "gradalign module"
    return f"{module or ''}:{alias.name}"


def module_behaviour(source: str) -> dict[str, str]:
    """{name: digest} of a module's top-level definitions, docstrings dropped (see above)."""
    return dict(_module_behaviour(source))


@functools.lru_cache(maxsize=1024)
def _module_behaviour(source: str) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for stmt in _without_docstrings(ast.parse(source)).body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                out[f"import {alias.asname or alias.name}"] = file_digest(_import_value(stmt, alias).encode())
            continue
        for key in _statement_keys(stmt):
            out[key] = _digest(stmt) if key not in out else file_digest((out[key] + _digest(stmt)).encode())
    return tuple(out.items())


def behaviour_fingerprint(module: str, package: Path = PACKAGE) -> dict[str, str]:
    """{name: digest} of every top-level definition in the files module `module` runs (`library_closure`).
    A name defined in several modules (`run`, `EXPERIMENTS`) gets one digest of all its definitions."""
    return files_behaviour(library_closure(f"import {module}", parents=False, package=package))


def files_behaviour(paths: list[Path]) -> dict[str, str]:
    """{name: digest} of the top-level definitions of these source files, merged by name (see above)."""
    merged: dict[str, list[str]] = {}
    for path in paths:
        for name, digest in module_behaviour(path.read_text()).items():
            merged.setdefault(name, []).append(digest)
    for name in [n for n in merged if n.startswith("import ")]:  # one binding, however many modules import it
        merged[name] = sorted(set(merged[name]))
    return {
        name: digests[0] if len(digests) == 1 else file_digest("".join(sorted(digests)).encode())
        for name, digests in sorted(merged.items())
    }


def where_defined(names: list[str], module: str) -> dict[str, list[str]]:
    """For each name, the files of `module`'s closure that define it today (to name a changed definition)."""
    out: dict[str, list[str]] = {name: [] for name in names}
    for path in library_closure(f"import {module}", parents=False):
        for name in set(module_behaviour(path.read_text())) & set(out):
            out[name].append(path.relative_to(PACKAGE).as_posix())
    return out
