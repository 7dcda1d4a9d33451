"""Every notebook runs at the smoke preset, once: `make test` runs `pytest --nbval-lax notebooks tests`, nbval
executes each notebook cell by cell (the root conftest.py keeps its outputs), and the suite's book build renders
those copies (`built` in tests/conftest.py); without nbval, the book build executes them (papermill). These tests
check what ran: every code cell, none raised, and the experiments stored their smoke records. Static checks
keep the notebooks thin: the helpers they share live in `gradalign.book.page_helpers` and `gradalign.book.plotting`
(ruff lints the notebooks in `make test`), figure titles name our figure and the paper's, never a verdict, and verdict
cells hold no rules written by hand (the rendered verdict carries them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gradalign.book import plotting
from gradalign.book.build import toc_files
from gradalign.elements import PARTS
from gradalign.environment import project_root

ROOT = project_root()
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
IDS = [p.relative_to(ROOT / "notebooks").as_posix() for p in NOTEBOOKS]
PAPER_NOTEBOOKS = [p for p in NOTEBOOKS if p.parent.name in PARTS]  # the others are the book's own measurements
SHARED = re.compile(r"^(?:def (?:cell|curve_panel|mean_std)\b|COLORS\s*=)", re.M)
FONT_SIZE = re.compile(r"\b(?:fontsize|size)\s*=\s*([0-9.]+)")
TITLE = re.compile(r"(?:set_title|suptitle|title\s*=)\s*\(?\s*r?f?r?([\"'])(.*?)\1")
VERDICT_WORDS = re.compile(r"\breproduced\b|\bconverges\b|\bholds\b|\bfails\b|\bis sufficient\b", re.I)


def cells(path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def test_every_notebook_is_a_page():
    pages = {f"{entry}.ipynb" for entry in toc_files(ROOT) if entry.startswith("notebooks/")}
    assert NOTEBOOKS and {p.relative_to(ROOT).as_posix() for p in NOTEBOOKS} == pages


def test_every_notebook_ran_once_at_smoke_without_an_error(built, nbval_run):
    out, first, _ = built
    notebooks = [f for f in toc_files(ROOT) if f.startswith("notebooks/")]
    # each executed once in the session: by nbval (`make test`: its copies adopted), else by the book build
    assert sorted(first["executed"] + first["adopted"]) == sorted(notebooks)
    assert not (set(first["executed"]) & set(first["adopted"]))
    if nbval_run and nbval_run["preset"] == "smoke":
        assert first["adopted"] == [n for n in notebooks if n in nbval_run["copies"]]
    for entry in notebooks:
        nb = json.loads((out / "book-src" / f"{entry}.ipynb").read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert code, entry
        not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
        assert not not_run, f"{entry}: code cells {not_run} did not run"
        errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{entry}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        ran = nb["metadata"].get("papermill") or nb["metadata"]["gradalign"]  # papermill's run, or nbval's
        assert ran["parameters"] == {"preset": "smoke"}, entry
        injected = [c for c in code if "injected-parameters" in c["metadata"].get("tags", [])]
        assert len(injected) == 1 and "preset = 'smoke'" in "".join(injected[0]["source"]).replace('"', "'"), entry
    records = Path(built[0]).parent / "results"
    assert list((records / "lga").glob("*/smoke-*.json"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_shared_helper_is_defined_again(path):
    found = [m.group(0) for source in cells(path, "code") for m in SHARED.finditer(source)]
    assert not found, f"{path.name}: defines {found}: import it from gradalign.book.page_helpers / plotting"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_text_smaller_than_the_book_style(path):
    small = [float(m[1]) for s in cells(path, "code") for m in FONT_SIZE.finditer(s) if float(m[1]) < plotting.SMALL_PT]
    assert not small, f"{path.name}: font sizes {small} pt below plotting.SMALL_PT = {plotting.SMALL_PT}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_figure_titles_carry_no_verdict(path):
    code = cells(path, "code")
    titles = [m.group(2) for s in code for m in TITLE.finditer(s)]
    named = [m.group(1) for s in code for m in re.finditer(r"[\"']((?:Figure|Table) \d[^\"'\n]*)", s)]
    bad = [t for t in titles + named if VERDICT_WORDS.search(t)]
    assert not bad, f"{path.name}: figure titles with a verdict: {bad}"
    papers = [t for t in titles if re.search(r"\bFigure \d", t)]
    bad = [t for t in papers if not (t.startswith("ours") and "(paper" in t)]
    assert not bad, f"{path.name}: a paper figure's title should read 'ours: Figure N ... (paper: ...)': {bad}"


def test_only_the_reference_page_lies_outside_the_papers():
    assert {p.relative_to(ROOT / "notebooks").as_posix() for p in NOTEBOOKS if p not in PAPER_NOTEBOOKS} == {
        "reference/01_supervised.ipynb"
    }


@pytest.mark.parametrize(
    "path", PAPER_NOTEBOOKS, ids=[p.relative_to(ROOT / "notebooks").as_posix() for p in PAPER_NOTEBOOKS]
)
def test_verdict_cells_hold_no_hand_written_rules(path):
    verdicts = [s for s in cells(path, "markdown") if s.startswith("## Verdict")]
    assert len(verdicts) == 1, f"{path.name}: one '## Verdict' section expected, found {len(verdicts)}"
    text = verdicts[0]
    assert "generated from the stored record" in text, f"{path.name}: the verdict cell should say where it comes from"
    rules = re.findall(r"[Dd]ecision rules?|\bmeans A's mean\b|\"A beats B\" means", text)
    assert not rules, f"{path.name}: hand-written decision rules in the verdict cell: {rules}"
