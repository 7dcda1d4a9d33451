"""The book's figure style: one size rule, one colour per method, and the caption that names a record's scale
(paper vs ours: `gradalign.book.comparison`).

Why a size rule. matplotlib-inline renders a figure as a PNG cropped to its contents plus 0.1 in on each side
(`bbox_inches="tight"`), and the book shows it at its design size, `DPI` CSS pixels per inch of figure, when
that fits the content column. The column of sphinx-book-theme is about 690 px wide in a 1280 px window (790 px
at 1440 px and wider; about 360 px on a 390 px phone; measured in Chromium). So a figure is at most
`PAGE_WIDTH_PX` (+ 20 px of crop margin) wide and is shown at its design size in a 1280 px window, where its
smallest text, `SMALL_PT` points at `DPI`, measures 9 CSS points (12 px). The figures are rendered at 2x
(`use_book_style`: matplotlib-inline's "retina" format, whose PNG carries its design width), so they stay sharp
on high-density screens; on a phone the book lets a figure scroll sideways instead of shrinking its text
(`gradalign.book.static`). Figures with many panels get more rows, not more width: `panels(n)` lays them out,
at most `MAX_COLUMNS` to a row. tests/test_book_browser.py checks all of this at 1280 and 390 px.
"""

from __future__ import annotations

import math

DPI = 100  # CSS pixels per inch of figure on the page (the PNG holds twice as many: retina)
PAGE_WIDTH_PX = 660  # the widest figure: the content column at 1280 px (about 690 px) less a margin for the crop
PAGE_WIDTH_IN = PAGE_WIDTH_PX / DPI
PANEL_WIDTH_IN = 4.8  # a one-panel figure: wide enough for its labels, narrower than the column
PANEL_HEIGHT_IN = 2.7
MAX_COLUMNS = 3  # at the page width, three panels of about 220 px each; more would squeeze the tick labels
FONT_PT = 10.0  # titles and axis labels: 13.9 px
SMALL_PT = 9.0  # ticks, legends, annotations: 12.5 px (the reviewers' floor is about 9 px)
TEXT_WIDTH_CHARS = 78  # a printed line that fits the column at a 1280 px window: about 660 px of 8.4 px characters

PAPER_COLOR = "0.45"

METHOD_COLORS = {
    # LGA part (§3-4): one hue per method, LGA and LGA + VAT far apart (red, purple), the supervised baseline
    # near-black; matplotlib's tab10 hues, the same family as the default colour cycle.
    "lga": "#d62728",
    "lga_vat": "#9467bd",
    "vat": "#1f77b4",
    "vat_entmin": "#17becf",
    "mean_teacher": "#2ca02c",
    "pi_model": "#ff7f0e",
    "pseudo_label": "#8c564b",
    "supervised": "#262626",
    # IsoLoss part: the BYOL/SimSiam loss L and the isotropic loss L_iso. No figure mixes two parts, so the
    # parts below reuse hues of the first.
    "L": "#1f77b4",
    "iso": "#ff7f0e",
    # meta-gradient part: the four rows of Table 4 (`gradalign.methods.semimeta.VARIANTS`), the method in red
    "labeled_only": "#1f77b4",
    "meta": "#2ca02c",
    "mixup": "#9467bd",
    "meta_mixup": "#d62728",
    # SGR part: the local-learning methods (`gradalign.methods.local.LOCAL_METHODS`), SGR in red, global BP near-black
    "layerwise": "#1f77b4",
    "reforward": "#ff7f0e",
    "sgr": "#d62728",
    "greedy": "#8c564b",
    "dgl": "#2ca02c",
    "infopro": "#9467bd",
    "global_bp": "#262626",
}
"""The colour of each method on every page (keys: `gradalign.training.ssl.METHODS`, the IsoLoss losses, the
meta-gradient variants and the local-learning methods). Notebooks take their colours from here, never their own."""


