"""The book's figure style and the caption that names a record's scale (paper vs ours: `gradalign.comparison`)."""

from __future__ import annotations

PAPER_COLOR = "0.45"


def use_book_style() -> None:
    """Seaborn's paper context with a white grid; one call at the top of every notebook."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind", font_scale=0.95)
    mpl.rcParams.update(
        {"figure.dpi": 110, "savefig.dpi": 150, "axes.titlesize": "medium", "figure.constrained_layout.use": True}
    )


def ramp(n: int):
    """n colours from blue (small) to red (large), as in LGA's Figure 1, with no pale middle."""
    import seaborn as sns

    return sns.blend_palette(["#1f4e9c", "#7b3f8c", "#c0392b"], n)


def scale_caption(record: dict) -> str:
    """One line naming the preset, hardware, seeds and wall time that produced a record."""
    prov = record["provenance"]
    return (
        f"preset `{record['preset']}` · {prov['hardware']} · torch {prov['torch']} · "
        f"seed(s) {', '.join(map(str, prov['seeds']))} · {prov['wall_time_s']:.1f} s · {prov['date'][:10]}"
    )
