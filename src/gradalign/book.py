"""Build the book: execute the notebooks of `_toc.yml` with papermill, then jupyter-book (Sphinx).

`<out>/book-src/` receives `_config.yml`, `_toc.yml`, the pages of `book/`, the executed notebooks
(same relative paths as the sources, so launch and download buttons point at the sources) and the
generated report; jupyter-book then builds `<out>/html` with warnings treated as errors. A notebook
is re-executed only when its inputs changed: its source, the gradalign modules it imports (followed
transitively), the stored records of the experiments it shows, and the preset.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gradalign.environment import project_root
from gradalign.errors import BookBuildError, ConfigError
from gradalign.fingerprint import PACKAGE, library_closure
from gradalign.results import ResultStore
from gradalign.toc import toc_files

# written from the store at build time
GENERATED = ("book/report", "book/how_to_run", "book/compute", "book/performance")
CELL_TIMEOUT_S = 1800  # a hung cell fails the build instead of stalling it


def notebook_code(path: Path) -> str:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            lines += [ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def input_key(notebook: Path, preset: str, store: ResultStore) -> str:
    from gradalign.experiments import EXPERIMENTS

    digest = hashlib.sha256()
    digest.update(f"preset={preset}\nresults={store.root}\n".encode())
    digest.update(notebook.read_bytes())
    for path in library_closure(notebook_code(notebook)):
        digest.update(str(path.relative_to(PACKAGE)).encode() + path.read_bytes())
    rel = notebook.resolve().relative_to(project_root()).as_posix()
    for exp in sorted(EXPERIMENTS.values(), key=lambda e: e.id):
        if exp.notebook == rel:
            for record in store.files(exp.id):
                digest.update(str(record.name).encode() + record.read_bytes())
    return digest.hexdigest()


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.exists() and dst.read_bytes() == src.read_bytes():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def _write_if_changed(text: str, dst: Path) -> None:
    if dst.exists() and dst.read_text() == text:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text)


def execute(notebook: Path, target: Path, preset: str) -> None:
    import papermill

    tmp = target.with_suffix(".running.ipynb")
    target.parent.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("GRADALIGN_BATCH")
    os.environ["GRADALIGN_BATCH"] = "1"  # the kernel inherits it: no live widgets in batch runs
    try:
        papermill.execute_notebook(
            str(notebook),
            str(tmp),
            parameters={"preset": preset},
            cwd=str(notebook.parent),
            kernel_name="python3",
            progress_bar=False,
            log_output=False,
            execution_timeout=CELL_TIMEOUT_S,
        )
    finally:
        if previous is None:
            os.environ.pop("GRADALIGN_BATCH")
        else:
            os.environ["GRADALIGN_BATCH"] = previous
    _hide_default_parameters(tmp)
    tmp.replace(target)


def _hide_default_parameters(path: Path) -> None:
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


def build_book(
    preset: str = "auto", out: str | Path = "_build", force: bool = False, store: ResultStore | None = None
) -> dict:
    """Execute what changed and build `<out>/html`; returns {'executed': [...], 'skipped': [...], 'html': path}."""
    from gradalign.config import check_preset
    from gradalign.pages import compute_markdown, fill_markers, how_to_run_markdown, page_base, performance_markdown
    from gradalign.report import report_markdown

    check_preset(preset, allow_auto=True)
    env_preset = os.environ.get("GRADALIGN_PRESET")
    if env_preset and env_preset != preset:  # the notebooks would silently follow the environment
        raise ConfigError(f"GRADALIGN_PRESET={env_preset} conflicts with --preset {preset}; unset one")
    root = project_root()
    out = Path(out).resolve()
    store = store or ResultStore()
    src = out / "book-src"
    cache_path = out / "executed.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() and not force else {}
    executed, skipped = [], []
    for name in ("_config.yml", "_toc.yml"):
        _copy_if_changed(root / name, src / name)
    pages = []
    for entry in toc_files(root):
        if entry in GENERATED:
            continue
        nb = root / f"{entry}.ipynb"
        if nb.exists():
            target = src / f"{entry}.ipynb"
            if target.exists() and cache.get(entry) == input_key(nb, preset, store):
                skipped.append(entry)
                continue
            print(f"executing {entry}.ipynb (preset {preset})", file=sys.stderr, flush=True)
            execute(nb, target, preset)
            cache[entry] = input_key(nb, preset, store)  # after the run: it may have stored new records
            cache_path.write_text(json.dumps(cache, indent=1))
            executed.append(entry)
        else:
            page = next(
                (root / f"{entry}{ext}" for ext in (".md", ".ipynb") if (root / f"{entry}{ext}").exists()), None
            )
            if page is None:
                raise ConfigError(f"_toc.yml lists {entry!r} but neither {entry}.md nor {entry}.ipynb exists")
            pages.append(page)
    # after the notebooks, which may have stored records: generated text shows what the store holds now
    for page in pages:
        text = page.read_text()
        if page.suffix == ".md":
            text = fill_markers(text, preset, store, page_base(page, root))
        _write_if_changed(text, src / page.relative_to(root))
    _write_if_changed(report_markdown(preset, store), src / "book" / "report.md")
    _write_if_changed(how_to_run_markdown(), src / "book" / "how_to_run.md")
    _write_if_changed(compute_markdown(preset, store), src / "book" / "compute.md")
    _write_if_changed(performance_markdown(store.root), src / "book" / "performance.md")
    _jupyter_book(src, out)
    return {"executed": executed, "skipped": skipped, "html": out / "html"}


def _jupyter_book(src: Path, out: Path) -> None:
    """jupyter-book writes `<path-output>/_build/html`; we build there and expose it as `<out>/html`."""
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [
        str(jb) if jb.exists() else "jupyter-book",
        "build",
        str(src),
        "--path-output",
        str(out / "jb"),
        "--builder",
        "html",
        "-W",
        "-n",
        "--keep-going",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-6000:] + result.stderr[-6000:])
        raise BookBuildError(f"jupyter-book build failed (exit {result.returncode}); warnings count as errors")
    html = out / "html"
    if html.is_symlink() or html.exists():
        if html.is_symlink():
            html.unlink()
        else:
            shutil.rmtree(html)
    html.symlink_to(out / "jb" / "_build" / "html", target_is_directory=True)
