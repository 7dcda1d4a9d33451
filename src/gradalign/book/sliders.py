"""What the pages' live sliders compute and draw, from the library's own functions (no number typed in).

Each slider has a computation that returns its numbers (a test runs it at two settings) and a view that draws
them and returns None (`ipywidgets.interact` displays a callback's return value). A page calls the view once
with its defaults, so the static book shows that output, then builds the widget only in a live session
(`gradalign.book.notebook.interactive_session`). Every range and default not stated by the paper is our choice
and is said so on the page.

- `first_order_errors` / `show_first_order_errors` (metagrad/01, Eq. 7-11): the difference quotient of Eq. 11
  against the exact meta-gradient of Eq. 5, split into its two parts, against α_t and ε = c/‖g‖.
- `prop35_outcome` / `show_prop35` (sgr/01, Proposition 3.5): on one draw of the two-layer linear model, whether
  one step with L2^SGR lowers L2′ more than the plain step, against η‖x0‖² and against λ, beside the closed-form
  first-order term.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gradalign.experiments.exact import one_thread


def _log_slider(value: float, bounds: tuple[float, float]):
    """A base-10 log slider over `bounds`, a twentieth of a decade per notch, redrawn on release."""
    import ipywidgets as widgets

    lo, hi = (math.log10(b) for b in bounds)
    return widgets.FloatLogSlider(value=value, base=10, min=lo, max=hi, step=0.05, continuous_update=False)


# --- Meta-gradient, Eq. 7-11: the first-order form and its finite difference ---------------------------------

FD_C_RANGE = (1e-4, 1.0)  # c of ε = c/‖g‖ on the slider and the left panel (our choice; the paper's c is 0.01)
FD_ALPHA_RANGE = (1e-4, 10.0)  # α_t on the slider and the right panel (our choice: the record's α grids)
FD_PERTURBATION_MAX = 0.2  # largest std of the noise added to ỹ (our choice; 0 is Algorithm 1's ỹ = f)
GRID_POINTS = 17  # points of each panel's curve (our choice)


def _first_order_problem():
    """The Eq. 7-11 record's problem (its config's sizes and seed): the first tanh MLP it draws."""
    from gradalign.analysis.metagrad_theory import mlp_problem
    from gradalign.experiments.metagrad.algorithm1 import FirstOrderConfig

    cfg = FirstOrderConfig()
    gen = torch.Generator().manual_seed(cfg.seed)
    problem = mlp_problem(gen, cfg.features, cfg.hidden, cfg.classes, cfg.labeled, cfg.unlabeled)
    noise = torch.randn(cfg.unlabeled, cfg.classes, generator=gen, dtype=torch.float64)
    return cfg, problem, noise


def first_order_defaults() -> dict:
    """The sliders' defaults: the record's α (our choice), the paper's c = 0.01 (§3.2) and the record's
    perturbation of ỹ (our choice)."""
    from gradalign.methods.metagrad import SEMIMETA_C

    cfg, _, _ = _first_order_problem()
    return {"alpha": cfg.alpha, "c": SEMIMETA_C, "perturbation": cfg.perturbation}


@one_thread  # tiny float64 problems: threads only add synchronisation (see `one_thread`)
def first_order_errors(alpha: float, c: float, perturbation: float, points: int = GRID_POINTS) -> dict:
    """Relative errors against the exact meta-gradient ∇ỹ of Eq. 5 (`exact_meta_gradient`), at ỹ = f(x^u; θ_t)
    plus `perturbation` times a fixed Gaussian draw: `total`, Eq. 11's difference quotient (`first_order_fd`);
    `alpha_part`, Eq. 8 computed exactly (`first_order_jvp`), whose gap is the first-order form's own (zero at
    ỹ = f, order α² elsewhere); `eps_part`, ‖Eq. 11 − Eq. 8‖/‖Eq. 5‖, the finite difference's (order c²). Each
    against c over `FD_C_RANGE` at `alpha`, and against α over `FD_ALPHA_RANGE` at `c`; `at` holds the values at
    (alpha, c)."""
    from gradalign.methods.metagrad import exact_meta_gradient, first_order_fd, first_order_jvp

    _, p, noise = _first_order_problem()
    args = (p.f, p.params, p.x_l, p.y_l, p.x_u)
    y_tilde = p.f(p.params, p.x_u).detach() + perturbation * noise
    jvp_1 = first_order_jvp(*args, 1.0, p.loss)  # Eq. 8 is linear in α

    def errors(a: float, cc: float) -> dict:
        exact = exact_meta_gradient(*args, a, y_tilde=y_tilde, loss=p.loss)
        fd, jvp = first_order_fd(*args, a, cc, p.loss), a * jvp_1
        norm = float(exact.norm())
        return {
            "total": float((fd - exact).norm()) / norm,
            "alpha_part": float((jvp - exact).norm()) / norm,
            "eps_part": float((fd - jvp).norm()) / norm,
        }

    cs = np.logspace(math.log10(FD_C_RANGE[0]), math.log10(FD_C_RANGE[1]), points)
    alphas = np.logspace(math.log10(FD_ALPHA_RANGE[0]), math.log10(FD_ALPHA_RANGE[1]), points)
    by_c = [errors(alpha, float(cc)) for cc in cs]
    by_alpha = [errors(float(a), c) for a in alphas]
    keys = ("total", "alpha_part", "eps_part")
    return {
        "alpha": alpha,
        "c": c,
        "perturbation": perturbation,
        "cs": cs.tolist(),
        "alphas": alphas.tolist(),
        "by_c": {k: [e[k] for e in by_c] for k in keys},
        "by_alpha": {k: [e[k] for e in by_alpha] for k in keys},
        "at": errors(alpha, c),
    }


FD_LINES = (
    ("total", "Eq. 11 − Eq. 5 (the code's error)", "#262626", "-"),
    ("eps_part", "Eq. 11 − Eq. 8 (finite difference)", "#1f77b4", "--"),
    ("alpha_part", "Eq. 8 − Eq. 5 (first-order form)", "#d62728", ":"),
)
FLOOR = 1e-17  # zero (the first-order form at ỹ = f) drawn at the bottom of a log axis


def show_first_order_errors(alpha: float, c: float, perturbation: float) -> None:
    """Two panels: the errors of `first_order_errors` against c (at α) and against α (at c), each relative to
    ‖Eq. 5‖, the sliders' values marked."""
    import matplotlib.pyplot as plt

    from gradalign.book.plotting import fit, legend_below, panels

    e = first_order_errors(alpha, c, perturbation)
    fig, axes = panels(2, sharey=True)
    for ax, xs, curves, mark, name in (
        (axes[0], e["cs"], e["by_c"], c, r"$c$ ($\epsilon=c/\|g\|$)"),
        (axes[1], e["alphas"], e["by_alpha"], alpha, r"$\alpha_t$"),
    ):
        for key, label, color, style in FD_LINES:
            ax.loglog(xs, np.maximum(curves[key], FLOOR), ls=style, color=color, label=label)
        ax.axvline(mark, color="0.5", lw=0.8)
        ax.set(xlabel=name)
    for key, _, color, _ in FD_LINES:
        axes[0].plot([c], [max(e["at"][key], FLOOR)], "o", ms=4, color=color)
        axes[1].plot([alpha], [max(e["at"][key], FLOOR)], "o", ms=4, color=color)
    axes[0].axvline(0.01, color="0.3", lw=0.8, ls=":")
    axes[0].set(ylabel=r"relative to $\|$Eq. 5$\|$", title=rf"against $c$, at $\alpha_t$ = {alpha:.3g}")
    axes[1].set(title=rf"against $\alpha_t$, at $c$ = {c:.3g}")
    legend_below(fig, axes[0], columns=3)
    plt.show()
    at = e["at"]
    where = "Algorithm 1's ỹ = f(xᵘ)" if perturbation == 0 else f"ỹ = f(xᵘ) + {perturbation:.3g} × N(0, 1) per entry"
    print(
        fit(
            f"At {where}, α = {alpha:.3g}, c = {c:.3g}: Eq. 11 is off the exact meta-gradient by {at['total']:.1e} "
            f"(relative); the finite difference accounts for {at['eps_part']:.1e} and the first-order form for "
            f"{at['alpha_part']:.1e} (drawn at 1e-17 when zero to rounding). The dotted line is the paper's c = 0.01."
        )
    )


