"""LGA part: every setting of Algorithm 1 that a run used, as table rows (value, and where the paper states it or that
it is our choice), for the pages lga/03 (§3.2, the shells study) and lga/04 (§4, the benchmark).

The values are read from the settings a run trained with (`methods.lga.LGASettings`), rebuilt from a stored
record's config by the same functions the training calls (`training.shells.lga_settings`,
`methods.lga_ssl.lga_settings`), so the EMA decays and Adam's constants, which no config names, appear as the runs
used them. What the paper states, and where, is `SOURCES`; anything it does not state is marked "our choice".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from gradalign.config import construct
from gradalign.methods.lga import ConstantWeight, LGASettings, no_labeled_gradient

SECTIONS = {"shells": "§3.2", "benchmark": "§4"}
"""The sections whose runs the book shows: the synthetic study (lga/03) and the benchmark (lga/04)."""


@dataclass(frozen=True)
class Source:
    """One setting: its symbol, what it is, the value the paper states per section (with where), and why ours."""

    symbol: str
    meaning: str
    stated: dict[str, tuple[object, str]] = field(default_factory=dict)  # section -> (value, where in the paper)
    note: dict[str, str] = field(default_factory=dict)  # section (or "*") -> why our value, where it is our choice


SOURCES: dict[str, Source] = {
    "task": Source(
        "f",
        "label parameterisation and loss",
        {s: ("classification", "Algorithm 1: f = softmax for classification") for s in SECTIONS},
    ),
    "alpha_theta": Source(
        "α_θ",
        "θ's step size",
        note={
            "shells": "from the tuning on the validation split (lga/03); Figure 1's value (§3.1), the only one stated",
            "benchmark": "Figure 1's value (§3.1), the only one stated; the paper tuned it (§4) and states no result",
        },
    ),
    "alpha_w": Source(
        "α_w",
        "w's step size",
        note={
            "shells": "from the tuning on the validation split (lga/03); Figure 1 (§3.1) uses 10⁻³",
            "benchmark": "Figure 1 (§3.1) uses 10⁻³; cpu and gpu take 10⁻² for their short runs; the paper tuned "
            "it (§4) and states no result",
        },
    ),
    "eps_norm": Source(
        "ε_norm",
        "Eq. 2's stabiliser",
        note={
            "shells": "Figure 1's value (§3.1), the only one stated; the tuning kept it (lga/03)",
            "benchmark": "Figure 1's value (§3.1), the only one stated; the paper tuned it (§4) and states no result",
        },
    ),
    "grad_ema_decay": Source(
        "EMA(g_ℓ) decay",
        "decay of the EMA of the labeled gradient (bias-corrected as Adam's moments: our choice)",
        note={"*": "Adam's β1, a mean over about 10 minibatches while θ moves"},
    ),
    "norm_ema_decay": Source(
        "EMA(v⁴) decay",
        "decay of the EMA of v⁴ in Eq. 2 (bias-corrected as Adam's moments: our choice)",
        note={"*": "Adam's β2, a slowly varying per-parameter scale"},
    ),
    "labeled_weight": Source(
        "T(i)",
        "weight of g_ℓ in θ's gradient",
        note={
            "shells": "constant, from the tuning on the validation split (lga/03); §3.1 uses T ≡ 0 (Eq. 10)",
            "benchmark": "constant; §3.1 uses T ≡ 0 (Eq. 10), §4 states no schedule",
        },
    ),
    "optimizer": Source(
        "ADAMUPDATE",
        "optimizer of θ and of w",
        {
            "shells": ("adam", "§3.2: 'We used Algorithm 1' (ADAMUPDATE)"),
            "benchmark": ("adam", "Algorithm 1 (ADAMUPDATE); §4: 'trained with the Adam optimizer'"),
        },
    ),
    "adam_betas": Source("Adam (β1, β2)", "Adam's moment decays", note={"*": "Adam's defaults"}),
    "adam_eps": Source("Adam ε", "Adam's stabiliser", note={"*": "Adam's default (also TensorFlow's)"}),
    "check_every": Source(
        "NaN/Inf check",
        "steps between finiteness checks inside the step (0: none)",
        note={
            "shells": "a guard; it never changes an update",
            "benchmark": "a guard; 0: the training loop checks at every evaluation instead; it never changes an update",
        },
    ),
}
"""Every field of `LGASettings` (a test checks that none is missing)."""


def _value_text(name: str, value: object) -> str:
    if name == "labeled_weight":
        if isinstance(value, ConstantWeight):
            return f"{value.c:g} (constant)"
        if value is no_labeled_gradient:
            return "0 (constant)"
        return getattr(value, "__name__", repr(value))
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_value_text(name, v) for v in value) + ")"
    return str(value)


def settings_rows(settings: LGASettings, section: str) -> list[dict]:
    """One row per field of `settings`: {"setting", "symbol", "meaning", "value", "stated" (bool), "source"}.

    "stated" is True only where the paper states that setting for `section` ("shells": §3.2, "benchmark": §4) and
    the run used the stated value; elsewhere the source reads "our choice", with the paper's value where it differs.
    """
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; choose one of: {', '.join(SECTIONS)}")
    rows = []
    for f in fields(settings):
        source = SOURCES[f.name]
        value = getattr(settings, f.name)
        note = source.note.get(section, source.note.get("*", ""))
        if section in source.stated:
            paper, where = source.stated[section]
            stated = value == paper
            text = (
                f"paper: {where}"
                if stated
                else f"our choice (the paper: {_value_text(f.name, paper)}, {where})" + (f"; {note}" if note else "")
            )
        else:
            stated, text = False, f"our choice ({SECTIONS[section]} states none)" + (f": {note}" if note else "")
        rows.append(
            {
                "setting": f.name,
                "symbol": source.symbol,
                "meaning": source.meaning,
                "value": _value_text(f.name, value),
                "stated": stated,
                "source": text,
            }
        )
    return rows


def shells_settings(config: dict, eps_norm: float | None = None) -> LGASettings:
    """The LGA settings of a shells study's trials, from its record's config (`ShellsStudyConfig.to_dict()`);
    `eps_norm`: one of its further ε arms instead of the trials' own."""
    from gradalign.training.shells import ShellsTrialSettings, lga_settings

    trial = construct(ShellsTrialSettings, config["trial"])
    return lga_settings(trial if eps_norm is None else replace(trial, eps_norm=eps_norm))


def benchmark_settings(config: dict) -> LGASettings:
    """The LGA settings of a benchmark record's LGA runs (LGA + VAT adds VAT's term, with the same LGA settings),
    from its config (`SSLBenchConfig.to_dict()`)."""
    from gradalign.methods.lga_ssl import LGABenchmarkSettings, lga_settings

    return lga_settings(construct(LGABenchmarkSettings, config["lga"]))


def markdown_table(rows: list[dict]) -> str:
    """The rows as a Markdown table: setting, value, source."""
    out = ["| setting | value | paper or our choice |", "| --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['symbol']}: {r['meaning']} | {r['value']} | {r['source']} |")
    return "\n".join(out)
