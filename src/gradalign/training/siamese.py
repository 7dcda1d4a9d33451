"""Deep Siamese training with a DirectPred predictor (Halvagal, Laborieux & Zenke 2022, §3, Table 1), on the one loop.

The data set is moved to the device whole and augmented there (SimCLR's augmentations, two views per
image from one seeded generator); every epoch is a fresh random order with the last partial batch
dropped. The learning rate warms up linearly and decays on a cosine (solo-learn's warmup_cosine); the
EMA target's rate rises from `ema_base` to 1 on a cosine (BYOL). After every epoch: the online
readout's test accuracy and DirectPred's spectrum; at the end a linear probe on frozen features.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from gradalign.config import Settings, require
from gradalign.data.augment import SimCLRAugment, normalise
from gradalign.data.image_tensors import as_uint8_nchw, channel_stats, check_image_sets
from gradalign.methods.divergence import accuracy_chance, raise_if_at_chance
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods.directpred import DirectPredictor, spectrum_summary
from gradalign.methods.isoloss import DEEP_LOSSES
from gradalign.methods.siamese import siamese_step
from gradalign.models.siamese import SiameseNet
from gradalign.training import loop
from gradalign.training.checkpoint import data_digest, fingerprint
from gradalign.training.ema import ema_network_update
from gradalign.training.evaluate import accuracy, extract_features, linear_probe
from gradalign.training.schedules import cosine_ema_rate, warmup_cosine

CURVES = ("loss", "lr", "readout_train_acc", "readout_test_acc", "s_min", "s_max", "s_mean", "participation_ratio")
"""Per-epoch curves of a run, in the order of `train_siamese`'s result."""