def use_book_style() -> None:
    """Seaborn's white grid with the book's dpi and font sizes; one call at the top of every notebook. The colour
    cycle is matplotlib's tab10, whose first six hues are far apart (seaborn's colorblind palette has two oranges)."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="tab10")  # no two near-identical hues
    small = {k: SMALL_PT for k in ("xtick.labelsize", "ytick.labelsize", "legend.fontsize", "legend.title_fontsize")}
    mpl.rcParams.update(
        {
            "figure.dpi": DPI,
            "savefig.dpi": 150,
            "font.size": FONT_PT,
            "axes.titlesize": FONT_PT,
            "axes.labelsize": FONT_PT,
            "figure.titlesize": FONT_PT + 1,
            **small,
            "figure.constrained_layout.use": True,
            "lines.linewidth": 1.6,
        }
    )
    try:  # in a Jupyter kernel: inline figures as 2x PNGs shown at their design size
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        if get_ipython() is not None:
            set_matplotlib_formats("retina")
    except ImportError:  # plain Python: nothing is shown inline
        pass


def figure_size(columns: int = 1, rows: int = 1, height: float = PANEL_HEIGHT_IN) -> tuple[float, float]:
    """(width, height) in inches: one panel `PANEL_WIDTH_IN` wide, several share the page width; `height` per row."""
    if not 1 <= columns <= MAX_COLUMNS:
        raise ValueError(f"columns must be 1 to {MAX_COLUMNS}: wider rows would shrink their text on the page")
    return (PANEL_WIDTH_IN if columns == 1 else PAGE_WIDTH_IN), rows * height


def panels(n: int = 1, columns: int | None = None, height: float = PANEL_HEIGHT_IN, **subplots):
    """A figure with n panels, up to `columns` to a row (default 2), as many rows as needed; returns (fig, axes),
    axes a flat array of n (unused grid cells removed), or the one Axes when n is 1. `subplots` goes to
    `plt.subplots` (sharex, ...)."""
    import matplotlib.pyplot as plt

    columns = min(columns or 2, n)
    rows = math.ceil(n / columns)
    fig, grid = plt.subplots(rows, columns, figsize=figure_size(columns, rows, height), squeeze=False, **subplots)
    for ax in grid.flat[n:]:
        ax.remove()
    axes = grid.flat[:n]
    if rows > 1 and n % columns:  # a column whose bottom cell was removed ends one row up: label its x axis there
        for ax in grid[-2, n % columns :]:
            ax.xaxis.set_tick_params(labelbottom=True)
    return fig, (axes[0] if n == 1 else axes)


def outer_labels(axes, xlabel: str | None = None, ylabel: str | None = None) -> None:
    """`xlabel` under the lowest panel of each column and `ylabel` left of the first column only: panels that
    share their axes need them once. (`fig.supxlabel` would collide with `legend_below`.)"""
    specs = [ax.get_subplotspec() for ax in axes]
    for ax, spec in zip(axes, specs):
        lowest = not any(s.colspan.start == spec.colspan.start and s.rowspan.start > spec.rowspan.start for s in specs)
        if xlabel is not None and lowest:
            ax.set_xlabel(xlabel)
        if ylabel is not None and spec.is_first_col():
            ax.set_ylabel(ylabel)


def legend_below(fig, source=None, columns: int = 4, **kwargs) -> None:
    """One legend under the whole figure, so that it covers no line. `source`: the axes whose labelled artists it
    lists (default: the first axes), or a list of artists."""
    if source is None or hasattr(source, "get_legend_handles_labels"):
        handles, labels = (source or fig.axes[0]).get_legend_handles_labels()
    else:
        handles, labels = list(source), [h.get_label() for h in source]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(columns, len(labels)), frameon=False, **kwargs)


def band(ax, x, mean, std=None, *, color=None, label=None, alpha: float = 0.18, **plot) -> None:
    """A mean line and, where the spread is known and not zero (several seeds or trials), a ± std band."""
    import numpy as np

    mean = np.asarray(mean, dtype=float)
    (line,) = ax.plot(x, mean, color=color, label=label, **plot)
    if std is not None and np.nanmax(np.asarray(std, dtype=float), initial=0) > 0:
        std = np.asarray(std, dtype=float)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=alpha, lw=0)


def log_ticks(ax, values, axis: str = "x") -> None:
    """A log axis labelled at `values` themselves: matplotlib's own minor labels (2x10^2, 3x10^2, ...) overlap
    when an axis spans one or two decades."""
    from matplotlib.ticker import NullLocator

    which = ax.xaxis if axis == "x" else ax.yaxis
    getattr(ax, f"set_{axis}scale")("log")
    which.set_minor_locator(NullLocator())
    getattr(ax, f"set_{axis}ticks")(list(values), [f"{v:g}" for v in values])


def ramp(n: int):
    """n colours from blue (small) to red (large), as in LGA's Figure 1, with no pale middle."""
    import seaborn as sns

    return sns.blend_palette(["#1f4e9c", "#7b3f8c", "#c0392b"], n)


def scale_caption(record: dict) -> str:
    """One plain-text line naming the preset, seeds, wall time, hardware, torch and date of a record.

    Pages print it in a code output, which does not wrap: so no Markdown, and at most `TEXT_WIDTH_CHARS`
    characters a line (the torch version, then the date, are left out of a line that would be longer; what is
    still too long wraps)."""
    from gradalign.book.record_text import seeds_text, time_text, where_computed

    prov = record["provenance"]
    seeds, took = seeds_text(record), time_text(record)
    place = f": {where_computed(prov)}" if prov.get("runs") else f" on {where_computed(prov)}"
    parts = [f"preset {record['preset']}", seeds, took + place]
    optional = [f"torch {prov['torch']}", prov["date"][:10]]
    while optional and len(" · ".join(parts + optional)) > TEXT_WIDTH_CHARS:
        optional.pop(0)
    return fit(" · ".join(parts + optional))  # wraps only what is still too long


def fit(text: str) -> str:
    """`text` wrapped to the width of a code output (`TEXT_WIDTH_CHARS`), which the page would otherwise cut off."""
    import textwrap

    return textwrap.fill(text, TEXT_WIDTH_CHARS, subsequent_indent="  ", break_on_hyphens=False)
