"""Build the book: execute the notebooks of `_toc.yml` with papermill, then jupyter-book (Sphinx).

`<out>/book-src/` receives `_config.yml` (with the repository buttons switched on when its `repository: url`
is set), `_toc.yml`, the pages of `book/`, the executed notebooks (same relative paths as the sources, so
download and edit buttons point at the sources), the generated pages, the source archive with its *Get the
code* page (`gradalign.book.source_archive`), and each page's records as JSON and their curves as CSV
(`gradalign.book.downloads`), linked from the end of the page; jupyter-book then builds `<out>/html` with warnings
treated as errors. A notebook is re-executed only when its inputs changed: its source, the gradalign modules
it imports (followed transitively), the stored records of the experiments it shows, and the preset.

A build with nothing changed (a second `make book`) executes nothing, reads and checks each stored record and run
once (`memoized_reads`), rewrites no source under `book-src/` (`written` in the result: the pages, downloads and
notebooks whose content changed), packs the source archive only for a new commit, and lets Sphinx build
incrementally: it reads again only the sources that changed (`sphinx_read`), none here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gradalign.environment import project_root
from gradalign.errors import BookBuildError, ConfigError
from gradalign.book.executed_pages import hide_default_parameters, relative_output_paths, adopt, relative_paths
from gradalign.store.fingerprint import files_behaviour, library_closure
from gradalign.records.results import ResultStore
from gradalign.book.source_archive import code_page_markdown, repository_url, write_archive
from gradalign.book.memo import memoized_reads
from gradalign.book.toc import toc_files

# written from the store at build time
GENERATED = (
    "book/report",
    "book/how_to_run",
    "book/compute",
    "book/performance",
    "book/get_the_code",
    "book/appendix/api",  # gradalign.book.api_page: autodoc of the methods, the loop and the entry points
)
DOWNLOADS_TAG = "gradalign-downloads"  # the generated last cell of a notebook page: its records and curves
DIRTY_NOTE = """

