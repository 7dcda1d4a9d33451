"""The book builds with warnings as errors and skips unchanged notebooks (test_book_browser.py opens it in Chromium).

The `built` fixture (conftest.py) builds the book once per test session for both modules."""

import pytest

from gradalign.book import library_closure, toc_files
from gradalign.environment import project_root
from gradalign.elements import ELEMENTS


def test_toc_lists_the_built_chapter():
    files = toc_files(project_root())
    assert files[0] == "book/intro" and "notebooks/lga/01_linear_regression" in files and "book/report" in files


def test_library_closure_follows_imports():
    files = {p.name for p in library_closure("from gradalign.runner import load_or_run")}
    assert {"runner.py", "results.py", "lga.py", "lga_linear.py", "config.py", "isoloss.py", "siamese.py"} <= files
    assert "book.py" not in files and "cli.py" not in files and "report.py" not in files


def test_book_static_fails_the_build_naming_the_install_when_mathjax_is_missing(monkeypatch):
    from sphinx.errors import ExtensionError

    from gradalign import book_static

    assert (book_static.mathjax_dir() / "MathJax.js").is_file()
    monkeypatch.setattr(book_static.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ExtensionError, match="pip install --no-deps -r requirements-static.txt"):
        book_static.setup(None)


def test_book_builds_and_second_build_executes_nothing(built):
    out, first, second = built
    notebooks = [f for f in toc_files(project_root()) if f.startswith("notebooks/")]
    assert "notebooks/isoloss/02_toy_dynamics" in notebooks
    assert first["executed"] == notebooks
    assert second["executed"] == [] and second["skipped"] == notebooks
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
