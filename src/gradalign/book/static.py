"""Sphinx extension: serve MathJax from the built book, so that formulas are typeset offline.

Sphinx loads MathJax 3 from a CDN; offline (or behind a firewall) every formula stays raw TeX. The wheel
`jupyter-server-mathjax` (requirements-static.txt; `make setup` installs it with --no-deps, as its
jupyter_server dependency is not needed) bundles MathJax 2.7. This extension copies it to `_static/mathjax/`
and points `mathjax_path` there. MathJax 2 then needs a configuration of its own (`MATHJAX2`):

- myst-parser marks each page's top section `tex2jax_ignore` and lets through only the classes of its
  `mathjax_classes` (Sphinx's `span.math`/`div.math` among them), but writes that only into `mathjax3_config`,
  which v2 ignores: the same classes go into `tex2jax.processClass` here, and `mathjax3_config` is dropped
  (Sphinx would emit it as `window.MathJax = ...`, which v2 reads as its own configuration).
- Sphinx writes math as `\\(..\\)` and `\\[..\\]`; those are the only delimiters, so a `$` in text stays a `$`.
- the wheel ships the STIX-Web web fonts only (no TeX fonts, no image fonts): `HTML-CSS.webFont`.
- the fast preview (a rough typesetting shown first, then replaced) is off: the final formulas come sooner.

It also adds the book's own style sheet (`BOOK_CSS`: display math, tables and figures that stay readable in
a 390 px phone column), its own script (`gradalign.book.script`: working sidebar buttons, numbers kept whole in
table cells, figures that open full size, framed wide tables) and, on every page, a header button to the *Get
the code* page (`CODE_PAGE`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.util.fileutil import copy_asset

from gradalign.book.script import BOOK_JS, JS_NAME

INSTALL = "pip install --no-deps -r requirements-static.txt (or make setup)"
CONFIG = "TeX-AMS-MML_HTMLorMML-full"
MATHJAX_CLASSES = "tex2jax_process|mathjax_process|math|output_area"  # myst-parser's default mathjax_classes
MATHJAX2 = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": False,
        "ignoreClass": "tex2jax_ignore|mathjax_ignore",
    },
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None},
    "messageStyle": "none",
    # no quick preview typeset first and then typeset again: the formulas reach their final form about a third
    # sooner (sgr/01, 282 formulas: 11.1 s -> 7.5 s in headless Chromium on two cores)
    "fast-preview": {"disabled": True},
    "menuSettings": {"FastPreview": False},
}


CODE_PAGE = "book/get_the_code"  # written by gradalign.book.build at build time
CSS_NAME = "gradalign.css"
BOOK_CSS = """/* gradalign: what the theme leaves to the page (tests/test_book_browser.py checks it at 1280, 390 px) */

/* Display math wider than the column scrolls inside the column. The theme clips it (.math {overflow: hidden}),
   which cut long equations off with no way to reach their end. */
div.math {
  display: block;
  overflow-x: auto;
  overflow-y: hidden;
}
div.math .MathJax_Display {
  margin: 0.4em 0;
}
/* Inline math: an inline box on the text's baseline, with room for a glyph's overhang (a tilde, an italic). The
   theme makes it an inline flex box that clips (overflow: hidden), which cut the overhang; a box that clips or
   scrolls takes its bottom edge as its baseline, which lifted every formula 2-8 px above the text. */
span.math {
  display: inline;
  overflow: visible;
  padding: 0 0.12em;
}
span.math.gradalign-wide-math {
  display: inline-block;
  max-width: 100%;
  overflow-x: auto;
  overflow-y: hidden;
  vertical-align: bottom;
}

/* Every cell output (figures, tables, printed text) scrolls inside the column instead of widening the page. */
div.cell_output {
  max-width: 100%;
  overflow-x: auto;
}
/* Figures are drawn for the column at their design size (gradalign.book.plotting) and rendered at 2x; where the
   column is narrower (a phone), they shrink to it, whole, and a tap opens them at full size (gradalign.js). */
div.cell_output img {
  max-width: 100%;
  height: auto !important;
}
a.gradalign-figure {
  cursor: zoom-in;
}

/* Tables (check tables, paper-vs-ours tables, DataFrames): compact, cells that wrap (a long rule, path or code
   span no longer makes a 1,000 px column), and a scroll box of their own where they are still too wide. */
