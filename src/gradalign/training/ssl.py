"""One semi-supervised training loop for every method of LGA's benchmark (Jackson & Schulman 2019, §4).

The protocol is Oliver et al.'s (2018) (PROTOCOLS.md): batches of B_ℓ labeled + B_u unlabeled
images; labeled cross entropy summed and divided by B = B_ℓ + B_u, unlabeled terms summed and divided
by B; Adam; the consistency ramp-up exp(−5(1 − t/T_ramp)²); the learning rate × `lr_decay` after
`lr_decay_at` of the steps; augmentation resampled at every pass; only the first clean pass updates
BatchNorm running statistics; model selection on the validation split (the test metrics reported
are those of the step with the lowest validation error).

Methods (`METHODS`): Supervised, Pseudo-Label, Π-Model, Mean Teacher (EMA teacher through
`torch.optim.swa_utils.AveragedModel`), VAT, VAT+EntMin, LGA (Algorithm 1, `methods.lga`) and LGA+VAT
(Algorithm 1 with the VAT gradient added to θ's update).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from gradalign.atomic import save_torch
from gradalign.data.ssl_data import SSLData
from gradalign.training.streams import IndexStream
from gradalign.errors import ConfigError
from gradalign.methods import consistency
from gradalign.methods.lga import ConstantWeight, LGASettings, adam, init_lga, lga_step, raise_if_not_finite
from gradalign.methods.pseudo_label import pseudo_label_terms, rampup

METHODS = ("supervised", "pseudo_label", "pi_model", "mean_teacher", "vat", "vat_entmin", "lga", "lga_vat")
TITLES = {"supervised": "Supervised", "pseudo_label": "Pseudo-Label", "pi_model": "Π-Model",
          "mean_teacher": "Mean Teacher", "vat": "VAT", "vat_entmin": "VAT + EntMin", "lga": "LGA",
          "lga_vat": "LGA + VAT"}
FAMILIES = ("cifar", "svhn")
CHECKPOINT_FORMAT = 1


@dataclass(frozen=True)
class MethodSettings:
    """One method's hyperparameters; `oliver_settings` gives the tuned values of PROTOCOLS.md."""

    method: str
    lr: float
    weight: float = 0.0  # consistency weight at the end of the ramp-up
    threshold: float = 0.95  # Pseudo-Label confidence threshold
    ema: float = 0.95  # Mean Teacher EMA decay
    vat_eps: float = 6.0  # VAT perturbation norm: 6.0 CIFAR, 1.0 SVHN
    vat_xi: float = 1e-6
    entmin: float = 0.0  # entropy penalty on the perturbed output (VAT+EntMin)
    lga_alpha_w: float = 1e-3
    lga_eps_norm: float = 1e-3

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}; choose one of: {', '.join(METHODS)}")
        for name in ("lr", "weight", "vat_eps", "vat_xi", "entmin", "lga_alpha_w", "lga_eps_norm"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0; got {getattr(self, name)!r}")
        if not 0 <= self.ema < 1:
            raise ConfigError(f"ema must be in [0, 1); got {self.ema!r}")


def oliver_settings(method: str, family: str = "cifar", **overrides) -> MethodSettings:
    """Oliver et al.'s tuned values for `family` ('cifar' or 'svhn'); LGA's are our choices."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown hyperparameter family {family!r}; choose one of: {', '.join(FAMILIES)}")
    eps = 6.0 if family == "cifar" else 1.0
    table = {
        "supervised": dict(lr=3e-3),
        "pseudo_label": dict(lr=3e-4, weight=1.0, threshold=0.95),
        "pi_model": dict(lr=3e-4, weight=20.0),
        "mean_teacher": dict(lr=4e-4, weight=8.0, ema=0.95),
        "vat": dict(lr=3e-3, weight=0.3, vat_eps=eps),
        "vat_entmin": dict(lr=3e-3, weight=0.3, vat_eps=eps, entmin=0.1),
        "lga": dict(lr=1e-3),  # Figure 1's α_θ; the tuned values are not stated
        "lga_vat": dict(lr=1e-3, weight=0.3, vat_eps=eps),
    }
    if method not in table:
        raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
    return MethodSettings(method=method, **{**table[method], **overrides})


@dataclass(frozen=True)
class Schedule:
    steps: int
    batch_labeled: int = 50
    batch_unlabeled: int = 50
    rampup_fraction: float = 0.4  # Oliver: 200k of 500k steps
    lr_decay_at: float = 0.8  # Oliver: × 0.2 at 400k of 500k
    lr_decay: float = 0.2
    eval_every: int = 500
    checkpoint_every: int = 0  # steps between checkpoints (0: only if a path is given, every eval)

    def __post_init__(self):
        if self.steps < 1 or self.batch_labeled < 1 or self.batch_unlabeled < 1 or self.eval_every < 1:
            raise ConfigError("steps, batch sizes and eval_every must be >= 1")
        if not (0 <= self.rampup_fraction <= 1 and 0 <= self.lr_decay_at <= 1 and 0 < self.lr_decay <= 1):
            raise ConfigError("rampup_fraction and lr_decay_at must lie in [0, 1], lr_decay in (0, 1]")

    @property
    def rampup_steps(self) -> int:
        return int(round(self.rampup_fraction * self.steps))


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """(error %, mean cross entropy) in eval mode."""
    was_training = model.training
    model.eval()
    wrong, loss = torch.zeros((), device=x.device), torch.zeros((), device=x.device, dtype=torch.float64)
    for start in range(0, len(x), batch):
        logits = model(x[start:start + batch]).float()
        target = y[start:start + batch]
        wrong += (logits.argmax(-1) != target).sum()
        loss += F.cross_entropy(logits, target, reduction="sum").double()
    model.train(was_training)
    return 100.0 * float(wrong) / len(x), float(loss) / len(x)


class SSLTrainer:
    """The per-step update of one method; `train_ssl` drives it."""

    def __init__(self, model: torch.nn.Module, settings: MethodSettings, schedule: Schedule, data: SSLData,
                 seed: int):
        self.model, self.s, self.schedule, self.data = model, settings, schedule, data
        self.device = data.x_labeled.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)  # augmentation
        self.teacher = None
        self.lga = None
        if settings.method in ("lga", "lga_vat"):
            lga = LGASettings(alpha_theta=settings.lr, alpha_w=settings.lga_alpha_w, eps_norm=settings.lga_eps_norm,
                              labeled_weight=ConstantWeight(1.0), check_every=0)  # T(i) = 1: our choice
            self.lga = init_lga(model, len(data.x_unlabeled), data.num_classes, lga)
            self.optimizer = self.lga.theta_optimizer
        else:
            self.optimizer = adam([p for p in model.parameters() if p.requires_grad], settings.lr, (0.9, 0.999), 1e-8)
        if settings.method == "mean_teacher":
            self.teacher = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(settings.ema))

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        return self.data.augment(x, self.generator)

    def set_lr(self, step: int) -> None:
        s = self.schedule
        factor = s.lr_decay if step > s.lr_decay_at * s.steps else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = self.s.lr * factor

    def step(self, step: int, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
        """Update number `step` (1-based) on one labeled and one unlabeled batch."""
        self.set_lr(step)
        ramp = rampup(step, self.schedule.rampup_steps)
        if self.lga is not None:
            return self._lga_step(ramp, x_l, y_l, x_u, idx_u)
        return self._loss_step(ramp, x_l, y_l, x_u)

    def _vat_term(self, x_u: torch.Tensor, clean_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x_u un-augmented: each VAT pass augments x_u + r afresh, as Oliver et al.'s in-network augmentation
        """(Σ_u KL(p_perturbed ‖ p_clean) + (entmin / weight) · Σ_u H(p_perturbed), mean KL).

        The caller multiplies by weight · ramp, so the entropy penalty enters as entmin · ramp · H.
        """
        kl, perturbed = consistency.vat_loss(self.model, x_u, clean_logits.detach(), self.s.vat_eps, self.s.vat_xi,
                                             generator=self.generator, augment=self.augment)
        total = kl.sum()
        if self.s.entmin:
            total = total + self.s.entmin / self.s.weight * consistency.entropy(perturbed).sum()
        return total, kl.mean().detach()

    def _loss_step(self, ramp: float, x_l, y_l, x_u) -> dict[str, torch.Tensor]:
        m, model = self.s.method, self.model
        batch = x_l.shape[0] + x_u.shape[0]
        if m == "supervised":
            logits_l = model(self.augment(x_l))
            unlabeled = torch.zeros((), device=self.device)
        else:
            x_u_aug = self.augment(x_u)
            logits = model(torch.cat([self.augment(x_l), x_u_aug]))  # the first clean pass: BN statistics
            logits_l, logits_u = logits[:len(x_l)], logits[len(x_l):]
            if m == "pseudo_label":
                unlabeled = pseudo_label_terms(logits_u, self.s.threshold)[0].sum()
            elif m == "pi_model":
                with consistency.frozen_bn_stats(model):
                    second = model(self.augment(x_u))
                unlabeled = consistency.softmax_mse(logits_u, second).sum()
            elif m == "mean_teacher":
                with torch.no_grad(), consistency.frozen_bn_stats(self.teacher):
                    teacher = self.teacher(self.augment(x_u))
                unlabeled = consistency.softmax_mse(logits_u, teacher).sum()
            else:  # vat, vat_entmin
                unlabeled, _ = self._vat_term(x_u, logits_u)
        labeled = F.cross_entropy(logits_l, y_l, reduction="sum") / batch
        unlabeled = unlabeled / batch
        loss = labeled + self.s.weight * ramp * unlabeled
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.teacher is not None:
            self.teacher.update_parameters(model)
        return {"loss": loss.detach(), "loss_labeled": labeled.detach(), "loss_unlabeled": unlabeled.detach()}

    def _lga_step(self, ramp: float, x_l, y_l, x_u, idx_u) -> dict[str, torch.Tensor]:
        x_l_aug, x_u_aug = self.augment(x_l), self.augment(x_u)
        extra = None
        if self.s.method == "lga_vat":
            params = [p for p in self.model.parameters() if p.requires_grad]
            with torch.no_grad(), consistency.frozen_bn_stats(self.model):
                clean = self.model(x_u_aug)
            vat, _ = self._vat_term(x_u, clean)
            batch = x_l.shape[0] + x_u.shape[0]
            extra = torch.autograd.grad(self.s.weight * ramp * vat / batch, params, materialize_grads=True)
        out = lga_step(self.model, self.lga, x_l_aug, y_l, x_u_aug, idx_u, extra_gradient=extra)
        return {"loss": out["loss_labeled"] + out["loss_unlabeled"], "loss_labeled": out["loss_labeled"],
                "loss_unlabeled": out["loss_unlabeled"], "distance": out["distance"]}

    # ---- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "generator": self.generator.get_state()}
        if self.teacher is not None:
            state["teacher"] = self.teacher.state_dict()
        if self.lga is not None:
            state["lga"] = {"w": self.lga.w.detach().clone(), "w_optimizer": self.lga.w_optimizer.state_dict(),
                            "ema_grad_labeled": self.lga.ema_grad_labeled, "ema_v4": self.lga.ema_v4,
                            "step": self.lga.step}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        if self.teacher is not None:
            self.teacher.load_state_dict(state["teacher"])
        if self.lga is not None:
            lga = state["lga"]
            with torch.no_grad():
                self.lga.w.copy_(lga["w"])
            self.lga.w_optimizer.load_state_dict(lga["w_optimizer"])
            self.lga.ema_grad_labeled.copy_(lga["ema_grad_labeled"])
            self.lga.ema_v4.copy_(lga["ema_v4"])
            self.lga.step = lga["step"]


def _fingerprint(settings: MethodSettings, schedule: Schedule, seed: int, data: SSLData) -> dict:
    return {"format": CHECKPOINT_FORMAT, "settings": asdict(settings), "schedule": asdict(schedule), "seed": seed,
            "data": {k: tuple(getattr(data, k).shape) for k in ("x_labeled", "x_unlabeled", "x_val", "x_test")},
            "data_sum": float(data.x_labeled.double().sum())}


def train_ssl(model: torch.nn.Module, settings: MethodSettings, schedule: Schedule, data: SSLData, seed: int,
              checkpoint: Path | str | None = None, progress_bar=None) -> dict:
    """Train `model` in place; return the history and the test metrics at the best validation error.

    `checkpoint`: written atomically every `checkpoint_every` steps (default: every evaluation) and
    resumed from when present; a checkpoint of another run is refused. Resuming is bit-identical on CPU.
    """
    if len(data.x_labeled) < schedule.batch_labeled or len(data.x_unlabeled) < schedule.batch_unlabeled:
        raise ConfigError(f"batches of {schedule.batch_labeled} labeled / {schedule.batch_unlabeled} unlabeled "
                          f"need at least as many images; have {len(data.x_labeled)} / {len(data.x_unlabeled)}")
    if settings.method in ("vat_entmin",) and settings.weight == 0:
        raise ConfigError("vat_entmin needs weight > 0 (the entropy term is ramped with the VAT weight)")
    torch.manual_seed(seed)
    model.train()
    trainer = SSLTrainer(model, settings, schedule, data, seed)
    labeled = IndexStream(len(data.x_labeled), schedule.batch_labeled, seed)
    unlabeled = IndexStream(len(data.x_unlabeled), schedule.batch_unlabeled, seed + 1)
    fingerprint = _fingerprint(settings, schedule, seed, data)
    history = {"step": [], "val_error": [], "val_loss": [], "train_loss": []}
    best = {"val_error": math.inf, "step": 0, "state": copy.deepcopy(model.state_dict())}
    start, elapsed = 0, 0.0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = torch.load(path, map_location=data.x_labeled.device, weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise ConfigError(f"checkpoint {path} belongs to another run; delete it or pass another path")
        trainer.load_state_dict(state["trainer"])
        labeled.load_state_dict(state["labeled"])
        unlabeled.load_state_dict(state["unlabeled"])
        torch.set_rng_state(state["rng"])
        history, best, start, elapsed = state["history"], state["best"], state["step"], state["elapsed"]
    every = schedule.checkpoint_every or schedule.eval_every
    running = torch.zeros((), device=data.x_labeled.device)
    tick = time.perf_counter()
    for step in range(start + 1, schedule.steps + 1):
        i_l, i_u = labeled.next(), unlabeled.next()
        i_l_dev, i_u_dev = i_l.to(data.x_labeled.device), i_u.to(data.x_labeled.device)
        out = trainer.step(step, data.x_labeled[i_l_dev], data.y_labeled[i_l_dev], data.x_unlabeled[i_u_dev], i_u_dev)
        running += out["loss"]
        if step % schedule.eval_every == 0 or step == schedule.steps:
            raise_if_not_finite(TITLES[settings.method], step, out)
            val_error, val_loss = evaluate(model, data.x_val, data.y_val)
            n = step - (history["step"][-1] if history["step"] else 0)
            history["step"].append(step)
            history["val_error"].append(val_error)
            history["val_loss"].append(val_loss)
            history["train_loss"].append(float(running) / n)
            running.zero_()
            if val_error < best["val_error"]:
                best = {"val_error": val_error, "step": step, "state": copy.deepcopy(model.state_dict())}
        if path is not None and (step % every == 0) and step < schedule.steps:
            now = time.perf_counter()
            save_torch(path, {"fingerprint": fingerprint, "trainer": trainer.state_dict(), "labeled": labeled.state_dict(),
                         "unlabeled": unlabeled.state_dict(), "rng": torch.get_rng_state(), "history": history,
                         "best": best, "step": step, "elapsed": elapsed + now - tick})
        if progress_bar is not None:
            progress_bar.update(1)
    elapsed += time.perf_counter() - tick
    final_error, final_loss = evaluate(model, data.x_test, data.y_test)
    final_state = copy.deepcopy(model.state_dict())
    model.load_state_dict(best["state"])
    test_error, test_loss = evaluate(model, data.x_test, data.y_test)
    model.load_state_dict(final_state)
    if path is not None:
        path.unlink(missing_ok=True)
    return {"method": settings.method, "settings": asdict(settings), "seed": seed, "history": history,
            "best_step": best["step"], "best_val_error": best["val_error"], "test_error": test_error,
            "test_loss": test_loss, "final_test_error": final_error, "final_test_loss": final_loss,
            "train_seconds": elapsed, "steps": schedule.steps}
