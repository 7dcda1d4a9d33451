"""The sliders of the meta-gradient and SGR theory pages (`gradalign.book.sliders`): each callback's numbers at two
settings say what the page's derivation says, and each page shows the default output, then builds the widget
only in a live session."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import pytest

from gradalign.book import sliders

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent


# --- metagrad/01: Eq. 11 against Eq. 5, against α_t and ε ---------------------------------------------------


def test_first_order_defaults_are_the_record_and_the_paper():
    from gradalign.experiments.metagrad.algorithm1 import FirstOrderConfig
    from gradalign.methods.metagrad import SEMIMETA_C

    cfg = FirstOrderConfig()
    assert sliders.first_order_defaults() == {"alpha": cfg.alpha, "c": SEMIMETA_C, "perturbation": cfg.perturbation}


def test_the_finite_difference_error_shrinks_as_c_squared():
    """At Algorithm 1's pseudo labels Eq. 8 is Eq. 5 (the α part is rounding), and Eq. 11's error falls by about
    100 per decade of c over 1e-3..1e-1 (central difference, order c²)."""
    coarse, fine = (sliders.first_order_errors(0.5, c, 0.0, points=3)["at"] for c in (1e-1, 1e-3))
    assert coarse["alpha_part"] < 1e-12 and fine["alpha_part"] < 1e-12
    assert math.isclose(fine["total"], fine["eps_part"], rel_tol=1e-6)
    ratio = fine["total"] / coarse["total"]
    assert 1e-5 < ratio < 1e-3, ratio


def test_off_the_initial_labels_the_first_order_gap_grows_with_alpha():
    """Off ỹ = f the gap of Eq. 8 is of order α² while Eq. 5 is linear in α: relative to Eq. 5 it grows tenfold per
    decade of α; the finite difference's relative part does not depend on α."""
    small, large = (sliders.first_order_errors(a, 0.01, 0.05, points=3)["at"] for a in (1e-3, 1e-2))
    assert 5 < large["alpha_part"] / small["alpha_part"] < 20
    assert math.isclose(large["eps_part"], small["eps_part"], rel_tol=1e-2)
    assert small["alpha_part"] > 1e-8  # not zero: the noise moved ỹ off f


def test_the_first_order_curves_span_the_slider_ranges():
    e = sliders.first_order_errors(0.5, 0.01, 0.05, points=5)
    assert e["cs"][0] == pytest.approx(sliders.FD_C_RANGE[0]) and e["cs"][-1] == pytest.approx(sliders.FD_C_RANGE[1])
    assert e["alphas"][0] == pytest.approx(sliders.FD_ALPHA_RANGE[0])
    assert all(len(v) == 5 for part in ("by_c", "by_alpha") for v in e[part].values())


# --- sgr/01: Proposition 3.5 against η‖x0‖² and λ -------------------------------------------------------------


@pytest.fixture(scope="module")
def p35():
    defaults = sliders.prop35_defaults()
    return defaults, sliders.prop35_facts(sliders.prop35_draw(defaults["draw"]))


def test_the_default_draw_qualifies_and_has_a_sign_change_in_range(p35):
    from gradalign.experiments.sgr.two_layer import TwoLayerConfig

    defaults, facts = p35
    assert facts["assumption"] and facts["relative_sgr"] <= TwoLayerConfig().small_sgr
    assert sliders.STEP_RANGE[0] < facts["flip"] < sliders.STEP_RANGE[1]
    assert defaults["step_size"] == pytest.approx(TwoLayerConfig().eta * facts["x0_sq"])


def test_the_slider_step_is_the_records_step(p35):
    """At λ = 1 the slider's L2′ − L̂2′ equals that of `prop35_step`, the function behind the record, per reading."""
    from gradalign.analysis.local_theory import prop35_step

    defaults, facts = p35
    row = prop35_step(sliders.prop35_draw(defaults["draw"]), defaults["step_size"] / facts["x0_sq"])
    at = sliders.prop35_outcome(defaults["step_size"], 1.0, defaults["draw"], points=3)["at"]
    assert at["L2_plain"] == pytest.approx(row["loss_without"], abs=1e-12)
    for v in sliders.PROP35_READINGS:
        assert at[v]["margin"] == pytest.approx(row["loss_without"] - row["loss_with"][v], abs=1e-12)
        assert at[v]["first_order"] == pytest.approx(-row["first_order"][v]["closed_form"], rel=1e-9)


