"""LGA part, §3.2: LGA against supervised Adam on the shells data set (Figures 3-4; Figure 2: `shells_figure`).

Figures 3 and 4 come from the same trials; each trial is stored once in the run cache (`runcache`,
keyed by the trial's settings), so whichever of the two runs first trains and the other reads it back,
and an interrupted study resumes at the next trial. Each trial is a unit (`trial_unit`): `gradalign sweep`
can compute the trials as separate jobs. Run in one process, the study trains the supervised arms of all its
trials at once (`training.shells_batched`, batched trials) the first time a trial is missing; each trial's LGA
arm, with its per-trial label state, trains on its own. `batched=false` trains each supervised arm on its own
instead, stored under a key of its own. The data is float32 and small: it runs on the CPU whatever
device is asked for (a GPU would mostly add latency to a 40k-parameter MLP).

Each data set has a validation split drawn like the training data. The trials' settings (`STUDY_TRIAL`) are our
choice from a tuning on it (`TUNING`, `shells_tuning`: one setting at a time, best validation accuracy, two data sets
of their own, no Hessian), stored as units of kind `lga.shells-tuning` and shown in `lga.fig4`'s record. Figure 4
is checked at the end of training and early-stopped by validation; `lga.validity.shells` measures the preconditions
(finished learning, the baseline fits its labels, the imputed labels moved) from each trial's stored quantities.
"""

from __future__ import annotations

import functools

import torch

from gradalign.experiments.rules import compare, summary
from gradalign.experiments.base import never_used, check, Experiment, outcome, plural, scale_text
from gradalign.store.run_unit import Unit
from gradalign.experiments.lga.shells_tuning import shells_tuning
from gradalign.experiments.lga.shells_config import data_spec, STUDY_TRIAL, ShellsStudyConfig, _data  # noqa: F401 (re-exported)
from gradalign.experiments.lga.shells_config import STUDY_VERSION
from gradalign.experiments.lga.shells_eps import EPS_ARMS, arm_name, eps_arm_unit  # noqa: F401 (re-exported)

NOTEBOOK = "notebooks/lga/03_synthetic_shells.ipynb"


def trial_unit(cfg: ShellsStudyConfig, k: int, supervised=None) -> Unit:
    """Trial k (its data set drawn with seed + k, both algorithms trained on it) as a run-cache unit: what
    `_trial` reads back, and what `gradalign sweep` computes as a job of its own. The config's `batched` says
    how the supervised arm is trained, and the key says which (one arm, one key, whichever path runs first);
    `supervised`, when given, is the study's `BatchedSupervisedArms`, shared by its trials."""
    seed = cfg.seed + k
    spec = {
        **data_spec(cfg, seed),
        "trial": cfg.trial.to_dict(),
        **({} if cfg.batched else {"supervised_arm": "one_at_a_time"}),  # batched arms keep their earlier keys
    }
    train = functools.partial(_train, cfg, seed, supervised)
    return Unit(f"trial {k} (seed {seed})", "lga.shells", spec, STUDY_VERSION, train)


def study_units(cfg: ShellsStudyConfig) -> list[Unit]:
    """Every unit the study reads: the trials, then LGA at each further ε_norm on each trial's data set."""
    trials = [trial_unit(cfg, k) for k in range(cfg.trials)]
    return trials + [eps_arm_unit(cfg, k, e) for e in cfg.eps_arms for k in range(cfg.trials)]


def _train(cfg: ShellsStudyConfig, seed: int, supervised, _checkpoint) -> dict:
    """Both algorithms on the data set of `seed` (a module-level function: a sweep's job receives it pickled)."""
    from gradalign.training.shells import shells_trial

    data = _data(cfg, seed)
    if cfg.batched:  # a job of a sweep trains the study's batched arms (all trials) and keeps its own
        arm = (supervised or BatchedSupervisedArms(cfg))(seed)
    else:
        arm = shells_trial(data, "supervised", cfg.trial, seed)
    return {"supervised": arm, "lga": shells_trial(data, "lga", cfg.trial, seed)}