**What `+dirty` means.** A commit followed by `+dirty` says that the record was computed from a working tree
with changes not yet committed: the code that ran was that commit plus those changes, so the commit alone may
not reproduce it bit for bit. The code column still says whether the library files the experiment ran have
changed since (their fingerprint is stored in the record); rerunning the experiment from a clean checkout gives
a record with the plain commit.
"""
CELL_TIMEOUT_S = 1800  # a hung cell fails the build instead of stalling it


RUN_READERS = ("pilot_view", "rerun_view", "table2_projection")
"""The page helpers that read committed runs (and window reports) rather than records: a notebook that calls one
is executed again when a run is committed, not only when a record changes."""


def notebook_cells(path: Path) -> list[dict]:
    """The cells of a notebook as nbformat reads them (`cell_type`, `source` as one string, `metadata`), read as
    plain JSON when it is in format 4: importing nbformat (its JSON schema validator) costs a second, which an
    unchanged build need not spend."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("nbformat") != 4:
        import nbformat

        return nbformat.read(path, as_version=4).cells
    return [
        {**cell, "source": "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]}
        for cell in data["cells"]
    ]


def notebook_code(path: Path) -> str:
    lines = []
    for cell in notebook_cells(path):
        if cell["cell_type"] == "code":
            lines += [ln for ln in cell["source"].splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def input_key(notebook: Path, preset: str, store: ResultStore) -> str:
    from gradalign.experiments import EXPERIMENTS

    digest = hashlib.sha256()
    digest.update(f"preset={preset}\nresults={store.root}\n".encode())
    digest.update(notebook.read_bytes())
    # the library by behaviour, not by bytes: a comment, a docstring or a moved function re-executes nothing
    code = notebook_code(notebook)
    behaviour = files_behaviour(library_closure(code))
    digest.update(json.dumps(behaviour, sort_keys=True).encode())
    rel = notebook.resolve().relative_to(project_root()).as_posix()
    for exp in sorted(EXPERIMENTS.values(), key=lambda e: e.id):
        if exp.notebook == rel:
            for record in store.files(exp.id):
                digest.update(str(record.name).encode() + record.read_bytes())
    if any(f"{reader}(" in code for reader in RUN_READERS):
        for folder in ("runs", "windows"):  # entries are immutable once committed: their names tell what changed
            names = sorted(p.relative_to(store.root).as_posix() for p in (store.root / folder).glob("**/*.json"))
            digest.update("\n".join(names).encode())
    return digest.hexdigest()


def _write_if_changed(text: str, dst: Path) -> bool:
    """Write `text` to `dst` unless it holds it already (an unchanged mtime: Sphinx does not read it again)."""
    if dst.exists() and dst.read_text() == text:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text)
    return True


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
    hide_default_parameters(tmp)
    relative_output_paths(tmp)
    tmp.replace(target)


def book_jobs() -> int:
    """Notebooks executed at once: `GRADALIGN_BOOK_JOBS`, else the machine's cores (at most 4). Each kernel runs
    on `GRADALIGN_THREADS` threads (the test suite's build: 1), so one notebook at a time left a core idle."""
    given = os.environ.get("GRADALIGN_BOOK_JOBS", "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise ConfigError(f"GRADALIGN_BOOK_JOBS must be a whole number >= 1; got {given!r}")
        return int(given)
    return max(1, min(4, os.cpu_count() or 1))


def execute_all(stale: list[tuple[str, Path, Path]], preset: str, jobs: int):
    """Execute each (entry, notebook, target) of `stale`, `jobs` at a time in spawned processes (one kernel each);
    yield (entry, notebook) as each finishes. Runs they share wait on each other's run-cache lock (`runcache`), and
    records are written atomically. A failing notebook stops the build with its error once the others end."""
    if jobs <= 1 or len(stale) <= 1:
        for entry, nb, target in stale:
            print(f"executing {entry}.ipynb (preset {preset})", file=sys.stderr, flush=True)
            execute(nb, target, preset)
            yield entry, nb
        return
    import concurrent.futures
    import multiprocessing

    failed = None
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {}
        for entry, nb, target in stale:
            print(f"executing {entry}.ipynb (preset {preset}, {jobs} at a time)", file=sys.stderr, flush=True)
            futures[pool.submit(execute, nb, target, preset)] = (entry, nb)
        for future in concurrent.futures.as_completed(futures):
            error = future.exception()
            if error is None:
                yield futures[future]
            elif failed is None:
                failed = error
    if failed is not None:
        raise failed


def build_book(
    preset: str = "auto",
    out: str | Path = "_build",
    force: bool = False,
    store: ResultStore | None = None,
    executed_copies: Path | None = None,
) -> dict:
    """Execute what changed and build `<out>/html`; returns {'executed': [...], 'adopted': [...], 'skipped': [...],
    'written': [...], 'sphinx_read': n, 'html': path}. `written`: the sources under `<out>/book-src` it wrote (only
    those whose content changed); `sphinx_read`: how many sources Sphinx read again (added or changed), None when
    its log did not say. `executed_copies`: a folder of notebooks already executed at `preset` against `store`
    (`adopt`), by their toc entries (`<executed_copies>/notebooks/lga/01_linear_regression.ipynb`): those are not
    executed again."""
    from gradalign.book.api_page import api_markdown
    from gradalign.config import check_preset
    from gradalign.book.pages import (
        compute_markdown,
        fill_markers,
        how_to_run_markdown,
        page_base,
        performance_markdown,
    )
    from gradalign.book.report import report_markdown

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
    executed, skipped, written = [], [], []  # written: the Sphinx sources this build wrote, under <src>

    def write(text: str, dst: Path) -> None:
        if _write_if_changed(text, dst):
            written.append(dst.relative_to(src).as_posix())

    write(book_config((root / "_config.yml").read_text()), src / "_config.yml")
    write((root / "_toc.yml").read_text(), src / "_toc.yml")
    pages, notebooks, stale = [], [], []
    with memoized_reads():  # nothing writes to the store before the notebooks run
        for entry in toc_files(root):
            if entry in GENERATED:
                continue
            nb = root / f"{entry}.ipynb"
            if nb.exists():
                target = src / f"{entry}.ipynb"
                notebooks.append((entry, nb, target))
                if target.exists() and cache.get(entry) == input_key(nb, preset, store):
                    skipped.append(entry)
                else:
                    stale.append((entry, nb, target))
            else:
                page = next(
                    (root / f"{entry}{ext}" for ext in (".md", ".ipynb") if (root / f"{entry}{ext}").exists()), None
                )
                if page is None:
                    raise ConfigError(f"_toc.yml lists {entry!r} but neither {entry}.md nor {entry}.ipynb exists")
                pages.append(page)
    copies = Path(executed_copies) if executed_copies else None
    adopted = [e for e, nb, t in stale if copies and adopt(copies / f"{e}.ipynb", nb, t, preset)]
    for entry, nb, _ in stale:
        if entry in adopted:
            cache[entry] = input_key(nb, preset, store)
            cache_path.write_text(json.dumps(cache, indent=1))
    stale = [s for s in stale if s[0] not in adopted]
    for entry, nb in execute_all(stale, preset, book_jobs()):
        cache[entry] = input_key(nb, preset, store)  # after the run: it may have stored new records
        cache_path.write_text(json.dumps(cache, indent=1))
        executed.append(entry)
    executed.sort(key=[entry for entry, _, _ in notebooks].index)  # toc order, whatever order they ended in
    # after the notebooks, which may have stored records: generated text shows what the store holds now. From here
    # on nothing writes to the store, so each record and run is read and checked once (`memoized_reads`), and a
    # page is written only when its text changed (Sphinx then reads again only the pages that changed).
    with memoized_reads():
        for entry, nb, target in notebooks:
            changed = add_downloads(target, page_records(nb, preset, store), src)
            written += [path.relative_to(src).as_posix() for path in changed]
        for page in pages:
            text = page.read_text()
            if page.suffix == ".md":
                text = relative_paths(fill_markers(text, preset, store, page_base(page, root)))
            write(text, src / page.relative_to(root))
        write(relative_paths(report_markdown(preset, store)), src / "book" / "report.md")
        write(relative_paths(how_to_run_markdown()), src / "book" / "how_to_run.md")
        write(api_markdown(), src / "book" / "appendix" / "api.md")
        compute = compute_markdown(preset, store)
        compute = relative_paths(compute) + (DIRTY_NOTE if "+dirty" in compute else "")
        write(compute, src / "book" / "compute.md")
        archive, sha, dirty = write_archive(root, src / "book" / "files")
        repository = repository_url((root / "_config.yml").read_text())
        write(code_page_markdown(f"files/{archive.name}", sha, dirty, repository), src / "book" / "get_the_code.md")
        write(relative_paths(performance_markdown(store.root)), src / "book" / "performance.md")
    read = _jupyter_book(src, out)
    return {
        "executed": executed,
        "adopted": adopted,
        "skipped": skipped,
        "written": written,
        "sphinx_read": read,
        "html": out / "html",
    }


def book_config(text: str) -> str:
    """`_config.yml` as the build uses it: unchanged, unless `repository: url` is set, which switches on the
    theme's repository, issues and edit-this-page buttons (the sources keep their repository paths)."""
    import yaml

    if not repository_url(text):
        return text
    config = yaml.safe_load(text)
    config["repository"] = {"branch": "main", "path_to_book": "", **config["repository"]}
    config.setdefault("html", {}).update(
        {"use_repository_button": True, "use_issues_button": True, "use_edit_page_button": True}
    )
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def page_records(notebook: Path, preset: str, store: ResultStore) -> list[tuple[dict, Path]]:
    """The stored records a notebook page shows at `preset` (for `auto`, the largest stored preset), with their
    files: the records its experiments' `load_or_run` calls read."""
    from gradalign.experiments import EXPERIMENTS
    from gradalign.records.runner import best_stored_preset, stored_record

    rel = notebook.resolve().relative_to(project_root()).as_posix()
    found = []
    for exp in sorted(EXPERIMENTS.values(), key=lambda e: e.id):
        if exp.notebook != rel:
            continue
        shown = best_stored_preset(exp.id, store=store) if preset == "auto" else preset
        record = stored_record(exp.id, shown, store=store) if shown else None
        if record is not None:
            found.append((record, store.path(exp.id, shown, record["config_hash"])))
    return found


def add_downloads(target: Path, records: list[tuple[dict, Path]], src: Path) -> list[Path]:
    """Write each record (JSON) and its curves (CSV) under `<src>/data/`, and end the executed notebook with a
    cell that links them (replacing the cell a previous build added). Returns the files it wrote: none when the
    records and the notebook's last cell are what they were."""
    from gradalign.book.downloads import write_downloads

    lines, written = [], []
    for record, path in records:
        json_file, csv_file = write_downloads(record, path, src / "data" / record["id"], written)
        rel = lambda p: os.path.relpath(p, target.parent)
        # a record with no curves has a CSV of its header row only: not offered
        curves = len(csv_file.read_text().splitlines()) > 1
        lines.append(
            f"- `{record['id']}` at preset `{record['preset']}`: {{download}}`record (JSON) <{rel(json_file)}>`"
            + (f", {{download}}`curves (CSV) <{rel(csv_file)}>`" if curves else " (it stores no curves)")
        )
    text = None
    if lines:
        text = (
            "## Data on this page\n\nEvery number and curve on this page comes from these stored records. Each "
            "record holds its config, checks, verdict and provenance; the CSV lists its curves one value a row "
            "(`curve`, `index`, `value`).\n\n" + "\n".join(lines)
        )
    ours = lambda cell: DOWNLOADS_TAG in cell.get("metadata", {}).get("tags", [])
    now = notebook_cells(target)
    if [c["source"] for c in now if not ours(c)] + ([text] if text else []) == [c["source"] for c in now]:
        return written  # the notebook ends with this cell already: not rewritten
    import nbformat

    nb = nbformat.read(target, as_version=4)
    cells = [c for c in nb.cells if not ours(c)]
    if text:
        cells.append(nbformat.v4.new_markdown_cell(text, metadata={"tags": [DOWNLOADS_TAG]}))
    if [c.source for c in cells] != [c.source for c in nb.cells]:
        nb.cells = cells
        nbformat.write(nb, target)
        written.append(target)
    return written


SPHINX_READ = re.compile(r"updating environment: (?:\[[^\]]*\] )?(\d+) added, (\d+) changed, \d+ removed")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _jupyter_book(src: Path, out: Path) -> int | None:
    """jupyter-book writes `<path-output>/_build/html`; we build there and expose it as `<out>/html`. Sphinx builds
    incrementally: it reads again only the sources added or changed since its last build into `<out>/jb` (returned,
    from its log; None when the log does not say)."""
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
    found = SPHINX_READ.search(ANSI.sub("", result.stdout))
    return int(found[1]) + int(found[2]) if found else None
