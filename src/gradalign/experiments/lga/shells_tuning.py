"""LGA part, §3.1: the tuning of the synthetic study's step sizes on a validation split drawn like the training
data, as the paper tuned its methods (notebook lga/03). No Hessian is measured in these runs, so they are cheap;
each is stored once in the run cache (kind `lga.shells-tuning`) and committed like every run.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from gradalign.experiments.lga.shells_config import data_spec, ShellsStudyConfig, _data
from gradalign.experiments.rules import summary
from gradalign.store.run_unit import Unit
from gradalign.training.shells import ShellsTrialSettings

TUNING_VERSION = 1

TUNING_START = ShellsTrialSettings(steps=6000, eval_every=250, alignment=False)
"""Where the one-at-a-time search starts: Figure 1's lr and ε_norm, α_w = 1e-2, T(i) = 1, unlabeled batch 128."""
TUNING = {
    "supervised": {"lr": [1e-4, 3e-4, 1e-3, 3e-3]},
    "lga": {
        "alpha_w": [1e-3, 1e-2, 3e-2, 1e-1],
        "eps_norm": [1e-6, 1e-3],
        "labeled_weight": [0.3, 1.0, 3.0, 10.0],
        "unlabeled_batch": [128, 640],
        "lr": [3e-4, 1e-3],
    },
}
"""The candidates, one setting varied at a time from `TUNING_START` (our choice: a full grid does not fit the CPU)."""
TUNED_EXTRA: dict[str, dict] = {
    "lga": {
        "together: lr 3e-4, eps_norm 1e-6, T 3, unlabeled batch 640": {
            "lr": 3e-4,
            "eps_norm": 1e-6,
            "labeled_weight": 3.0,
            "unlabeled_batch": 640,
        },
        "together: lr 3e-4, eps_norm 1e-6, T 10, unlabeled batch 640": {
            "lr": 3e-4,
            "eps_norm": 1e-6,
            "labeled_weight": 10.0,
            "unlabeled_batch": 640,
        },
    }
}
"""Candidates beyond one-at-a-time (the chosen values together), by name."""


def tuning_candidates(cfg: ShellsStudyConfig) -> dict[str, tuple[str, ShellsTrialSettings]]:
    """name -> (method, settings) of every tuning run: the start, each value of each axis, and the extras."""
    start = replace(TUNING_START, steps=cfg.tuning_steps, eval_every=cfg.trial.eval_every, batch=cfg.trial.batch)
    out = {}
    for method, axes in TUNING.items():
        for axis, values in axes.items():
            for v in values:
                out[f"{method}/{axis}={v:g}"] = (method, replace(start, **{axis: v}))
        for name, changes in TUNED_EXTRA.get(method, {}).items():
            out[f"{method}/{name}"] = (method, replace(start, **changes))
    return out


def tuning_unit(cfg: ShellsStudyConfig, method: str, settings: ShellsTrialSettings, j: int) -> Unit:
    """One tuning run: `method` with `settings` on tuning data set j (seed + 1000 + j), no Hessian."""
    seed = cfg.seed + 1000 + j
    spec = {
        **data_spec(cfg, seed),
        "method": method,
        "trial": settings.to_dict(),
    }
    train = functools.partial(_tune, cfg, method, settings, seed)
    return Unit(f"tuning {method} (seed {seed})", "lga.shells-tuning", spec, TUNING_VERSION, train)


def _tune(cfg: ShellsStudyConfig, method: str, settings: ShellsTrialSettings, seed: int, _checkpoint) -> dict:
    from gradalign.training.shells import shells_trial

    return shells_trial(_data(cfg, seed), method, settings, seed)


def shells_tuning(cfg: ShellsStudyConfig) -> tuple[dict, dict]:
    """(table: per candidate, its method, axis, value and mean ± SE over tuning data sets of the best validation
    accuracy and loss and the step of the best accuracy; curves: the mean validation accuracy per candidate)."""
    from gradalign.progress import progress

    table, curves = {}, {}
    for name, (method, settings) in progress(list(tuning_candidates(cfg).items()), desc="shells tuning"):
        runs = [tuning_unit(cfg, method, settings, j).run() for j in range(cfg.tuning_trials)]
        best_acc = [max(r["val_accuracy"]) for r in runs]
        best_loss = [min(r["val_loss"]) for r in runs]
        at = [r["step"][r["val_accuracy"].index(max(r["val_accuracy"]))] for r in runs]
        row = {"method": method, "setting": name.split("/", 1)[1]}
        for key, values in (("best_val_accuracy", best_acc), ("best_val_loss", best_loss), ("best_step", at)):
            st = summary(values)
            row[key] = {"mean": st["mean"], "se": st["std"] / st["n"] ** 0.5}
        row["final_val_accuracy"] = sum(r["val_accuracy"][-1] for r in runs) / len(runs)
        if method == "lga":
            row["imputed_accuracy"] = sum(r["imputed_accuracy"][-1] for r in runs) / len(runs)
            row["eps_dominates"] = sum(r["final_eps_dominates"][0] for r in runs) / len(runs)
        table[name] = row
        curves[f"tuning/{name}/val_accuracy"] = [sum(v) / len(v) for v in zip(*(r["val_accuracy"] for r in runs))]
        curves["tuning/step"] = runs[0]["step"]
    return table, curves