class BatchedSupervisedArms:
    """The supervised arms of every trial of a study, trained together (`supervised_trials`) when the first is
    asked for, then handed out by seed. Equal to the one-at-a-time arms to float rounding."""

    def __init__(self, cfg: ShellsStudyConfig):
        self.cfg, self.by_seed = cfg, None

    def __call__(self, seed: int) -> dict:
        from gradalign.training.shells_batched import supervised_trials

        if self.by_seed is None:
            seeds = [self.cfg.seed + k for k in range(self.cfg.trials)]
            arms = supervised_trials([_data(self.cfg, s) for s in seeds], self.cfg.trial, seeds)
            self.by_seed = dict(zip(seeds, arms))
        return self.by_seed[seed]


def _trial(cfg: ShellsStudyConfig, k: int, supervised=None) -> dict:
    """Both algorithms on trial k's data set (seed + k); read back from the run cache when stored."""
    return trial_unit(cfg, k, supervised).run()


def _mean_std(rows: list[list[float]]) -> tuple[list[float], list[float]]:
    t = torch.tensor(rows, dtype=torch.float64)
    return t.mean(0).tolist(), (t.std(0) if len(rows) > 1 else torch.zeros(t.shape[1], dtype=torch.float64)).tolist()


def _at_best(select: list[float], values: list[float], higher: bool) -> float:
    """`values` at the evaluation where `select` is best (the first such): early stopping by validation."""
    i = select.index(max(select) if higher else min(select))
    return values[i]


def trial_finals(trial: dict, method: str) -> dict:
    """One trial's per-arm quantities: the final, best-over-training and early-stopped (by validation accuracy,
    resp. loss) test accuracy and loss, the mean alignment after step 0, the validation error curve (%), the
    eval-mode error on the labeled training set, and for LGA how far its imputed labels moved."""
    c = trial[method]
    out = {
        "final_test_accuracy": c["final_test_accuracy"][0],
        "final_test_loss": c["final_test_loss"][0],
        "best_test_accuracy": max(c["test_accuracy"]),
        "best_test_loss": min(c["test_loss"]),
        "stopped_test_accuracy": _at_best(c["val_accuracy"], c["test_accuracy"], True),
        "stopped_test_loss": _at_best(c["val_loss"], c["test_loss"], False),
        "mean_alignment": sum(c["alignment"][1:]) / len(c["alignment"][1:]),  # step 0: the same network for both
        "val_error": [round(100 * (1 - a), 3) for a in c["val_accuracy"]],
        "labeled_error": c["final_labeled_error"][0],
    }
    if method.startswith("lga"):
        out.update(
            imputed_moved=c["imputed_moved"][-1],
            imputed_accuracy=c["imputed_accuracy"][-1],
            imputed_confidence=c["imputed_confidence"][-1],
            eps_dominates=c["final_eps_dominates"][0],
        )
    return out


def shells_study(cfg: ShellsStudyConfig) -> tuple[dict, dict]:
    """(curves: per method, mean and std over trials of every curve; per method, each trial's quantities as lists
    (`trial_finals`))."""
    from gradalign.progress import progress

    supervised = BatchedSupervisedArms(cfg) if cfg.batched else None
    trials = [_trial(cfg, k, supervised) for k in progress(range(cfg.trials), desc="shells trials")]
    trials = [dict(t) for t in trials]  # the arms join each trial's copy, never the stored value
    for e in cfg.eps_arms:
        for k in progress(range(cfg.trials), desc=f"shells LGA at eps_norm {e:g}"):
            trials[k][arm_name(e)] = eps_arm_unit(cfg, k, e).run()
    curves = {"step": trials[0]["supervised"]["step"]}
    finals = {}
    for method in ("supervised", "lga", *map(arm_name, cfg.eps_arms)):
        for name in trials[0][method]:
            if name == "step" or name.startswith("final_") or not all(name in t[method] for t in trials):
                continue
            mean, std = _mean_std([t[method][name] for t in trials])
            curves[f"{method}/{name}/mean"], curves[f"{method}/{name}/std"] = mean, std
        rows = [trial_finals(t, method) for t in trials]
        finals[method] = {name: [r[name] for r in rows] for name in rows[0]}
    return curves, finals


