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
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.util.fileutil import copy_asset

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
}


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


def setup(app):
    mathjax_dir()  # fail at once, not after the whole build
    app.connect("builder-inited", configure, priority=900)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