def first_order_widgets(defaults: dict) -> dict:
    """The sliders of `show_first_order_errors`, at `defaults` (`first_order_defaults`), over our ranges."""
    import ipywidgets as widgets

    return {
        "alpha": _log_slider(defaults["alpha"], FD_ALPHA_RANGE),
        "c": _log_slider(defaults["c"], FD_C_RANGE),
        "perturbation": widgets.FloatSlider(
            value=defaults["perturbation"], min=0.0, max=FD_PERTURBATION_MAX, step=0.01, continuous_update=False
        ),
    }


# --- SGR, Proposition 3.5: one step with the SGR term ------------------------------------------------------

PROP35_READINGS = {
    "as_printed": ("Eq. 30 as printed", "#1f77b4"),
    "constant_delta": ("descent, δx2 constant", "#ff7f0e"),
    "autograd": ("descent (autograd)", "#d62728"),
}
"""The three readings of layer 2's SGR gradient the page compares (`gradalign.analysis.local_theory`), with the
page's colours."""
STEP_RANGE = (1e-3, 10.0)  # η‖x0‖² on the slider and the left panel: the record's sweep (our choice)
LAMBDA_RANGE = (1e-3, 10.0)  # λ on the slider and the right panel (our choice; the page's steps use λ = 1)
SEARCHED_DRAWS = 200  # draws of the record's sequence the slider offers (our choice)