def mean_se(values: list[float]) -> dict:
    """{"mean", "se"} over trials (SE = std / sqrt(n))."""
    st = summary(values)
    return {"mean": st["mean"], "se": st["std"] / st["n"] ** 0.5}


def _paired_wins(a: list[float], b: list[float]) -> int:
    return sum(x > y for x, y in zip(a, b))


def _trials_compare(per_trial: dict, name: str, higher: bool, quantity: str, claim: str) -> dict:
    """LGA against supervised on a per-trial quantity (`per_trial[method][name]`), over trials, 2 SE."""
    a, b = (summary(per_trial[m][name]) for m in ("lga", "supervised"))
    names = ("LGA", "supervised")
    return compare(a, b, relation="beats", higher_is_better=higher, quantity=quantity, names=names, claim=claim)


def figure3_checks(per_trial: dict, above: int, evaluations: int) -> dict[str, dict]:
    """Figure 3's checks: each trial's mean alignment over training per method ("lga", "supervised"), and at how
    many of the evaluations after step 0 LGA's mean over trials lies above supervised's."""
    return {
        "lga_alignment_larger": _trials_compare(
            per_trial,
            "mean_alignment",
            True,
            "mean alignment over training (after step 0)",
            "the alignment is larger when using LGA compared to the supervised baseline",
        ),
        "lga_larger_most_of_training": check(
            above >= 0.75 * evaluations,
            f"{above} of {evaluations}",
            "LGA's mean above supervised's at >= 75% of the evaluations",
            "Figure 3: LGA's curve lies above the baseline's over training",
        ),
    }


def figure3(cfg: ShellsStudyConfig, device) -> dict:
    """Figure 3: the alignment (Eq. 13) of each algorithm's updates over training."""
    curves, finals = shells_study(cfg)
    lga, sup = curves["lga/alignment/mean"], curves["supervised/alignment/mean"]
    later = slice(1, None)  # step 0 is the same network for both
    mean_lga = sum(lga[later]) / len(lga[later])
    mean_sup = sum(sup[later]) / len(sup[later])
    above = sum(a > b for a, b in zip(lga[later], sup[later]))
    metrics = {
        "mean_alignment": {"lga": mean_lga, "supervised": mean_sup},
        "steps_lga_above": above,
        "evaluations": len(lga) - 1,
        "trials": cfg.trials,
        "per_trial": {m: finals[m] for m in ("supervised", "lga")},
    }
    if cfg.eps_arms:
        metrics["eps_arms"] = {arm_name(e): figure3_arm(curves, finals, e) for e in cfg.eps_arms}
    checks = figure3_checks(metrics["per_trial"], above, len(lga) - 1)
    return outcome(checks, metrics, curves, scope="exact" if cfg.trials >= 25 else "reduced")


def figure3_arm(curves: dict, finals: dict, eps_norm: float) -> dict:
    """LGA at a further ε_norm against the same trials' supervised arms (shown, not a check of the verdict): its
    mean alignment over training (after step 0), at how many evaluations its mean lies above supervised's, and
    the comparison of the per-trial mean alignments (Welch's t, as Figure 3's check)."""
    name = arm_name(eps_norm)
    arm, sup = curves[f"{name}/alignment/mean"][1:], curves["supervised/alignment/mean"][1:]
    per = {"lga": finals[name], "supervised": finals["supervised"]}
    return {
        "eps_norm": eps_norm,
        "mean_alignment": sum(arm) / len(arm),
        "steps_above_supervised": sum(a > b for a, b in zip(arm, sup)),
        "against_supervised": _trials_compare(
            per, "mean_alignment", True, "mean alignment over training (after step 0)", f"LGA at eps_norm {eps_norm:g}"
        ),
    }


