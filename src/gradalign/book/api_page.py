"""The book's API reference: the methods, the training loop and the public entry points, by Sphinx autodoc.

`api_markdown` writes the page (`book/appendix/api`, generated at build time like the report, so a new module of
`gradalign.methods` appears without editing the page); `setup` is the Sphinx extension that renders the
docstrings as written. They are plain text, not reStructuredText: Unicode formulas (`g_ℓ = ∇θ L(θ, X_ℓ, y_ℓ)`),
`|` tables, `*` and `_` inside names, none meant as markup. `rst_safe` turns each docstring into
reStructuredText that shows exactly that text: flush lines become a paragraph with every markup character
escaped and code (each `` `name` ``, a dict written out) an inline literal; a Markdown table becomes a table;
indented lines, lists and rules become a literal block, verbatim. A reference to a type that the page does not
document (`torch.Tensor`, a settings class) stays plain text rather than failing the nitpicky build.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

PAGE = "book/appendix/api"
PACKAGE = Path(__file__).resolve().parents[1]  # src/gradalign
ENTRY_POINTS = (
    ("gradalign.records.runner", ("run", "load_or_run")),
    ("gradalign.book.report", ("report_markdown",)),
)
"""Single functions shown from their module (the rest of the module is the library's plumbing)."""
WHOLE_MODULES = (
    ("The training loop", "gradalign.training.loop"),
    ("Verdicts", "gradalign.experiments.verdict"),
    ("The decision rules", "gradalign.experiments.rules"),
)


def methods_modules() -> list[str]:
    """Every module of `gradalign.methods`, by name, sorted."""
    return sorted(f"gradalign.methods.{p.stem}" for p in (PACKAGE / "methods").glob("*.py") if p.stem != "__init__")


def public_functions(module: str) -> list[str]:
    """The module's public functions and classes (top-level `def`/`class` without a leading `_`), read from its
    source by syntax tree, without importing it."""
    path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_")]


def _automodule(module: str) -> str:
    return f"```{{eval-rst}}\n.. automodule:: {module}\n   :members:\n   :undoc-members:\n```"


def api_markdown() -> str:
    """The API reference page (MyST with `eval-rst` blocks: autodoc emits reStructuredText)."""
    lines = [
        "# API reference",
        "",
        "The library's methods, its one training loop and the entry points a reader calls, generated from the "
        "code's docstrings when the book is built (Sphinx autodoc and napoleon). Each module's text names the "
        "paper, section and equation it implements; formulas are written in Unicode, as in the source, and "
        "indented formulas and tables are shown verbatim. Type names in the signatures are the code's own "
        "annotations. How the layers fit together: [How the code is built](design.md).",
        "",
        "## Entry points",
        "",
        "Run one experiment (or load its stored record), and write the reproduction report. From a shell: "
        "`gradalign run <id> --preset <preset>` and `gradalign report`.",
        "",
    ]
    for module, names in ENTRY_POINTS:
        lines += ["```{eval-rst}", *(f".. autofunction:: {module}.{name}" for name in names), "```", ""]
    for title, module in WHOLE_MODULES:
        lines += [f"## {title}: `{module}`", "", _automodule(module), ""]
    lines += [
        "## Methods: `gradalign.methods`",
        "",
        "One module per method and per baseline: losses, update rules and step functions (math only; the "
        "training loop above runs them).",
        "",
    ]
    for module in methods_modules():
        lines += [f"### `{module.rsplit('.', 1)[1]}`", "", _automodule(module), ""]
    return "\n".join(lines)


# --- the docstrings as written -----------------------------------------------------------------------------

LITERAL_LINE = re.compile(r"^(\s|[-+*•|>#]\s|\||[-=~^_*+#.:'\"`]{3,}\s*$|(\d+|[a-zA-Z])[.)]\s|\(\w+\)\s)")
"""A line shown verbatim: indented, a list item, a table row, a rule, an enumerator."""
RST_BLOCK = re.compile(r"^(:\w[\w ]*:|\.\. [\w-]+::)")
"""A field or directive (napoleon's output): already reStructuredText."""
INLINE_CODE = re.compile(r"``(.+?)``|`([^`\s][^`]*?)`")
BRACED = re.compile(r"[\w′∇∂]+[_^]\{[^{}\s]*\}[\w′ᵀ]*")
MARKUP = re.compile(r"([\\*_`|\[\]<>])")


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where `text` holds code: each `` `name` ``, each outermost `{...}` holding a `key: value` (a dict written
    out, `{"grid": {rate: score}}`), and each symbol with a braced sub- or superscript (`W_{L+1}`, the source's
    plain-text notation). The spans do not overlap."""
    spans = [m.span() for m in INLINE_CODE.finditer(text)]
    overlaps = lambda a, b: any(x < b and a < y for x, y in spans)
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth, start = depth + 1, i if depth == 0 else start
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0 and ": " in text[start:i] and not overlaps(start, i + 1):
                spans.append((start, i + 1))
    for m in BRACED.finditer(text):
        if not overlaps(*m.span()):
            spans.append(m.span())
    return sorted(spans)


def _escape(text: str) -> str:
    """Plain text as reStructuredText that shows the same characters; code (`_code_spans`) as an inline literal."""
    out, at = [], 0
    for a, b in _code_spans(text):
        m = INLINE_CODE.fullmatch(text[a:b])
        code = (m.group(1) or m.group(2)) if m else text[a:b]
        out += [MARKUP.sub(r"\\\1", text[at:a]), f"\\ ``{code}``\\ "]
        at = b
    out.append(MARKUP.sub(r"\\\1", text[at:]))
    escaped = "".join(out)
    if escaped.endswith("::"):
        escaped = escaped[:-1]  # a paragraph ending in `::` would announce a literal block
    if escaped[:1] and not escaped[0].isalnum() and escaped[0] != "\\":
        escaped = "\\" + escaped  # `- `, `(a)`, `#.`, `..`: not a list, an enumerator or a comment
    elif re.match(r"^(\d+|[a-zA-Z])[.)]\s", escaped):
        escaped = "\\" + escaped
    return escaped


def rst_safe(lines: list[str]) -> list[str]:
    """A plain-text docstring (its lines, as autodoc prepared them) as reStructuredText showing the same text."""
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        if RST_BLOCK.match(block[0]):
            out.extend([*block, ""])
        else:
            segments: list[tuple[bool, list[str]]] = []
            for line in block:
                continued = bool(segments) and segments[-1][0] and line[:1] == " "  # a list item's next lines
                literal = bool(LITERAL_LINE.match(line)) or continued
                if segments and segments[-1][0] == literal:
                    segments[-1][1].append(line)
                else:
                    segments.append((literal, [line]))
            for literal, seg in segments:
                if literal and _is_table(seg):
                    out.extend(_list_table(seg))
                elif literal:
                    indent = min(len(s) - len(s.lstrip()) for s in seg if s.strip())
                    out.extend([".. code-block:: text", "", *("   " + s[indent:] for s in seg), ""])
                else:
                    out.extend([_escape(" ".join(s.strip() for s in seg)), ""])
        block.clear()

    for line in lines:
        if line.strip():
            block.append(line.rstrip())
        else:
            flush()
    flush()
    return out


TABLE_RULE = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def _is_table(seg: list[str]) -> bool:
    """A Markdown table: `| a | b |` rows, the second a `|---|---|` rule, as many cells in every row."""
    rows = [ln.strip() for ln in seg]
    if len(rows) < 3 or not TABLE_RULE.match(rows[1]) or not all(r.startswith("|") and r.endswith("|") for r in rows):
        return False
    return len({r.count("|") for r in rows}) == 1


def _list_table(seg: list[str]) -> list[str]:
    """A Markdown table as a reStructuredText list table (a table a reader sees, not its source text)."""
    rows = [[c.strip() for c in ln.strip()[1:-1].split("|")] for i, ln in enumerate(seg) if i != 1]
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in rows:
        for j, text in enumerate(row):
            out.append(("   * - " if j == 0 else "     - ") + (_escape(text) if text else ""))
    return [*out, ""]


CSS_NAME = "gradalign-api.css"
API_CSS = """/* gradalign.book.api_page: a signature wraps inside the column, at a phone's 360 px too */
dl.py > dt.sig { overflow-wrap: anywhere; }
dl.py > dt.sig .sig-param { white-space: normal; }
"""


def _write_css(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        (Path(app.outdir) / "_static" / CSS_NAME).write_text(API_CSS)


def _process_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = rst_safe(lines)


def _skip_member(app, what, name, obj, skip, options):
    """On a module, document its functions and classes, not its constants."""
    if what == "module" and not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return True
    return None


def _plain_missing_reference(app, env, node, contnode):
    """An annotation naming a type the page does not document: plain text on the API page."""
    if node.get("refdomain") == "py" and node.get("refdoc") == PAGE:
        return contnode
    return None


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.setup_extension("sphinx.ext.napoleon")
    app.connect("autodoc-process-docstring", _process_docstring, priority=600)  # after napoleon (500)
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("missing-reference", _plain_missing_reference)
    app.connect("build-finished", _write_css)
    app.add_css_file(CSS_NAME)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