@dataclass(frozen=True)
class SiameseSettings(Settings):
    loss: str = "L"  # key of DEEP_LOSSES: "L" (BYOL/SimSiam, Eq. 2) or "iso" (Eq. 8): Table 1's rows
    ema: bool = True  # EMA target (BYOL) or the online net detached (SimSiam): Table 1's columns
    epochs: int = 100  # Table 1's STL-10 budget (CIFAR-10: 800)
    batch_size: int = 256  # the authors' configs
    lr: float = 0.1  # SGD peak rate of the authors' no-EMA configs, at batch 256
    momentum: float = 0.9  # same configs
    weight_decay: float = 1e-5  # the authors' configs (PROTOCOLS' later-version recipe says 1e-4)
    warmup_epochs: int = 10  # linear warm-up from 0, then cosine decay to 0 (solo-learn's warmup_cosine)
    ema_base: float = 0.99  # target EMA rate at step 0, rising to 1 on a cosine schedule (BYOL)
    predictor_alpha: float = 0.5  # W_P = U D^α Uᵀ (DirectPred's default)
    predictor_tau: float | None = None  # correlation running-average rate; None: 0.998 with EMA, 0.5 without
    predictor_eps: float = 0.0  # added to the normalised eigenvalues (the authors' eps_iso)
    width: float = 1.0  # VGG11 channel multiplier; 1 gives 512 features
    projector_hidden: int = 4096  # the authors' projector hidden size
    projector_dim: int = 256  # M, the size of z and W_P (authors: 256)
    crop_scale_min: float = 0.08  # SimCLR's random resized crop, area fraction in [0.08, 1]
    readout_lr: float = 1e-3  # Adam for the online readout: insensitive to the drifting feature scale
    probe_iterations: int = 300  # L-BFGS iterations of the final linear probe (full batch)
    probe_l2: float = 1e-4  # L2 penalty of the probe on standardised features: a mild, fixed choice
    seed: int = 0  # weights, data order and augmentations
    bf16: bool = True  # bf16 autocast; used on CUDA only
    channels_last: bool = True  # channels-last memory format; used on CUDA only
    eval_batch_size: int = 1024  # batch size of feature extraction (memory only, no effect on results)

    @property
    def directpred_tau(self) -> float:
        return self.predictor_tau if self.predictor_tau is not None else (0.998 if self.ema else 0.5)

    def check(self, n_train: int) -> None:
        """The batch must fit in the training set (known once the data is chosen)."""
        require(self, "batch_size", 2 <= self.batch_size <= n_train, f"must be in [2, {n_train} training images]")

    def validate(self) -> None:
        require(self, "loss", self.loss in DEEP_LOSSES, f"must be one of {', '.join(DEEP_LOSSES)} (unknown loss)")
        require(self, "epochs", self.epochs >= 1, "must be >= 1")
        require(self, "batch_size", self.batch_size >= 2, "must be >= 2")
        require(self, "warmup_epochs", 0 <= self.warmup_epochs < self.epochs, f"must be in [0, epochs = {self.epochs})")
        for name in ("lr", "readout_lr", "width", "predictor_alpha"):
            require(self, name, getattr(self, name) > 0, "must be > 0")
        require(self, "momentum", 0 <= self.momentum < 1, "must be in [0, 1)")
        for name in ("weight_decay", "probe_l2", "predictor_eps"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        require(self, "ema_base", 0 <= self.ema_base <= 1, "must be in [0, 1]")
        require(self, "predictor_tau", 0 <= self.directpred_tau < 1, "must be in [0, 1)")
        for name in ("projector_hidden", "projector_dim", "probe_iterations", "eval_batch_size"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "crop_scale_min", 0 < self.crop_scale_min <= 1, "must be in (0, 1]")


class SiameseRun:
    """Everything a run updates: networks, predictor, readout, optimisers, the data/augmentation generator."""

    def __init__(
        self,
        s: SiameseSettings,
        images,
        labels,
        test_images,
        test_labels,
        classes: int,
        augment: SimCLRAugment,
        mean,
        std,
        device: torch.device,
    ):
        self.s, self.augment, self.device, self.mean, self.std = s, augment, device, mean, std
        self.images, self.labels, self.test_images, self.test_labels = images, labels, test_images, test_labels
        self.steps_per_epoch = len(images) // s.batch_size
        self.total_steps = self.steps_per_epoch * s.epochs
        self.fast = device.type == "cuda"
        self.autocast = self.fast and s.bf16
        with torch.random.fork_rng(devices=[]):  # seeded initialisation; the caller's RNG is untouched
            torch.manual_seed(s.seed)
            self.net = SiameseNet(images.shape[1], s.width, s.projector_hidden, s.projector_dim).to(device)
            self.readout = nn.Linear(self.net.backbone.feature_dim, classes).to(device)
        if self.fast and s.channels_last:
            self.net.to(memory_format=torch.channels_last)
        self.target = copy.deepcopy(self.net).requires_grad_(False) if s.ema else None
        self.predictor = DirectPredictor(
            s.projector_dim, s.predictor_alpha, s.directpred_tau, s.predictor_eps, device=device
        )
        self.loss_fn = DEEP_LOSSES[s.loss]
        self.opt = torch.optim.SGD(self.net.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
        self.readout_opt = torch.optim.Adam(self.readout.parameters(), lr=s.readout_lr)
        self.generator = torch.Generator(device).manual_seed(s.seed)
        self.order, self.previous_loss, self.epoch_began = None, None, 0.0
        self.epoch_seconds: list[float] = []

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.fast and self.s.channels_last else x

    def features(self, images: torch.Tensor) -> torch.Tensor:
        prepare = lambda chunk: self._prepare(normalise(chunk.float() / 255, self.mean, self.std))  # noqa: E731
        return extract_features(self.net.backbone, images, prepare, self.s.eval_batch_size, self.autocast)

    def step(self, t: int) -> dict[str, torch.Tensor]:
        k, B = t - 1, self.s.batch_size  # k: the 0-based step of the schedules
        i = k % self.steps_per_epoch
        if i == 0:
            self.order = torch.randperm(len(self.images), generator=self.generator, device=self.device)
            self.previous_loss, self.epoch_began = None, time.perf_counter()
        batch = self.order[i * B : (i + 1) * B]
        lr = warmup_cosine(k, self.total_steps, self.s.warmup_epochs * self.steps_per_epoch, self.s.lr)
        for group in self.opt.param_groups:
            group["lr"] = lr
        x = self.images[batch].float() / 255
        x1, x2 = self._prepare(self.augment(x, self.generator)), self._prepare(self.augment(x, self.generator))
        out = siamese_step(self, x1, x2, self.labels[batch], k, self.previous_loss)
        if self.target is not None:
            ema_network_update(self.target, self.net, cosine_ema_rate(k, self.total_steps, self.s.ema_base))
        self.previous_loss = out["loss"]
        return out

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict[str, float]:
        self.epoch_seconds.append(time.perf_counter() - self.epoch_began)
        return {
            "loss": sums["loss"] / self.steps_per_epoch,
            "lr": self.opt.param_groups[0]["lr"],
            "readout_train_acc": sums["hits"] / max(sums["labelled"], 1),
            "readout_test_acc": accuracy(self.readout, self.features(self.test_images), self.test_labels),
            **spectrum_summary(self.predictor.spectrum()[0]),
        }

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(),
            "target": self.target.state_dict() if self.target else None,
            "predictor": self.predictor.state_dict(),
            "readout": self.readout.state_dict(),
            "opt": self.opt.state_dict(),
            "readout_opt": self.readout_opt.state_dict(),
            "generator": self.generator.get_state(),
            "epoch_seconds": self.epoch_seconds,
        }

    def load_state_dict(self, state: dict) -> None:
        for name in ("net", "predictor", "readout", "opt", "readout_opt"):
            getattr(self, name).load_state_dict(state[name])
        if self.target is not None:
            self.target.load_state_dict(state["target"])
        self.generator.set_state(
            state["generator"].cpu()
        )  # a checkpoint loads to the run's device; torch takes generator states as CPU byte tensors only
        self.epoch_seconds = list(state["epoch_seconds"])


def train_siamese(
    train_images,
    train_labels,
    test_images,
    test_labels,
    settings: SiameseSettings,
    device: torch.device | str = "cpu",
    checkpoint: Path | str | None = None,
    *,
    max_epochs_this_call: int | None = None,
    time_limit_s: float | None = None,
) -> dict:
    """Train a Siamese VGG11 with DirectPred (§3, Table 1) and return plain-Python results.

    Images: uint8 (N, H, W) or (N, C, H, W), C = 1 or 3; labels int64, -1 for unlabelled training
    images (used by the Siamese loss only). Normalisation uses the training set's channel statistics.
    `checkpoint`: saved after every epoch, resumed from when present (bitwise on CPU).
    `max_epochs_this_call` / `time_limit_s` stop early after a completed epoch (time-boxed sessions);
    the result then has complete = False and no probe. Returns: settings, epochs_done, complete, steps,
    curves (per epoch: CURVES), final_spectrum, readout_test_acc, probe_test_acc, collapsed (`first_collapse`: the
    run trains on through a collapse; a NaN or an exploded loss still raises a DivergenceError), epoch_seconds,
    images_per_s (pairs of views per second, training only), device.
    """
    s, device = settings, torch.device(device)
    train_images, test_images = as_uint8_nchw(train_images), as_uint8_nchw(test_images)
    train_labels, test_labels = torch.as_tensor(train_labels).long(), torch.as_tensor(test_labels).long()
    s.check(len(train_images))
    if (max_epochs_this_call is not None and max_epochs_this_call < 1) or (
        time_limit_s is not None and time_limit_s <= 0
    ):
        raise ConfigError(
            f"max_epochs_this_call must be ≥ 1 and time_limit_s > 0; got {max_epochs_this_call}, {time_limit_s}"
        )
    check_image_sets(train_images, train_labels, test_images, test_labels)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick its fastest kernels
    spec = {
        "settings": asdict(s),
        "device": device.type,
        "data": data_digest(train_images, train_labels, test_images, test_labels),
    }
    mean, std = channel_stats(train_images)
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    run = SiameseRun(
        s,
        train_images.to(device),
        train_labels.to(device),
        test_images.to(device),
        test_labels.to(device),
        classes,
        SimCLRAugment(mean, std, crop_scale=(s.crop_scale_min, 1.0)),
        mean,
        std,
        device,
    )
    desc = f"siamese {s.loss} {'EMA' if s.ema else 'no EMA'}"
    out = loop.train(
        run,
        run.total_steps,
        eval_at=loop.every(run.steps_per_epoch, run.total_steps),
        name=desc,
        checkpoint=Path(checkpoint) if checkpoint is not None else None,
        run_fingerprint=fingerprint(spec),
        max_evals=max_epochs_this_call,
        time_limit_s=time_limit_s,
        map_location=device,
        chance=(),  # a collapse is a result here (`first_collapse`); a NaN or an exploded loss still stops
    )
    epochs_done = out.steps_done // run.steps_per_epoch
    test_features = run.features(run.test_images)
    probe = None
    if out.complete:
        labelled = run.labels >= 0
        probe = linear_probe(
            run.features(run.images[labelled]),
            run.labels[labelled],
            test_features,
            run.test_labels,
            s.probe_l2,
            s.probe_iterations,
        )
    seconds = sum(run.epoch_seconds)
    return {
        "settings": asdict(s),
        "epochs_done": epochs_done,
        "complete": out.complete,
        "steps": epochs_done * run.steps_per_epoch,
        "curves": {name: out.history[name] for name in CURVES},
        "final_spectrum": run.predictor.spectrum()[0].tolist(),
        "readout_test_acc": accuracy(run.readout, test_features, run.test_labels),
        "probe_test_acc": probe,
        "collapsed": first_collapse(desc, out.history["readout_test_acc"], run.steps_per_epoch, classes, probe),
        "epoch_seconds": run.epoch_seconds,
        "images_per_s": epochs_done * run.steps_per_epoch * s.batch_size / seconds if seconds else None,
        "device": str(device),
    }


def first_collapse(what: str, readout: list, steps_per_epoch: int, classes: int, probe: float | None) -> str | None:
    """Where the run collapsed, in words, or None: the first epoch whose online readout (fractions, one per epoch)
    fell back to chance once it had started (the rule that stops other runs, `methods.divergence.
    raise_if_at_chance`), else a final probe at chance (a probe beats chance on an untrained network's features).

    A collapse is what Table 1's claims are about (L loses accuracy without the EMA target, §3), so a run trains on
    through it to the end of its schedule and its probe is its result; this says where it happened."""
    level = accuracy_chance("readout_test_acc", classes, percent=False)
    checks = [(level, value, readout[:i], (i + 1) * steps_per_epoch) for i, value in enumerate(readout)]
    if probe is not None:
        probe_level = accuracy_chance("probe_test_acc", classes, percent=False, started=True)
        checks.append((probe_level, probe, [], len(readout) * steps_per_epoch))
    for chance, value, history, step in checks:
        try:
            raise_if_at_chance(what, step, chance, value, history)
        except DivergenceError as err:
            return str(err).rsplit("; ", 1)[0].replace(" diverged at ", " collapsed at ")
    return None
