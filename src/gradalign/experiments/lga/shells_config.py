"""LGA part, §3.2: the synthetic study's config (`ShellsStudyConfig`, its trials' settings `STUDY_TRIAL`) and its
data sets, shared by the study (`shells`) and its tuning (`shells_tuning`)."""

from __future__ import annotations

from dataclasses import dataclass

from gradalign.config import Config, require
from gradalign.store.run_unit import without_defaults
from gradalign.training.shells import ShellsTrialSettings

STUDY_VERSION = 3  # the trials' run version: 2: test metrics from training.evaluate (float64 loss sums); 3: validation
# split, diagnostics

STUDY_TRIAL = ShellsTrialSettings(steps=6000, eval_every=250, labeled_weight=3.0)
"""Each study trial's settings, our choice from the tuning on the validation split (`TUNING`, shown on the page):
LGA's best candidate by mean best validation accuracy, T(i) = 3 (lr 1e-3, α_w 1e-2, ε_norm 1e-3, unlabeled batch 128;
the candidates combining each axis's best did not beat it). One lr serves both arms: the supervised baseline's best,
3e-4, was within 0.0011 of 1e-3, far inside the tuning's SE (about 0.009). 6,000 steps: every tuning run's
validation error was flat over its last 20 % by then (`rules.run_finished`)."""


@dataclass(frozen=True)
class ShellsStudyConfig(Config):
    d: int = 50
    n: int = 5000  # labeled points
    unlabeled_factor: int = 5  # n_u = 5n = 25,000
    n_test: int = 5000  # our choice: the paper does not state the test set size
    n_val: int = 5000  # our choice: a validation split drawn like the training data, for tuning and early stopping
    trials: int = 25  # as in the paper
    trial: ShellsTrialSettings = STUDY_TRIAL  # optimisation and measurement of each trial (tuned: `TUNING`)
    tuning_trials: int = 2  # data sets (seeds seed + 1000 + j, apart from the study's) per tuning candidate
    tuning_steps: int = 6000  # each tuning run's steps (our choice), evaluated every `trial.eval_every`
    # the supervised arms of all trials trained together (training.shells_batched), or each on its own: equal to
    # float rounding, not to the bit, so each is stored under its own key
    batched: bool = True
    # further readings of ε_norm (Eq. 2): LGA alone on each trial's data set at each value, beside the trials' own
    # ε_norm and against the same supervised arms (`shells.eps_arm_unit`); the presets set `shells.EPS_ARMS`
    eps_arms: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        """`batched` only when false, `eps_arms` only when set: records stored before the fields existed keep their
        keys."""
        return without_defaults(self, super().to_dict(), ("batched", "eps_arms"))

    def validate(self) -> None:
        super().validate()
        for name in ("d", "n", "n_test", "n_val", "trials", "unlabeled_factor", "tuning_trials", "tuning_steps"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "trial", self.trial.hessian_points <= self.n_test, "hessian_points must be <= n_test")
        require(self, "tuning_steps", self.tuning_steps >= self.trial.eval_every, "must be >= trial.eval_every")
        require(
            self,
            "eps_arms",
            all(e > 0 for e in self.eps_arms)
            and len(set(self.eps_arms)) == len(self.eps_arms)
            and self.trial.eps_norm not in self.eps_arms,
            "must be distinct values > 0, each other than trial.eps_norm",
        )


def _data(cfg: ShellsStudyConfig, seed: int):
    from gradalign.data.shells import make_shells

    return make_shells(cfg.d, cfg.n, cfg.unlabeled_factor * cfg.n, cfg.n_test, seed=seed, n_val=cfg.n_val)


def data_spec(cfg: ShellsStudyConfig, seed: int) -> dict:
    """The data set of `seed` as a run's key names it (trials and tuning runs alike)."""
    return {
        "d": cfg.d,
        "n": cfg.n,
        "n_unlabeled": cfg.unlabeled_factor * cfg.n,
        "n_test": cfg.n_test,
        "n_val": cfg.n_val,
        "seed": seed,
    }