def _prop35_config():
    from gradalign.experiments.sgr.two_layer import TwoLayerConfig

    return TwoLayerConfig()


_DRAWS: list = []


def prop35_draw(k: int):
    """Draw k of the `sgr.prop35` record's sequence (its config's seed, sizes and σ range), cached."""
    from gradalign.analysis.local_theory import two_layer_draw
    from gradalign.experiments.sgr.exact import log_uniform

    cfg = _prop35_config()
    if not _DRAWS:
        _DRAWS.append(torch.Generator().manual_seed(cfg.seed))
    gen = _DRAWS[0]
    while len(_DRAWS) <= k + 1:
        _DRAWS.append(two_layer_draw(cfg.dims, cfg.classes, log_uniform(gen, cfg.sigma_low, cfg.sigma_high), gen))
    return _DRAWS[k + 1]


def _ce(logits: torch.Tensor, y: int) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[None], torch.tensor([y]))


def _prop35_state(d, eta: float) -> dict:
    """The quantities of Eq. 25-30 for one step of each layer at learning rate η: x1, δx1, x1′ (Eq. 27), x2, δx2,
    layer 2's plain step θ2′ (Eq. 28) and its output x2′, and G, the gradient of L2^SGR = ½‖r‖² in θ2, per reading
    (the same readings as `prop35_step`)."""
    t1 = d.theta1.clone().requires_grad_(True)
    x1 = t1 @ d.x0
    g1, dx1 = torch.autograd.grad(_ce(x1 @ d.M1, d.y), (t1, x1))
    x1 = x1.detach()
    t2, xi = d.theta2.clone().requires_grad_(True), x1.clone().requires_grad_(True)
    x2 = t2 @ xi
    g2, now, dx2 = torch.autograd.grad(_ce(x2 @ d.M2, d.y), (t2, xi, x2), create_graph=True)
    r = dx1 - now
    full = torch.autograd.grad(0.5 * r.square().sum(), t2)[0]
    dx2c, rc = dx2.detach(), r.detach()
    x1_new = (d.theta1 - eta * g1) @ d.x0
    theta2_new = d.theta2 - eta * g2.detach()
    return {
        "x1": x1,
        "dx1": dx1,
        "x2": x2.detach(),
        "dx2": dx2c,
        "r": rc,
        "x1_new": x1_new,
        "theta2_new": theta2_new,
        "x2_new": theta2_new @ x1_new,
        "G": {"autograd": full, "constant_delta": -torch.outer(dx2c, rc), "as_printed": torch.outer(dx2c, rc)},
    }


def _prop35_margins(d, eta: float, lams) -> dict:
    """Per reading, L2′ − L̂2′ at each λ (θ̂2′ = θ2′ − ηλG: > 0 where the SGR step lowers L2′ more), and the
    closed-form first-order term λ · dL̂2′/dλ|₀ of `prop35_first_order` (sign flipped to match)."""
    from gradalign.analysis.local_theory import prop35_first_order

    s = _prop35_state(d, eta)
    plain = float(_ce(s["x2_new"] @ d.M2, d.y))
    closed = prop35_first_order(d, s["x1"], s["x2"], s["dx1"], s["dx2"], s["x2_new"], s["x1_new"], eta)
    out = {"plain": plain, "before": float(_ce(s["x2"] @ d.M2, d.y))}
    for v in PROP35_READINGS:
        out[v] = {
            "margin": [
                plain - float(_ce((s["theta2_new"] - eta * lam * s["G"][v]) @ s["x1_new"] @ d.M2, d.y)) for lam in lams
            ],
            "first_order": [-lam * closed[v] for lam in lams],
        }
    return out