FIGURE4_COMPARISONS = {
    "lga_lower_test_loss": ("final_test_loss", False, "final test loss", "LGA improves the test loss"),
    "lga_higher_test_accuracy": ("final_test_accuracy", True, "final test accuracy", "LGA improves the test accuracy"),
    "lga_higher_best_accuracy": (
        "best_test_accuracy",
        True,
        "best test accuracy over training",
        "LGA improves the best test accuracy over training",
    ),
    "lga_lower_stopped_loss": (
        "stopped_test_loss",
        False,
        "test loss early-stopped by validation loss",
        "LGA improves the test loss, both early-stopped by validation (§3.1)",
    ),
    "lga_higher_stopped_accuracy": (
        "stopped_test_accuracy",
        True,
        "test accuracy early-stopped by validation accuracy",
        "LGA improves the test accuracy, both early-stopped by validation (§3.1)",
    ),
}
"""check name -> (per-trial quantity, higher is better, quantity as the rule names it, the claim: Figure 4 against
the supervised baseline)."""


def figure4_checks(per_trial: dict) -> dict[str, dict]:
    """Figure 4's checks over trials (`per_trial[method][quantity]`, one value per trial), each beyond 2 SE: test
    loss and accuracy at the end of training and early-stopped by validation (the paper does not say which
    Figure 4's claim means; §3.1 pairs LGA with early stopping)."""
    return {
        name: _trials_compare(per_trial, key, higher, quantity, f"Figure 4: {claim}")
        for name, (key, higher, quantity, claim) in FIGURE4_COMPARISONS.items()
    }


def figure4_arm(finals: dict, eps_norm: float) -> dict:
    """LGA at a further ε_norm on the trials' data sets (shown beside the trials, not a check of the verdict): mean ±
    SE over trials of Figure 4's quantities and LGA's diagnostics (the ε-dominated share among them), and each of
    Figure 4's comparisons against the same supervised arms (Welch's t, the rule of the checks), and against LGA at
    the trials' own ε_norm (`against_trials_eps`, "beats" in the same direction)."""
    name = arm_name(eps_norm)
    arm = finals[name]
    out = {"eps_norm": eps_norm, **{q: mean_se(arm[q]) for q in QUANTITIES}}
    out["lga_diagnostics"] = {q: mean_se(arm[q]) for q in LGA_DIAGNOSTICS}
    out["per_trial"] = arm
    for other, key, names in (
        ("supervised", "against_supervised", (f"LGA (eps_norm {eps_norm:g})", "supervised")),
        ("lga", "against_trials_eps", (f"LGA (eps_norm {eps_norm:g})", "LGA (the trials' eps_norm)")),
    ):
        out[key] = {
            check: compare(
                summary(arm[q]),
                summary(finals[other][q]),
                relation="beats",
                higher_is_better=higher,
                quantity=quantity,
                names=names,
                claim=claim,
            )
            for check, (q, higher, quantity, claim) in FIGURE4_COMPARISONS.items()
        }
    return out


LGA_DIAGNOSTICS = ("imputed_moved", "imputed_accuracy", "imputed_confidence", "eps_dominates")

QUANTITIES = (
    "final_test_accuracy",
    "final_test_loss",
    "best_test_accuracy",
    "best_test_loss",
    "stopped_test_accuracy",
    "stopped_test_loss",
    "labeled_error",
)