@pytest.mark.parametrize("lam", [0.1, 1.0])
def test_proposition_35_changes_sign_where_the_closed_form_says(p35, lam):
    """With δx2 held constant (the proof's algebra) the outcome's sign is that of rᵀx1′, which changes at η‖x0‖² =
    (δx1ᵀx1 − δx2ᵀx2)/(rᵀδx1): a third of it and three times it give opposite outcomes, each with the sign of the
    closed-form first-order term; Eq. 30's printed step gives the opposite outcome at both."""
    defaults, facts = p35
    below, above = (
        sliders.prop35_outcome(s, lam, defaults["draw"], points=3)["at"] for s in (facts["flip"] / 3, facts["flip"] * 3)
    )
    for at in (below, above):
        held = at["constant_delta"]
        assert held["margin"] * held["first_order"] > 0
        assert at["as_printed"]["margin"] * held["margin"] < 0
    assert below["constant_delta"]["margin"] * above["constant_delta"]["margin"] < 0


def test_the_sgr_term_grows_with_lambda(p35):
    """The SGR step's effect on L2′ grows with λ, in proportion at small λ (the first-order term, linear in λ)."""
    defaults, _ = p35
    e = sliders.prop35_outcome(defaults["step_size"], 1.0, defaults["draw"], points=9)
    for v in sliders.PROP35_READINGS:
        margins = [abs(m) for m in e["by_lambda"][v]["margin"]]
        assert margins[-1] > margins[len(margins) // 2] > margins[0] > 0
        small, first = e["by_lambda"][v]["margin"][0], e["by_lambda"][v]["first_order"][0]
        assert small == pytest.approx(first, rel=1e-2)


# --- the callbacks draw, fast, and the pages hold them --------------------------------------------------------


@pytest.mark.parametrize(
    "show, defaults",
    [
        (sliders.show_first_order_errors, sliders.first_order_defaults),
        (sliders.show_prop35, sliders.prop35_defaults),
    ],
)
def test_each_view_draws_and_returns_nothing(show, defaults, monkeypatch):
    import time

    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda: plt.close("all"))
    settings = defaults()
    assert show(**settings) is None  # interact would display a return value
    start = time.perf_counter()
    show(**settings)
    assert time.perf_counter() - start < 5  # well under a second on an idle core; generous for a loaded CI machine


@pytest.mark.parametrize(
    "notebook, show, defaults, widgets",
    [
        (
            "notebooks/metagrad/01_theory.ipynb",
            "show_first_order_errors",
            sliders.first_order_defaults,
            sliders.first_order_widgets,
        ),
        ("notebooks/sgr/01_theory.ipynb", "show_prop35", sliders.prop35_defaults, sliders.prop35_widgets),
    ],
)
def test_each_page_shows_the_default_then_builds_its_widget_live(notebook, show, defaults, widgets):
    import inspect

    cells = [c for c in json.loads((ROOT / notebook).read_text())["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    shown = [i for i, s in enumerate(sources) if f"{show}(**" in s and "interact" not in s]
    live = [i for i, s in enumerate(sources) if f"widgets.interact({show}," in s]
    assert len(shown) == 1 and len(live) == 1 and shown[0] < live[0]
    assert "remove-output" not in cells[shown[0]]["metadata"].get("tags", [])  # the static book shows it
    assert "remove-output" in cells[live[0]]["metadata"].get("tags", [])
    assert "if interactive_session():" in sources[live[0]]
    assert all(not c["outputs"] for c in cells)
    # every slider is a parameter of the callback, and each starts at the page's default
    values = defaults()
    built = widgets(values)
    assert set(built) == set(inspect.signature(getattr(sliders, show)).parameters) == set(values)
    for name, widget in built.items():
        assert widget.min <= (math.log10(values[name]) if hasattr(widget, "base") else values[name]) <= widget.max
