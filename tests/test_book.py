"""The book builds with warnings as errors and skips unchanged notebooks (test_book_browser.py opens it in Chromium).

The `built` fixture (conftest.py) builds the book once per test session for both modules."""

from pathlib import Path

import pytest

from gradalign.book.build import library_closure, toc_files
from gradalign.environment import project_root
from gradalign.elements import ELEMENTS


def _one_commit_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A git repository with one commit of `src/a.py`, and the git command line that commits in it."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("A = 1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return repo, git


def test_toc_lists_the_built_chapter():
    files = toc_files(project_root())
    assert files[0] == "book/intro" and "notebooks/lga/01_linear_regression" in files and "book/report" in files


def test_library_closure_follows_imports():
    files = {p.name for p in library_closure("from gradalign.records.runner import load_or_run")}
    assert {"runner.py", "results.py", "lga.py", "lga_linear.py", "config.py", "isoloss.py", "siamese.py"} <= files
    assert "build.py" not in files and "cli.py" not in files and "report.py" not in files


def test_book_static_fails_the_build_naming_the_install_when_mathjax_is_missing(monkeypatch):
    from sphinx.errors import ExtensionError

    from gradalign.book import static as book_static

    assert (book_static.mathjax_dir() / "MathJax.js").is_file()
    monkeypatch.setattr(book_static.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ExtensionError, match="pip install --no-deps -r requirements-static.txt"):
        book_static.setup(None)


def test_a_change_to_mathjaxs_configuration_rewrites_every_page(monkeypatch):
    """MathJax's configuration is set once the HTML builder hashed the configuration (`configure`, builder-inited),
    so the extension registers it again as an "html" value: a changed value makes Sphinx write every page anew."""
    from gradalign.book import static as book_static

    class App:
        def __init__(self):
            self.values = {}

        def add_config_value(self, name, default, rebuild):
            self.values[name] = (default, rebuild)

        def connect(self, *args, **kwargs): ...

        def add_css_file(self, *args, **kwargs): ...

        def add_js_file(self, *args, **kwargs): ...

    def html_values():
        app = App()
        book_static.setup(app)
        return {name: default for name, (default, rebuild) in app.values.items() if rebuild == "html"}

    before = html_values()
    monkeypatch.setattr(book_static, "MATHJAX2", {**book_static.MATHJAX2, "messageStyle": "normal"})
    assert before and html_values() != before


def test_book_builds_and_second_build_executes_nothing(built):
    out, first, second = built
    notebooks = [f for f in toc_files(project_root()) if f.startswith("notebooks/")]
    assert "notebooks/isoloss/02_toy_dynamics" in notebooks
    assert sorted(first["executed"] + first["adopted"]) == sorted(notebooks)  # by papermill, or nbval's copies
    assert second["executed"] == second["adopted"] == [] and second["skipped"] == notebooks
    html = out / "html"
    for page in (
        "index.html",
        "book/lga/intro.html",
        "notebooks/lga/01_linear_regression.html",
        "book/report.html",
        "book/isoloss/intro.html",
        "notebooks/isoloss/03_deep_siamese.html",
    ):
        assert (html / page).exists(), page
    report = (html / "book" / "report.html").read_text()
    for element_id in ELEMENTS:
        assert element_id in report
    assert "not yet built" not in report and "not run here" in report and "reproduced" in report
    chapter = (html / "notebooks" / "lga" / "01_linear_regression.html").read_text()
    # no launch or repository buttons (a remote session has neither the package nor the data): the placeholder
    # repository, Binder and Colab are linked from no page; the executed notebook is offered for download
    for page in html.rglob("*.html"):
        text = page.read_text()
        for remote in ("gradalign/gradalign-book", "mybinder.org", "colab.research.google.com"):
            assert remote not in text, f"{page.relative_to(html)} links to {remote}"
    assert 'href="../../_sources/notebooks/lga/01_linear_regression.ipynb"' in chapter
    assert '"output_type"' in (html / "_sources" / "notebooks" / "lga" / "01_linear_regression.ipynb").read_text()
    assert "Figure 1" in chapter
    # the page shows the preset papermill injected, not the notebook's default beside it
    assert "Parameters" in chapter and "the largest stored record (paper &gt; gpu &gt; cpu)" not in chapter


