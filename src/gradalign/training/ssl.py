"""Semi-supervised training for every method of LGA's benchmark (Jackson & Schulman 2019, §4), on the one loop.

A method is an entry of `METHODS`: its title, its settings class, its step function (in `methods/`) and,
where it keeps state beyond the model (Mean Teacher's EMA teacher, LGA's imputed labels), an `init`.
The protocol (`training.protocols`) gives the optimizer, the learning-rate schedule and the ramp.
Every step draws B_ℓ labeled and B_u unlabeled images; augmentation is resampled at every pass from one
seeded generator; model selection on the validation split (test metrics of the best validation error).
Data and augmentation stay on the training device; `fast` (`training.fast`) adds bf16 autocast, channels-last
and `torch.compile` to the step, all off by default (the fp32 eager reference).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from gradalign.data.ssl_data import SSLData
from gradalign.methods.divergence import error_chance
from gradalign.errors import ConfigError
from gradalign.training.timebox import TimeBoxSpent, raise_if_spent, seconds_left
from gradalign.methods.lga_ssl import LGABenchmarkSettings, lga_init, lga_ssl_step, lga_vat_step
from gradalign.methods.mean_teacher import MeanTeacherSettings, mean_teacher_init, mean_teacher_step
from gradalign.methods.pi_model import PiModelSettings, pi_model_step
from gradalign.methods.pseudo_label import PseudoLabelSettings, pseudo_label_step
from gradalign.methods.supervised import SupervisedSettings, supervised_step
from gradalign.methods.vat import VATSettings, vat_step
from gradalign.params import set_lr, trainable
from gradalign.training import loop
from gradalign.training.checkpoint import data_digest, fingerprint
from gradalign.methods.lga import imputed_diagnostics
from gradalign.training.evaluate import classification_metrics
from gradalign.training.fast import REFERENCE, FastPath, autocast, prepare_model
from gradalign.training.protocols import OliverProtocol
from gradalign.training.streams import IndexStream


@dataclass(frozen=True)
class SSLMethod:
    title: str
    settings: type
    step: Callable  # (run, ramp, x_l, y_l, x_u, idx_u) -> diagnostics
    init: Callable | None = None  # (model, settings, n_unlabeled, classes) -> (state, optimizer or None)
    compiles: bool = True  # False: the step differentiates with torch.func transforms (no torch.compile)


METHODS: dict[str, SSLMethod] = {
    "supervised": SSLMethod("Supervised", SupervisedSettings, supervised_step),
    "pseudo_label": SSLMethod("Pseudo-Label", PseudoLabelSettings, pseudo_label_step),
    "pi_model": SSLMethod("Π-Model", PiModelSettings, pi_model_step),
    "mean_teacher": SSLMethod("Mean Teacher", MeanTeacherSettings, mean_teacher_step, mean_teacher_init),
    "vat": SSLMethod("VAT", VATSettings, vat_step),
    "vat_entmin": SSLMethod("VAT + EntMin", VATSettings, vat_step),
    "lga": SSLMethod("LGA", LGABenchmarkSettings, lga_ssl_step, lga_init, compiles=False),
    "lga_vat": SSLMethod("LGA + VAT", LGABenchmarkSettings, lga_vat_step, lga_init, compiles=False),
}
TITLES = {name: m.title for name, m in METHODS.items()}


def method(name: str) -> SSLMethod:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}")
    return METHODS[name]


class SSLRun:
    """One method's training state on one data set: what a step reads and what a checkpoint holds."""

    resumes_between_evaluations = True  # the state holds all a step reads: the loop may stop it at any step

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        settings,
        protocol: OliverProtocol,
        data: SSLData,
        seed: int,
        augment: Callable | None = None,
        fast: FastPath = REFERENCE,
    ):
        self.name, self.method, self.model, self.settings, self.protocol, self.data = (
            name,
            method(name),
            model,
            settings,
            protocol,
            data,
        )
        if not isinstance(settings, self.method.settings):
            raise ConfigError(f"{name} takes {self.method.settings.__name__}; got {type(settings).__name__}")
        if fast.compile and not self.method.compiles:
            raise ConfigError(
                f"{name}'s step uses torch.func transforms, which torch.compile does not take: "
                "set fast.compile to false"
            )
        self.fast = fast
        prepare_model(model, replace(fast, compile=False))
        self.generator = torch.Generator(device=data.x_labeled.device).manual_seed(seed)  # augmentation
        self._augment = augment or data.augment
        self.extra, optimizer = (
            self.method.init(model, settings, len(data.x_unlabeled), data.num_classes)
            if self.method.init
            else (None, None)
        )
        self.optimizer = optimizer or protocol.optimizer(trainable(model).values(), settings.lr)
        if fast.compile:  # after `init`: a teacher deep-copied from a compiled model would call the student
            model.compile()
        self.labeled = IndexStream(len(data.x_labeled), protocol.batch_labeled, seed)
        self.unlabeled = IndexStream(len(data.x_unlabeled), protocol.batch_unlabeled, seed + 1)

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        return self._augment(x, self.generator)

    def step(self, t: int) -> dict[str, torch.Tensor]:
        """Update number t (1-based) on the next labeled and unlabeled batches."""
        d = self.data
        # non_blocking: a blocking host-to-device copy synchronises the stream (torch's memcpy_and_sync), which the
        # no-host-sync tests refuse; the index tensors are pageable, so the copy still reads them before returning
        device = d.x_labeled.device
        i_l, i_u = (
            self.labeled.next().to(device, non_blocking=True),
            self.unlabeled.next().to(device, non_blocking=True),
        )
        set_lr(self.optimizer, self.settings.lr * self.protocol.lr_factor(t))
        with autocast(self.fast, d.x_labeled.device):
            return self.method.step(
                self, self.protocol.ramp(t), d.x_labeled[i_l], d.y_labeled[i_l], d.x_unlabeled[i_u], i_u
            )

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict[str, float]:
        """Validation error and loss, the mean train loss; for LGA also the mean cosine of its unlabeled and labeled
        gradients since the last evaluation (`alignment`), the share of parameters whose ε_norm exceeds
        sqrt(EMA(v⁴)) at this step (`eps_dominated`, `methods.lga.eps_dominated_share`) and its imputed labels'
        accuracy on the unlabeled pool, confidence and distance from their start (`methods.lga.imputed_diagnostics`)."""
        val_error, val_loss = classification_metrics(self.model, self.data.x_val, self.data.y_val)
        out = {"val_error": val_error, "val_loss": val_loss, "train_loss": sums["loss"] / count}
        if "alignment" in sums:
            out["alignment"] = sums["alignment"] / count
        if "eps_dominated" in last:  # at this step (a step's value: an old checkpoint's sums lack it)
            out["eps_dominated"] = float(last["eps_dominated"])
        w = getattr(self.extra, "w", None)
        if w is not None and self.data.y_unlabeled is not None:
            out.update(imputed_diagnostics(w.detach(), self.data.y_unlabeled))
        return out

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "labeled": self.labeled.state_dict(),
            "unlabeled": self.unlabeled.state_dict(),
            "extra": self.extra.state_dict() if self.extra is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(
            state["generator"].cpu()
        )  # a checkpoint loads to the run's device; torch takes generator states as CPU byte tensors only
        self.labeled.load_state_dict(state["labeled"])
        self.unlabeled.load_state_dict(state["unlabeled"])
        if self.extra is not None:
            self.extra.load_state_dict(state["extra"])


