"""The book builds with warnings as errors, skips unchanged notebooks, and renders in Chromium."""

import shutil
import subprocess

import pytest

from gradalign.book import build_book, library_closure, toc_files
from gradalign.environment import project_root
from gradalign.elements import ELEMENTS


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("book")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRADALIGN_RESULTS", str(tmp / "results"))
    mp.delenv("GRADALIGN_PRESET", raising=False)
    first = build_book("smoke", tmp / "_build")
    second = build_book("smoke", tmp / "_build")
    yield tmp / "_build", first, second
    mp.undo()


def test_toc_lists_the_built_chapter():
    files = toc_files(project_root())
    assert files[0] == "book/intro" and "notebooks/lga/01_linear_regression" in files and "book/report" in files


def test_library_closure_follows_imports():
    files = {p.name for p in library_closure("from gradalign.runner import load_or_run")}
    assert {"runner.py", "results.py", "lga.py", "lga_linear.py", "config.py", "isoloss.py", "siamese.py"} <= files
    assert "book.py" not in files and "cli.py" not in files and "report.py" not in files


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
    assert "not yet built" in report and "reproduced" in report
    chapter = (html / "notebooks" / "lga" / "01_linear_regression.html").read_text()
    for launcher in ("colab.research.google.com", "mybinder.org"):  # launch buttons open the source notebook
        assert launcher in chapter and "notebooks/lga/01_linear_regression.ipynb" in chapter
    # the page shows the preset papermill injected, not the notebook's default beside it
    assert "Parameters" in chapter and "the largest stored record (paper &gt; gpu &gt; cpu)" not in chapter


def test_chromium_renders_the_chapter(built, tmp_path):
    out = built[0]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium not installed (make browser installs it)"
    page = (out / "html" / "notebooks" / "lga" / "01_linear_regression.html").resolve().as_uri()
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        "--window-size=1200,1600",
    ]
    shot = tmp_path / "page.png"
    subprocess.run(flags + [f"--screenshot={shot}", page], capture_output=True, timeout=120)
    from PIL import Image

    image = Image.open(shot).convert("L")
    lo, hi = image.getextrema()
    assert hi - lo > 100, "screenshot is blank"
    assert sum(1 for count in image.histogram() if count) > 20, "screenshot has almost no distinct shades"
    dom = subprocess.run(flags + ["--dump-dom", page], capture_output=True, text=True, timeout=120).stdout
    assert "Figure 1 reproduced" in dom or "Figure 1" in dom
    assert "Traceback" not in dom and "Error:" not in dom