def test_repository_setting_switches_the_buttons_on_only_when_set():
    import yaml

    from gradalign.book.build import book_config

    text = (project_root() / "_config.yml").read_text()
    assert yaml.safe_load(text)["repository"]["url"] == ""  # this repository's default: no buttons
    assert book_config(text) == text
    config = yaml.safe_load(book_config(text.replace('url: ""', "url: https://github.com/owner/repo")))
    assert config["html"]["use_repository_button"] and config["html"]["use_edit_page_button"]
    assert config["repository"]["url"] == "https://github.com/owner/repo" and config["repository"]["branch"]


def test_curves_csv_holds_every_number_of_the_curves():
    import csv
    import io

    from gradalign.book.downloads import curve_rows, curves_csv

    curves = {"step": [0, 10], "lga": {"loss": [[1.0, 0.5], [0.9, None]]}, "runs": [{"gap": [3.0]}], "x": 2}
    rows = list(curve_rows(curves))
    assert rows == [
        ("step", "0", 0), ("step", "1", 10),
        ("lga/loss", "0/0", 1.0), ("lga/loss", "0/1", 0.5), ("lga/loss", "1/0", 0.9), ("lga/loss", "1/1", None),
        ("runs/gap", "0/0", 3.0), ("x", "", 2),
    ]  # fmt: skip
    table = list(csv.reader(io.StringIO(curves_csv({"curves": curves}))))
    assert table[0] == ["curve", "index", "value"] and len(table) == 1 + len(rows) and table[-3][2] == ""


def test_source_archive_is_the_commit_and_says_when_the_tree_differs(tmp_path):
    import tarfile

    from gradalign.book.source_archive import code_page_markdown, write_archive

    repo, git = _one_commit_repo(tmp_path)
    (repo / "src" / "a.py").write_text("A = 2\n")  # uncommitted change: not in the archive, and said so
    path, sha, dirty = write_archive(repo, tmp_path / "files")
    assert dirty and sha and path.name == f"gradalign-{sha[:12]}.tar.gz"
    with tarfile.open(path) as tar:
        member = tar.extractfile(f"gradalign-{sha[:12]}/src/a.py")
        assert member.read() == b"A = 1\n"
    page = code_page_markdown(f"files/{path.name}", sha, dirty, None)
    assert "not yet committed" in page and sha in page and "{download}`" in page
    assert "pip install -e ." in page and "gradalign run lga.fig1 --preset smoke" in page
    clean = code_page_markdown(f"files/{path.name}", sha, False, "https://github.com/o/r")
    assert "no uncommitted changes" in clean and f"https://github.com/o/r/tree/{sha}" in clean


def test_every_page_links_the_code_and_notebook_pages_offer_their_records(built):
    out = built[0]
    html = out / "html"
    pages = [html / f"{entry}.html" for entry in toc_files(project_root())]
    for page in pages:
        assert "btn-get-the-code-button" in page.read_text(), f"{page.name}: no Get the code button"
    code_page = (html / "book" / "get_the_code.html").read_text()
    archives = list(html.glob("_downloads/*/gradalign-*.tar.gz"))
    assert len(archives) == 1 and archives[0].name in code_page
    chapter = (html / "notebooks" / "lga" / "01_linear_regression.html").read_text()
    assert "Data on this page" in chapter
    for element_id in ("lga.fig1", "lga.prop1", "lga.prop2-3"):
        json_file = next(html.glob(f"_downloads/*/{element_id}-smoke.json"))
        assert json_file.name in chapter
        # a record with curves offers them as CSV; one without says so and offers no empty file
        csv_file = next(html.glob(f"_downloads/*/{element_id}-smoke-curves.csv"), None)
        if csv_file is None:
            assert "it stores no curves" in chapter
        else:
            assert csv_file.name in chapter and csv_file.read_text().startswith("curve,index,value")
            assert len(csv_file.read_text().splitlines()) > 1
    assert next(html.glob("_downloads/*/lga.fig1-smoke-curves.csv"), None) is not None