def prop35_facts(d) -> dict:
    """What Proposition 3.5 assumes, measured on draw d before the step, and where the proof's algebra changes
    sign: the label's logit larger in layer 2 (the assumption), δx2ᵀx2 ≤ δx1ᵀx1 (the condition the proof
    derives), ‖r‖/‖δx1‖ (how small L2^SGR is), and the root of rᵀx1′ = (δx1ᵀx1 − δx2ᵀx2) − η‖x0‖² rᵀδx1 in
    η‖x0‖² (None when it has no positive root): the first-order term changes sign there."""
    s = _prop35_state(d, 0.0)
    a = float(s["dx1"] @ s["x1"] - s["dx2"] @ s["x2"])
    b = float(s["r"] @ s["dx1"])
    return {
        "assumption": float(s["x2"] @ d.M2[:, d.y]) > float(s["x1"] @ d.M1[:, d.y]),
        "delta_condition": a >= 0,
        "relative_sgr": float(s["r"].norm() / s["dx1"].norm()),
        "x0_sq": float(d.x0.square().sum()),
        "flip": a / b if b != 0 and a / b > 0 else None,
    }


@one_thread
def prop35_default_draw() -> int:
    """The first draw of the record's sequence that qualifies as the record's check reads it (the assumption
    holds, ‖r‖ ≤ small_sgr ‖δx1‖) and whose first-order sign flip lies inside the slider's η‖x0‖² range, a decade
    from either end: a draw where the proposition's outcome depends on the step size."""
    cfg = _prop35_config()
    lo, hi = STEP_RANGE[0] * 10, STEP_RANGE[1] / 10
    for k in range(SEARCHED_DRAWS):
        f = prop35_facts(prop35_draw(k))
        if f["assumption"] and f["relative_sgr"] <= cfg.small_sgr and f["flip"] and lo <= f["flip"] <= hi:
            return k
    raise RuntimeError(f"no qualifying draw with a sign flip in η‖x0‖² ∈ [{lo:g}, {hi:g}] among {SEARCHED_DRAWS}")


def prop35_defaults() -> dict:
    """The sliders' defaults: the draw of `prop35_default_draw`, the record's η (our choice) as η‖x0‖² on that
    draw, and λ = 1 (the record's SGR steps)."""
    k = prop35_default_draw()
    return {"step_size": _prop35_config().eta * prop35_facts(prop35_draw(k))["x0_sq"], "lam": 1.0, "draw": k}


@one_thread
def prop35_outcome(step_size: float, lam: float, draw: int, points: int = GRID_POINTS) -> dict:
    """On draw `draw`: L2′ − L̂2′ per reading (> 0: the SGR step lowers L2′ more) and its closed-form first-order
    term, against η‖x0‖² over `STEP_RANGE` at λ = `lam`, and against λ over `LAMBDA_RANGE` at η‖x0‖² =
    `step_size`; `at` holds them at (step_size, lam), with the plain step's L2 before and after."""
    d = prop35_draw(draw)
    facts = prop35_facts(d)
    sizes = np.logspace(math.log10(STEP_RANGE[0]), math.log10(STEP_RANGE[1]), points)
    lams = np.logspace(math.log10(LAMBDA_RANGE[0]), math.log10(LAMBDA_RANGE[1]), points)
    by_step = [_prop35_margins(d, float(s) / facts["x0_sq"], [lam]) for s in sizes]
    by_lambda = _prop35_margins(d, step_size / facts["x0_sq"], lams.tolist())
    at = _prop35_margins(d, step_size / facts["x0_sq"], [lam])
    return {
        "step_size": step_size,
        "lam": lam,
        "draw": draw,
        "facts": facts,
        "sizes": sizes.tolist(),
        "lams": lams.tolist(),
        "by_step": {
            v: {k: [row[v][k][0] for row in by_step] for k in ("margin", "first_order")} for v in PROP35_READINGS
        },
        "by_lambda": {v: by_lambda[v] for v in PROP35_READINGS},
        "at": {
            "L2": at["before"],
            "L2_plain": at["plain"],
            **{v: {k: at[v][k][0] for k in ("margin", "first_order")} for v in PROP35_READINGS},
        },
    }


