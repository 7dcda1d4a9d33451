"""The API reference, the BibTeX of each part and the introduction's answers (issue 49, items 3 and 7).

The API page is autodoc of docstrings written as plain text (Unicode formulas, `|` tables): `api_page.rst_safe`
must turn every one into reStructuredText that parses without a warning (the book builds with warnings as errors)
and shows the same text; the built page must list every public function and class of `gradalign.methods`.
"""

from __future__ import annotations

import html as html_lib
import importlib
import inspect
import io
import re

import pytest

from gradalign.book import api_page
from gradalign.book.bibtex import BIBTEX, bibtex_markdown
from gradalign.elements import ELEMENTS, PAPER_ELEMENTS, PARTS
from gradalign.papers import PAPERS

API_MODULES = api_page.methods_modules() + [m for _, m in api_page.WHOLE_MODULES]


def _documented(module: str):
    mod = importlib.import_module(module)
    yield module, mod
    for name, obj in vars(mod).items():
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == module:
            yield f"{module}.{name}", obj


def _parse(rst: str) -> str:
    from docutils.core import publish_doctree

    warnings = io.StringIO()
    publish_doctree(rst, settings_overrides={"warning_stream": warnings, "report_level": 2})
    return warnings.getvalue()


def _unescaped(rst_lines: list[str]) -> str:
    """The text a reader sees: escapes, `\\ ` separators, inline-literal marks and code-block lines removed."""
    text = "\n".join(ln for ln in rst_lines if not ln.startswith(".. code-block::"))
    text = text.replace("\\ ``", "").replace("``\\ ", "")
    return re.sub(r"\\(.)", r"\1", text)


def test_every_docstring_of_the_api_page_parses_and_keeps_its_text(one_thread):
    seen, bad = 0, []
    for module in API_MODULES:
        for name, obj in _documented(module):
            if not obj.__doc__:  # autodoc_inherit_docstrings is off (_config.yml): a docstring of its own
                continue
            doc = inspect.cleandoc(obj.__doc__)
            seen += 1
            lines = api_page.rst_safe(doc.splitlines())
            problems = _parse("\n".join(lines).replace(".. code-block:: text", "::"))
            if problems:
                bad.append(f"{name}: {problems[:200]}")
            # a Markdown table becomes a list table: compare its cells' text, not its rules and bars
            words = lambda s: re.sub(r"[\s|*-]+", " ", re.sub(r"`|:header-rows: 1|\.\. list-table::", "", s)).strip()
            if words(_unescaped(lines)) != words(doc):
                bad.append(f"{name}: the text changed")
    assert seen > 100 and not bad, bad[:5]


@pytest.mark.parametrize(
    "doc",
    [
        "A line with x_i and *a* star, |x| and a `name`s.\n\n- a list item\n  continued\nback to text::",
        "1. an enumerator\n(a) another\n\n.. not a comment\n\n----\n\n    indented\ntext after",
        "Table:\n| a | b |\n|---|---|\n| 1 | 2 |\nand `x_y` inline, `bad",
    ],
)
def test_rst_safe_parses_hostile_text(doc):
    assert _parse("\n".join(api_page.rst_safe(doc.splitlines())).replace(".. code-block:: text", "::")) == ""


def test_the_api_page_names_every_methods_module_and_the_entry_points():
    page = api_page.api_markdown()
    for module in api_page.methods_modules():
        assert f".. automodule:: {module}\n" in page
    assert (
        ".. autofunction:: gradalign.records.runner.run" in page
        and ".. automodule:: gradalign.experiments.verdict" in page
    )
    assert ".. automodule:: gradalign.experiments.rules" in page and ".. automodule:: gradalign.training.loop" in page
    assert len(api_page.methods_modules()) >= 20 and "gradalign.methods.lga" in api_page.methods_modules()


def test_the_built_api_page_lists_every_public_function_of_methods_and_renders_the_formulas(book_html):
    page = (book_html / "book" / "appendix" / "api.html").read_text()
    missing = [
        f"{module}.{name}"
        for module in api_page.methods_modules()
        for name in api_page.public_functions(module)
        if f'id="{module}.{name}"' not in page
    ]
    assert not missing, f"{len(missing)} public names of gradalign.methods not on the API page: {missing}"
    for target in ("records.runner.run", "experiments.verdict.", "experiments.rules.", "training.loop."):
        target = f"gradalign.{target}"
        assert f'id="{target}' in page, target
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", page))
    # Algorithm 1's update and Eq. 2's norm, as the docstring writes them; no escape left visible
    assert "θ ← Adam(α_θ, g_u + T(i)·g_ℓ)" in text and "‖v‖²_normalized = Σ_i v_i²" in text
    assert "\\_" not in text and "system-message" not in page and 'class="problematic"' not in page


def test_bibtex_agrees_with_the_citations():
    for part in PARTS:
        arxiv = PAPERS[part]["url"].rsplit("/", 1)[1]
        assert arxiv in BIBTEX[part] and PAPERS[part]["url"] in BIBTEX[part], part
    block = bibtex_markdown(list(PARTS))
    assert block.startswith("```bibtex\n@") and block.count("\n@") == 4 and block.endswith("}\n```")


def test_each_part_page_gives_its_paper_as_bibtex(book_html):
    for part in PARTS:
        page = (book_html / "book" / part / "intro.html").read_text()
        arxiv = PAPERS[part]["url"].rsplit("/", 1)[1]
        entries = page.count("@article") + page.count("@inproceedings")
        assert entries == 1 and f"arXiv:{arxiv}" in page, part


def test_the_introduction_answers_each_paper_by_name_from_the_records():
    from gradalign.book.landing import answers_markdown, short_name
    from gradalign.book.memo import memoized_reads
    from gradalign.book.report import element_verdict, shown_record
    from gradalign.records.results import ResultStore

    store = ResultStore()
    with memoized_reads():  # each record read and checked once, as the build reads them
        text = answers_markdown("auto", store, "../")
        shown = {eid: element_verdict(eid, shown_record(eid, "auto", store)) for eid in PAPER_ELEMENTS}
    lines = [ln for ln in text.splitlines() if ln.startswith("- **")]
    assert len(lines) == len(PARTS)
    for line, part in zip(lines, PARTS):
        assert f"(../book/{part}/intro.md)" in line
        for eid in [e for e in PAPER_ELEMENTS if ELEMENTS[e].part == part]:
            name = short_name(eid)
            assert f"[{name}]" in line or f" {name}" in line, (part, eid)
            assert shown[eid] in line, (part, eid, shown[eid])
    assert "**At reduced scale** means" in text and "Fashion-MNIST" in text


def test_the_built_introduction_shows_the_answers(book_html):
    page = (book_html / "book" / "intro.html").read_text()
    assert "At reduced scale" in page and "gradalign:" not in page
    for part in PARTS:
        assert f'href="{part}/intro.html"' in page


def test_the_report_summary_is_short_and_each_element_detail_is_folded():
    from gradalign.book.report import report_markdown
    from gradalign.records.results import ResultStore

    text = report_markdown("auto", ResultStore())
    summary, details = text.split("## Check details", 1)
    rows = [ln for ln in summary.splitlines() if ln.startswith("| [`") or ln.startswith("| `")]
    assert len(rows) >= len(PAPER_ELEMENTS)
    assert not [r for r in rows if "(paper:" in r or "precondition not met" in r]  # reason and scale: in the details
    assert max(len(r) for r in rows) < 400
    folds = details.count("::::{dropdown} ")
    assert folds == details.count("\n::::\n") == details.count("Record: preset") >= 30
    assert "### `" not in details  # no heading per element: the page's contents list stays short