def test_references_page_gives_bibtex_for_the_four_papers(built):
    intro = (built[0] / "html" / "book" / "intro.html").read_text()
    for arxiv in ("1902.02336", "2007.03966", "2212.04858", "2406.05222"):
        assert f"arXiv:{arxiv}" in intro or f"abs/{arxiv}" in intro
    assert intro.count("@article") + intro.count("@inproceedings") == 4


def test_paths_in_the_checkout_are_shown_relative_to_it(tmp_path):
    from gradalign.book.build import relative_paths

    root = tmp_path / "checkout"
    assert relative_paths(f"images at {root}/data/imagenet; results in {root}", root) == (
        "images at data/imagenet; results in ."
    )
    assert relative_paths("/elsewhere/data", root) == "/elsewhere/data"


def _notebook(path, source):
    import nbformat

    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.cells = [
        nbformat.v4.new_code_cell('preset = "auto"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(source),
    ]
    nbformat.write(nb, path)
    return path


def test_notebooks_execute_side_by_side_and_a_failing_one_stops_the_build(tmp_path):
    from gradalign.book.build import execute_all

    good = _notebook(tmp_path / "good.ipynb", "x = 1 + 1")
    bad = _notebook(tmp_path / "bad.ipynb", "raise ValueError('this page is broken')")
    stale = [("good", good, tmp_path / "out" / "good.ipynb"), ("bad", bad, tmp_path / "out" / "bad.ipynb")]
    done = []
    with pytest.raises(Exception, match="this page is broken"):
        for entry, _ in execute_all(stale, "smoke", jobs=2):
            done.append(entry)
    assert done == ["good"] and (tmp_path / "out" / "good.ipynb").exists()
    assert not (tmp_path / "out" / "bad.ipynb").exists()


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_book_jobs_setting_is_refused(monkeypatch, value):
    from gradalign.book.build import book_jobs
    from gradalign.errors import ConfigError

    monkeypatch.setenv("GRADALIGN_BOOK_JOBS", value)
    with pytest.raises(ConfigError, match="GRADALIGN_BOOK_JOBS must be a whole number"):
        book_jobs()


def test_a_page_that_reads_committed_runs_is_executed_again_when_a_run_is_committed(tmp_path):
    """sgr/02 shows Table 6's rerun so far from the committed runs (`rerun_view`): a new run changes its input key;
    sgr/01 reads only records, so its key stays."""
    from gradalign.book.build import input_key
    from gradalign.records.results import ResultStore

    store = ResultStore(tmp_path)
    reads_runs, reads_records = (
        project_root() / "notebooks" / "sgr" / name for name in ("02_local_bp.ipynb", "01_theory.ipynb")
    )
    before = input_key(reads_runs, "auto", store), input_key(reads_records, "auto", store)
    (tmp_path / "runs" / "sgr.local").mkdir(parents=True)
    (tmp_path / "runs" / "sgr.local" / "0123456789abcdef.json").write_text("{}")
    after = input_key(reads_runs, "auto", store), input_key(reads_records, "auto", store)
    assert after[0] != before[0] and after[1] == before[1]


def test_a_second_build_writes_no_page_and_sphinx_reads_no_source(built):
    """Nothing changed between the two builds: the second one rewrites no generated page, download or executed
    notebook (their mtimes stay, so Sphinx sees no changed source) and Sphinx reads none again (issue 49: an
    unchanged `make book` in seconds)."""
    out, first, second = built
    assert {"book/report.md", "book/compute.md", "book/get_the_code.md", "_config.yml"} <= set(first["written"])
    assert first["sphinx_read"] and first["sphinx_read"] > 0
    assert second["written"] == [] and second["sphinx_read"] == 0
    assert second["executed"] == second["adopted"] == []


def test_memoized_reads_check_each_file_once_and_see_a_rewrite(store, monkeypatch):
    """The build's memo of records and committed runs (`book.memo.memoized_reads`): a file is parsed and checked once
    while it is unchanged, each caller gets its own copy, a rewritten or edited file is read again, and the
    library's functions are restored after the block."""
    import json
    import shutil
    import warnings

    from gradalign.book.memo import memoized_reads
    from gradalign.records import results
    from gradalign.records.results import ResultStore
    from gradalign.store import run_unit
    from gradalign.store.run_unit import Unit, read_entry, write_entry

    # a committed run entry
    runs = store.root / "runs"
    unit = Unit("trial 0", "test.memo", {"seed": 0, "widths": (2, 3)}, 1, lambda path: None)
    write_entry(runs, unit, {"loss": [1.0, 0.5]}, {"hardware": "test"})
    fresh, checked = read_entry(runs, unit), []
    check_entry = run_unit.check_entry
    monkeypatch.setattr(run_unit, "check_entry", lambda *a, **k: checked.append(1) or check_entry(*a, **k))
    with memoized_reads():
        first, second = (run_unit.read_entry(runs, unit) for _ in range(2))
        assert first == second == fresh and first is not second and len(checked) == 1
        first["value"]["loss"].append(9.0)  # a caller that changes what it got changes no one else's copy
        assert run_unit.read_entry(runs, unit)["value"]["loss"] == [1.0, 0.5]
        write_entry(runs, unit, {"loss": [0.25]}, {"hardware": "test"})  # rewritten: read again
        assert run_unit.read_entry(runs, unit)["value"]["loss"] == [0.25]
        path = run_unit.entry_path(runs, unit.kind, unit.key)
        path.write_text(path.read_text().replace("0.25", "0.125"))  # edited by hand: caught, as without the memo
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert run_unit.read_entry(runs, unit) is None
        assert any("digest" in str(w.message) for w in caught)
    assert run_unit.read_entry is read_entry

    # a stored record (an analytic one: its checks read no runs)
    source = next((project_root() / "results" / "lga" / "lga.prop1").glob("*.json"))
    record = json.loads(source.read_text())
    target = store.path(record["id"], record["preset"], record["config_hash"])
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    key = (record["id"], record["preset"], record["config_hash"], record["experiment_version"])
    problems = []
    content_problem = results._content_problem
    monkeypatch.setattr(results, "_content_problem", lambda r: problems.append(1) or content_problem(r))
    load = ResultStore.load
    with memoized_reads():
        loaded = [store.load(*key) for _ in range(3)]
        assert loaded[0] == loaded[2] == record and loaded[0] is not loaded[1] and len(problems) == 1
    assert ResultStore.load is load and store.load(*key) == record and len(problems) == 2


def test_notebook_cells_reads_what_nbformat_reads():
    """The build reads notebooks as plain JSON (`notebook_cells`; nbformat's import costs a second): the same cell
    types and sources as nbformat, so input keys and the downloads cell do not change."""
    import nbformat

    from gradalign.book.build import notebook_cells

    notebooks = sorted((project_root() / "notebooks").glob("*/*.ipynb"))
    assert len(notebooks) >= 18
    for path in notebooks:
        ours = [(c["cell_type"], c["source"], c.get("metadata", {})) for c in notebook_cells(path)]
        theirs = [(c.cell_type, c.source, c.metadata) for c in nbformat.read(path, as_version=4).cells]
        assert ours == theirs, path


def test_the_source_archive_of_a_commit_is_packed_once(tmp_path, monkeypatch):
    """A second build from the same commit does not run `git archive` again; an archive changed since it was
    written, or a new commit, is packed again."""
    import subprocess

    from gradalign.book import source_archive

    repo, git = _one_commit_repo(tmp_path)
    packed = []
    run = subprocess.run
    monkeypatch.setattr(
        source_archive.subprocess,
        "run",
        lambda cmd, **k: (packed.append(cmd) if "archive" in cmd else 0, run(cmd, **k))[1],
    )
    path, sha, _ = source_archive.write_archive(repo, tmp_path / "files")
    data, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert len(packed) == 1
    assert source_archive.write_archive(repo, tmp_path / "files") == (path, sha, False)
    assert len(packed) == 1 and path.stat().st_mtime_ns == mtime
    path.write_bytes(b"not the archive")  # changed since: packed again
    source_archive.write_archive(repo, tmp_path / "files")
    assert len(packed) == 2 and path.read_bytes() == data
    (repo / "src" / "a.py").write_text("A = 2\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    new, new_sha, _ = source_archive.write_archive(repo, tmp_path / "files")
    assert len(packed) == 3 and new_sha != sha and new.exists() and not path.exists()