def show_prop35(step_size: float, lam: float, draw: int) -> None:
    """Two panels (L2′ − L̂2′ against η‖x0‖² at λ, and against λ at η‖x0‖², each reading with its first-order
    term dashed, on a symmetric log axis) and a table of the outcome at the sliders' values."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import display

    from gradalign.book.plotting import fit, legend_below, panels

    e = prop35_outcome(step_size, lam, draw)
    f = e["facts"]
    fig, axes = panels(2, sharey=True)
    for ax, xs, curves, mark in (
        (axes[0], e["sizes"], e["by_step"], step_size),
        (axes[1], e["lams"], e["by_lambda"], lam),
    ):
        for v, (label, color) in PROP35_READINGS.items():
            ax.plot(xs, curves[v]["margin"], color=color, label=label)
            ax.plot(xs, curves[v]["first_order"], color=color, ls="--", lw=0.9)
        ax.axhline(0, color="0.2", lw=0.8)
        ax.axvline(mark, color="0.5", lw=0.8)
        ax.set_xscale("log")
    every = [abs(x) for cs in (e["by_step"], e["by_lambda"]) for c in cs.values() for x in c["margin"] if x != 0]
    linear = 10.0 ** math.floor(math.log10(max(every, default=1.0) * 1e-3))  # ±linear fall on ticks, apart from 0
    axes[0].set_yscale("symlog", linthresh=linear)
    if f["flip"]:
        axes[0].axvline(f["flip"], color="#ff7f0e", lw=0.8, ls=":")
    axes[0].set(
        xlabel=r"$\eta\|x_0\|^2$",
        ylabel=r"$\mathcal{L}_2'-\hat{\mathcal{L}}_2'$ (> 0: SGR helps)",
        title=rf"against $\eta\|x_0\|^2$, at $\lambda$ = {lam:.3g}",
    )
    axes[1].set(xlabel=r"$\lambda$", title=rf"against $\lambda$, at $\eta\|x_0\|^2$ = {step_size:.3g}")
    legend_below(fig, axes[0], columns=3)
    plt.show()
    at = e["at"]
    table = pd.DataFrame(
        {
            "L2′ − L̂2′": [at[v]["margin"] for v in PROP35_READINGS],
            "first-order term": [at[v]["first_order"] for v in PROP35_READINGS],
            "SGR lowers L2′ more": ["yes" if at[v]["margin"] >= 0 else "no" for v in PROP35_READINGS],
        },
        index=pd.Index([label for label, _ in PROP35_READINGS.values()], name="layer 2's SGR step"),
    )
    display(table.style.format({"L2′ − L̂2′": "{:+.2e}", "first-order term": "{:+.2e}"}))
    flip = f"at η‖x0‖² = {f['flip']:.3g}" if f["flip"] else "at no positive η‖x0‖²"
    print(
        fit(
            f"Draw {draw}: the label's logit is {'larger' if f['assumption'] else 'not larger'} in layer 2 (the "
            f"assumption), δx2ᵀx2 {'≤' if f['delta_condition'] else '>'} δx1ᵀx1, ‖r‖/‖δx1‖ = "
            f"{f['relative_sgr']:.2f}, ‖x0‖² = {f['x0_sq']:.2f}. L2 = {at['L2']:.4f} before the step and "
            f"{at['L2_plain']:.4f} after the plain one. Solid: L2′ − L̂2′ after one step; dashed: the closed-form "
            f"first-order term. rᵀx1′ changes sign {flip} (dotted), and with it the first-order term of the "
            "readings that hold δx2 constant."
        )
    )


def prop35_widgets(defaults: dict) -> dict:
    """The sliders of `show_prop35`, at `defaults` (`prop35_defaults`), over our ranges."""
    import ipywidgets as widgets

    return {
        "step_size": _log_slider(defaults["step_size"], STEP_RANGE),
        "lam": _log_slider(defaults["lam"], LAMBDA_RANGE),
        "draw": widgets.IntSlider(value=defaults["draw"], min=0, max=SEARCHED_DRAWS - 1, continuous_update=False),
    }