.pst-scrollable-table-container,
div.cell_output .output.text_html {
  max-width: 100%;
  overflow-x: auto;
}
article table {
  font-size: 0.9em;
}
/* DataFrames: a column per seed or step fits a laptop's column */
article table.dataframe {
  font-size: 0.8em;
}
article table td,
article table th {
  padding: 0.3em 0.35em;
  overflow-wrap: break-word;
  max-width: 22em;
}
/* A cell wraps between words; a word longer than the cell breaks, a number never (gradalign.js wraps each in
   span.gradalign-num) */
article table td {
  overflow-wrap: break-word;
}
article table .gradalign-num {
  white-space: nowrap;
}
/* A table that scrolls sideways inside the column does so in a visible frame, under a hint (gradalign.js). */
.gradalign-scrolls {
  border: 1px solid var(--pst-color-border, #ccc) !important;
  border-radius: 4px;
  box-shadow: inset -8px 0 6px -6px rgba(0, 0, 0, 0.25);
}
.gradalign-scroll-hint {
  font-size: 0.8em;
  color: var(--pst-color-text-muted, #666);
  margin: 0.2em 0;
}
article table code {
  white-space: normal;
  overflow-wrap: anywhere;
}
/* Inline code wraps too (long module and repository names); Sphinx keeps it on one line (span.pre). */
article code.literal,
article code.literal span.pre {
  white-space: normal;
  overflow-wrap: anywhere;
}

/* The header's "Get the code" button: its label beside the icon, the icon alone on a phone. */
.btn-get-the-code-button .btn__text-container {
  margin-left: 0.3em;
  font-size: 0.85em;
  white-space: nowrap;
}

@media (max-width: 600px) {
  .btn-get-the-code-button .btn__text-container {
    display: none;
  }
  /* a heading's hover-only "#" link would stick out past a full last line */
  article .headerlink {
    display: none;
  }
  article table td,
  article table th {
    max-width: 14em;
    padding: 0.25em 0.35em;
  }
}
"""


def mathjax_dir() -> Path:
    """The bundled MathJax 2 (found without importing the package, which would import jupyter_server)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    static = Path(spec.origin).parent / "static" if spec and spec.origin else None
    if static is None or not (static / "config" / f"{CONFIG}.js").is_file():
        raise ExtensionError(f"MathJax 2 for the offline book is not installed; run: {INSTALL}")
    return static


def configure(app) -> None:
    """After myst-parser's own builder-inited handler (priority 500), which sets `mathjax3_config`."""
    myst = getattr(app.env, "myst_config", None)
    classes = getattr(myst, "mathjax_classes", MATHJAX_CLASSES)
    ours = {**MATHJAX2, "tex2jax": {**MATHJAX2["tex2jax"], "processClass": classes}}
    app.config.mathjax_path = f"mathjax/MathJax.js?config={CONFIG}"  # relative to _static/
    app.config.mathjax2_config = {**ours, **(app.config.mathjax2_config or {})}
    app.config.mathjax3_config = None


def copy_mathjax(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        copy_asset(str(mathjax_dir()), str(Path(app.outdir) / "_static" / "mathjax"))
        (Path(app.outdir) / "_static" / CSS_NAME).write_text(BOOK_CSS)
        (Path(app.outdir) / "_static" / JS_NAME).write_text(BOOK_JS)


def code_button(app, pagename, templatename, context, doctree) -> None:
    """A "Get the code" button in every page's header (after sphinx-book-theme's own, priority 501)."""
    if CODE_PAGE not in app.env.found_docs or "header_buttons" not in context:
        return
    context["header_buttons"].insert(
        0,
        {
            "type": "link",
            "url": context["pathto"](CODE_PAGE),
            "text": "Get the code",
            "tooltip": "The source archive of the commit that built this book, and how to rerun it",
            "icon": "fas fa-box-archive",
            "label": "get-the-code-button",
        },
    )


def setup(app):
    mathjax_dir()  # fail at once, not after the whole build
    # `configure` sets MathJax's configuration after the HTML builder hashed the configuration for its build info, so
    # a change to `MATHJAX2` alone would leave the pages built before it as they were: this value carries it there
    app.add_config_value("gradalign_mathjax", json.dumps([CONFIG, MATHJAX2], sort_keys=True), "html")
    app.connect("builder-inited", configure, priority=900)
    app.connect("build-finished", copy_mathjax)
    app.connect("html-page-context", code_button, priority=510)
    app.add_css_file(CSS_NAME)
    app.add_js_file(JS_NAME, loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
