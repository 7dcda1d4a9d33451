"""IsoLoss part, notebook isoloss/02: Figures 2 and 3's simulations over several initialisations.

One simulation (`toy.toy_dynamics`) starts from W₀ = randn/4 drawn with one seed (the authors' toy code uses 2).
A claim about the dynamics (L_noSG collapses, L_ws diverges above 1, L_iso settles every mode at λ*) is a claim
about every initialisation, not about seed 2's: the experiment runs `seeds` initialisations (seed, seed + 1, …)
and a check passes only when it passes in every one. The page shows the first seed's curves and values; each
check keeps every seed's pass and value (`per_seed`).

Figure 2 stays analytic (`experiments.validity`): its checks compare the linear network's simulation with the
closed form of Eqs. 5-8, which holds for every initialisation, so a failing seed fails it. Figure 3 (ReLU, no closed
form) is empirical, with at least 3 seeds.
"""

from __future__ import annotations

from dataclasses import replace

from gradalign.experiments.base import Experiment, outcome, same_as_cpu
from gradalign.experiments.isoloss.toy import FIG3_CPU, NB_TOY, TOY_CHOICES, TOY_SMOKE, ToyConfig, toy_dynamics


def toy_over_seeds(cfg: ToyConfig, device) -> dict:
    """`toy_dynamics` at seeds cfg.seed … cfg.seed + cfg.seeds − 1; each check passes when it passes in every seed.
    Metrics and curves are the first seed's; `metrics["seeds"]` lists the seeds."""
    runs = [toy_dynamics(replace(cfg, seed=cfg.seed + k), device) for k in range(cfg.seeds)]
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    first = runs[0]
    checks = {}
    for name, c in first["checks"].items():
        per_seed = {
            f"seed {s}": {"passed": r["checks"][name]["passed"], "value": r["checks"][name]["value"]}
            for s, r in zip(seeds, runs)
        }
        checks[name] = {
            **c,
            "passed": all(p["passed"] for p in per_seed.values()),
            "rule": f"{c['rule']}; in every one of {cfg.seeds} initialisations (value shown: seed {cfg.seed})",
            "per_seed": per_seed,
        }
    return outcome(checks, {**first["metrics"], "seeds": seeds}, first["curves"])


SMOKE = {**TOY_SMOKE, "seeds": 2}
EXPERIMENTS = [
    Experiment("isoloss.fig2", toy_over_seeds, ToyConfig, same_as_cpu({}, SMOKE), 2, NB_TOY, choices=TOY_CHOICES),
    Experiment(
        "isoloss.fig3",
        toy_over_seeds,
        ToyConfig,
        same_as_cpu(FIG3_CPU, {**SMOKE, "activation": "relu"}),
        2,
        NB_TOY,
        choices=TOY_CHOICES,
    ),
]
