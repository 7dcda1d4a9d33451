"""The meta-gradient part's pilots (`pilots.PILOTS`): the scale pilot of Table 4's baseline, and the fits pilot.

The fits pilot (issue 47; our grid, in order of cost, `FITS_GRID`): (width, steps, mixup γ, dropout) of Conv-Large at
1,000 labels, one seed of Table 4's four arms each. At today's `cpu` scale (×0.125, 4,000 steps, γ = 1) the mixup arms
end at 17-18 % error on their own labeled images, so a loss of the method there may be an arm that cannot fit its
labels. The answer (`fits_answer`) is the first candidate whose every run fits (`metagrad.validity.FIT_ERROR`).
"""

from __future__ import annotations

from typing import Callable

FITS_GRID: tuple[tuple[float, int, float, float], ...] = (
    (0.125, 4000, 0.1, 0.0),  # today's scale with SVHN's weaker mixup
    (0.125, 8000, 1.0, 0.0),  # today's scale, twice the steps
    (0.25, 8000, 0.1, 0.0),
    (0.25, 8000, 1.0, 0.0),
    (0.25, 16000, 1.0, 0.0),
    (0.5, 16000, 1.0, 0.5),  # the paper's dropout where the width allows it
)


def fits_name(width: float, steps: int, gamma: float, dropout: float) -> str:
    return f"metagrad.fits/w{width:g}-s{steps}-g{gamma:g}-d{dropout:g}"


def fits_overrides(width: float, steps: int, gamma: float, dropout: float) -> dict:
    """The candidate as overrides of Table 4's `cpu` preset, one seed."""
    return {"width": width, "protocol.steps": steps, "method.gamma": gamma, "dropout": dropout, "seeds": 1}


def fits_question(width: float, steps: int, gamma: float, dropout: float) -> str:
    return (
        f"does every arm of Table 4 fit its labeled images (<= 5 % error) at Conv-Large ×{width:g}, {steps:,} steps, "
        f"mixup γ = {gamma:g}, dropout {dropout:g}?"
    )


def variant_arm(spec: dict) -> str:
    from gradalign.methods.semimeta import VARIANTS

    return VARIANTS[spec["method"]["variant"]][0]


def labeled_only_arm(spec: dict) -> str:
    return f"labeled only, dropout {spec.get('dropout', 0.5):g}"  # 0.5: the paper's, not written in the key


def labeled_only_units(pilot) -> list:
    """Labeled-only training with and without Conv-Large's dropout, at the pilot's overrides of its `cpu` preset."""
    from gradalign.experiments import get
    from gradalign.training.semimeta import semimeta_unit

    out = []
    for dropout in (0.0, 0.5):
        cfg = get(pilot.element).resolve("cpu", {**pilot.overrides, "dropout": dropout})
        out.append(semimeta_unit(cfg.spec("labeled_only", "fashion_mnist", 1000, cfg.seed)))
    return out


def fits_answer(stored: Callable[[str], list[dict]]) -> dict:
    """The fits pilot's answer from the committed runs (`stored(name)`: `pilots.stored`): per candidate (in
    `FITS_GRID`'s order) each arm's labeled-set error, whether every arm fits, how many runs are committed; and the
    first candidate whose every run is committed and fits ("none yet" while none does)."""
    from gradalign.experiments.metagrad.validity import FIT_ERROR

    rows, chosen = [], None
    for candidate in FITS_GRID:
        name = fits_name(*candidate)
        runs = stored(name)
        errors = {r["arm"]: r.get("labeled_error") for r in runs}
        done = all(r["done"] for r in runs)
        fits = done and all(e is not None and e <= FIT_ERROR for e in errors.values())
        rows.append({"name": name, "candidate": candidate, "errors": errors, "done": sum(r["done"] for r in runs),
                     "runs": len(runs), "fits": fits})  # fmt: skip
        chosen = chosen or (name if fits else None)
    return {"rows": rows, "chosen": chosen or "none yet", "threshold": FIT_ERROR}