def figure4(cfg: ShellsStudyConfig, device) -> dict:
    """Figure 4: test accuracy and loss, LGA against supervised Adam: at the end of training, at their best over
    training, and early-stopped by validation; mean ± SE over trials. With the tuning that chose the settings."""
    curves, finals = shells_study(cfg)
    lga, sup = finals["lga"], finals["supervised"]
    metrics = {q: {m: mean_se(finals[m][q]) for m in ("lga", "supervised")} for q in QUANTITIES}
    metrics["lga_diagnostics"] = {q: mean_se(lga[q]) for q in LGA_DIAGNOSTICS}
    metrics["trials_lga_better_loss"] = _paired_wins(sup["final_test_loss"], lga["final_test_loss"])
    metrics["trials_lga_better_accuracy"] = _paired_wins(lga["final_test_accuracy"], sup["final_test_accuracy"])
    metrics["trials"] = cfg.trials
    metrics["per_trial"] = {m: finals[m] for m in ("supervised", "lga")}
    if cfg.eps_arms:
        metrics["eps_arms"] = {arm_name(e): figure4_arm(finals, e) for e in cfg.eps_arms}
    table, tuning_curves = shells_tuning(cfg)
    metrics["tuning"] = table
    curves.update(tuning_curves)
    checks = figure4_checks(finals)
    return outcome(checks, metrics, curves, scope="exact" if cfg.trials >= 25 else "reduced")


STUDY_SMOKE = {
    "d": 10,
    "n": 200,
    "n_test": 300,
    "n_val": 300,
    "trials": 2,
    "tuning_trials": 1,
    "tuning_steps": 60,
    "trial": {"steps": 60, "eval_every": 20, "hessian_points": 300, "lanczos_iters": 8, "batch": 32},
}
STUDY_PRESETS = {
    "smoke": STUDY_SMOKE,
    "cpu": {"eps_arms": EPS_ARMS},
    "gpu": {"eps_arms": EPS_ARMS},
    "paper": {"eps_arms": EPS_ARMS},
}
"""The further ε_norm arm at every preset but smoke (smoke: the trials alone; the tests run the arm at smoke by
`--set eps_arms=[1e-6]`)."""


def study_scale(record: dict) -> str:
    """The shells study's trials against the paper's 25."""
    return scale_text((plural(record["config"]["trials"], "trial"), "25 trials"))


SHARED_TRIALS = "the trials stored once for lga.fig3 and fig4 (run cache: lga.shells)"
STUDY_CHOICES = {
    "network": "4 linear layers (3 hidden ReLU layers of 128 units); the paper's '4-layer' is read as 4 weight layers",
    "tuning": "one setting at a time from lr 1e-3, alpha_w 1e-2, eps_norm 1e-3, T(i) = 1, unlabeled batch 128, "
    "2 validation data sets (5,000 points drawn like the training data), 6,000 steps, best validation accuracy",
    "optimisation": "chosen by the tuning (values in the config's trial settings); T(i) constant over training",
    "stopping": "final, best over training, and early-stopped by validation (accuracy, resp. loss) all reported",
    "test set": "5,000 test points; the Hessian for q1 uses the first 2,000 (Lanczos, 20 steps)",
    "alignment": "Eq. 13 between q1 at theta_t and the update theta_{t+1} - theta_t, at every evaluation",
    "trials": "25 as in the paper, at every preset but smoke",
    "eps_norm arms": "LGA also at each of eps_arms (1e-6) on every trial's data set, beside the trials' eps_norm, "
    "against the same supervised arms: where eps_norm lies below sqrt(EMA(v^4)) for most parameters, so Eq. 2's "
    "normalisation acts; shown, not part of the verdict",
}

EXPERIMENTS = [
    Experiment(
        "lga.fig3",
        figure3,
        ShellsStudyConfig,
        STUDY_PRESETS,
        STUDY_VERSION,
        NOTEBOOK,
        choices=STUDY_CHOICES,
        shares=SHARED_TRIALS,
        scale=study_scale,
        unused=never_used("Figure 3 reads no tuning runs (Figure 4 shows the tuning)", "tuning_trials", "tuning_steps"),
    ),
    Experiment(
        "lga.fig4",
        figure4,
        ShellsStudyConfig,
        STUDY_PRESETS,
        STUDY_VERSION,
        NOTEBOOK,
        choices=STUDY_CHOICES,
        shares=SHARED_TRIALS,
        scale=study_scale,
    ),
]
