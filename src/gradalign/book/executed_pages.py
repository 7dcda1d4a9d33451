"""Executed notebooks made into pages: the preset in force shown instead of the notebook's default, paths inside
the checkout written relative to it, and a copy executed elsewhere (nbval in the test suite) adopted as the page.
"""

from __future__ import annotations

from pathlib import Path

from gradalign.environment import project_root


def relative_paths(text: str, root: Path | None = None) -> str:
    """Paths inside the checkout written relative to it: `/home/me/gradalign/data/x` -> `data/x`. The book is
    read on other machines, where the absolute path of the one that built it means nothing."""
    root_text = str(root or project_root())
    return text.replace(root_text + "/", "").replace(root_text, ".")


def relative_output_paths(path: Path) -> None:
    """`relative_paths` on every text output of an executed notebook."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            fields = [("text", output)] if "text" in output else []
            fields += [(key, output["data"]) for key in output.get("data", {}) if key.startswith("text/")]
            for key, holder in fields:
                value = holder[key]
                new = relative_paths(value) if isinstance(value, str) else [relative_paths(v) for v in value]
                if new != value:
                    holder[key], changed = new, True
    if changed:
        nbformat.write(nb, path)


def hide_default_parameters(path: Path) -> None:
    """Papermill adds an `injected-parameters` cell after the `parameters` cell; the page shows only the one
    in force."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    tags = [set(cell.get("metadata", {}).get("tags", [])) for cell in nb.cells]
    if not any("injected-parameters" in t for t in tags):
        return
    for cell, cell_tags in zip(nb.cells, tags):
        if "parameters" in cell_tags and "remove-cell" not in cell_tags:
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "remove-cell"]
    nbformat.write(nb, path)


def adopt(copy: Path, notebook: Path, target: Path, preset: str) -> bool:
    """Take `copy`, the notebook executed elsewhere at `preset` (nbval, in the test suite: the root conftest.py),
    as its executed page, when it is that notebook's code at that preset; False (execute it here) otherwise. The
    page then shows the preset in force, as papermill's injected cell does: the kernel read it from
    `GRADALIGN_PRESET` (`notebook.resolve_preset`)."""
    import nbformat

    if not copy.exists():
        return False
    nb, source = nbformat.read(copy, as_version=4), nbformat.read(notebook, as_version=4)
    if nb.metadata.get("gradalign", {}).get("parameters") != {"preset": preset} or [c.source for c in nb.cells] != [
        c.source for c in source.cells
    ]:
        return False
    at = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if at is not None:
        injected = nbformat.v4.new_code_cell(
            f"# Parameters\npreset = {preset!r}\n", metadata={"tags": ["injected-parameters"]}
        )
        injected.execution_count = nb.cells[at].execution_count
        nb.cells.insert(at + 1, injected)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    hide_default_parameters(target)
    relative_output_paths(target)
    return True