def train_ssl(
    model: torch.nn.Module,
    name: str,
    settings,
    protocol: OliverProtocol,
    data: SSLData,
    seed: int,
    checkpoint: Path | str | None = None,
    fast: FastPath = REFERENCE,
) -> dict:
    """Train `model` in place with method `name`; the history and the test metrics at the best validation error.

    `checkpoint`: written atomically at every evaluation (or every `protocol.checkpoint_every` steps) and
    resumed from when present; resuming is bit-identical on CPU. Inside a command's time box (`timebox`) the
    run stops after the evaluation where the box would overrun, or at the first step past the box, checkpointed, and
    raises `TimeBoxSpent`.
    """
    if len(data.x_labeled) < protocol.batch_labeled or len(data.x_unlabeled) < protocol.batch_unlabeled:
        raise ConfigError(
            f"batches of {protocol.batch_labeled} labeled / {protocol.batch_unlabeled} unlabeled "
            f"need at least as many images; have {len(data.x_labeled)} / {len(data.x_unlabeled)}"
        )
    raise_if_spent(f"{TITLES[name]} (seed {seed}) could begin")
    torch.manual_seed(seed)
    model.train()
    run = SSLRun(name, model, settings, protocol, data, seed, fast=fast)
    spec = {
        "method": name,
        "settings": asdict(settings),
        "protocol": asdict(protocol),
        "seed": seed,
        "data": data_digest(data.x_labeled, data.y_labeled, data.x_unlabeled, data.x_val, data.x_test),
        **({"fast": fast.to_dict()} if fast.on else {}),  # the fp32 eager path keeps its earlier fingerprint
    }
    out = loop.train(
        run,
        protocol.steps,
        eval_at=loop.every(protocol.eval_every, protocol.steps),
        name=TITLES[name],
        checkpoint=Path(checkpoint) if checkpoint is not None else None,
        run_fingerprint=fingerprint(spec),
        checkpoint_every=protocol.checkpoint_every,
        select="val_error",
        model=model,
        map_location=data.x_labeled.device,
        time_limit_s=seconds_left(),
        chance=(error_chance("val_error", data.num_classes),),  # back at chance after it had learned: diverged
    )
    if not out.complete:
        raise TimeBoxSpent(
            f"time box: {TITLES[name]} (seed {seed}) stopped after step {out.steps_done} of {protocol.steps}"
            + (", checkpointed; run the same command again to resume" if checkpoint is not None else "")
        )
    final_error, final_loss = classification_metrics(model, data.x_test, data.y_test)
    final_state = copy.deepcopy(model.state_dict())
    model.load_state_dict(out.best["state"])
    test_error, test_loss = classification_metrics(model, data.x_test, data.y_test)
    labeled_error, _ = classification_metrics(model, data.x_labeled, data.y_labeled)  # does it fit its labels?
    model.load_state_dict(final_state)
    if checkpoint is not None:
        Path(checkpoint).unlink(missing_ok=True)
    return {
        "method": name,
        "settings": asdict(settings),
        "seed": seed,
        "history": out.history,
        "best_step": out.best["step"],
        "best_val_error": out.best["value"],
        "test_error": test_error,
        "test_loss": test_loss,
        "final_test_error": final_error,
        "final_test_loss": final_loss,
        "labeled_error": labeled_error,  # eval mode, the selected model, on its own labeled training set
        "train_seconds": out.train_seconds,
        "steps": protocol.steps,
    }
