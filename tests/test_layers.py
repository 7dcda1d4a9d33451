"""The library's imports flow one way (DESIGN.md, Layout), files stay short, and no module imports in a cycle.

Every `gradalign` import counts, including the lazy ones inside functions: a lazy import is still a
dependency. A module may import modules of its own layer or of a lower one; within a layer the module
graph must have no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "gradalign"

LAYERS = [
    # 0: foundations (the root's modules and the run store)
    (
        "errors",
        "config",
        "params",
        "environment",
        "runtime",
        "progress",
        "papers",
        "elements",
        "sizes",
        "store",
        "__init__",
    ),
    ("data",),
    ("models",),
    ("methods",),
    ("analysis",),  # may import methods, never the reverse
    ("training",),
    ("benchmarks",),
    ("experiments",),
    ("records",),  # made, kept, judged
    ("compute",),  # sweeps, pilots, benchmarks, GPU windows
    ("book",),
    ("cli", "__main__"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> int:
    first = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if first in names:
            return rank
    raise AssertionError(f"{module} belongs to no layer of tests/test_layers.py: add it to LAYERS")


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The gradalign modules `path` imports (a `from a.b import c` of a submodule c counts as a.b.c)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] == "gradalign"}
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def back_edges(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} -> {b}" for a, targets in edges.items() for b in targets if b != "gradalign" and layer_of(b) > layer_of(a)
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_imports_flow_one_way():
    assert back_edges(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_checks_catch_a_back_edge_and_a_cycle():
    edges = {"gradalign.methods.a": {"gradalign.training.loop"}, "gradalign.training.loop": set()}
    assert back_edges(edges) == ["gradalign.methods.a -> gradalign.training.loop"]
    loop = {"gradalign.data.a": {"gradalign.data.b"}, "gradalign.data.b": {"gradalign.data.a"}}
    assert cycles(loop) == [["gradalign.data.a", "gradalign.data.b"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_source_file_is_over_400_lines(path):
    assert len(path.read_text().splitlines()) <= 400


ROOT_MODULES_AT_MOST = 12  # issue 44: the entry points and the handful of modules everything imports


def test_the_root_holds_at_most_twelve_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES_AT_MOST, f"{len(root)} modules at src/gradalign/: {root}; move one into a folder"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))
def test_every_folder_says_what_lives_there_and_what_it_may_import(folder):
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
    assert doc.count("\n") >= 2, f"{folder}/__init__.py: a docstring of three lines or more (what lives there)"
    assert "import" in doc.lower(), f"{folder}/__init__.py: its docstring says what the folder may import"


def test_every_folder_is_one_layer():
    """A folder's modules share its layer: the test reads a folder as one floor (`layer_of`)."""
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= {name for names in LAYERS for name in names}
