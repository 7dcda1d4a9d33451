"""Deep Siamese training with a DirectPred predictor: Table 1 of Halvagal, Laborieux & Zenke (2022, §3).

Online branch: VGG11 backbone → projector Linear–BN–ReLU–Linear → z ("a one-hidden-layer projection
MLP"). The predictor W_P = U D^α Uᵀ is not learned (Eq. 1, DirectPred): it is rebuilt every step from
a running correlation of the online z of both views (one update per step with the two views
together; the authors' code updates once per view). Target branch: an EMA copy of backbone + projector
(BYOL; rate rising from `ema_base` to 1 on a cosine schedule) or, without EMA, the online output
detached (SimSiam). Loss `DEEP_LOSSES[loss]` — L (Eq. 2) or L_iso (Eq. 8), cosine forms — summed over
both orderings of the views. A linear readout on detached backbone features (own optimiser) tracks
accuracy during training; `linear_probe` fits a classifier on frozen features afterwards.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gradalign.atomic import save_torch
from gradalign.data.augment import SimCLRAugment, normalise
from gradalign.errors import ConfigError, DivergenceError
from gradalign.methods.directpred import DirectPredictor
from gradalign.methods.isoloss import DEEP_LOSSES
from gradalign.models.vgg import VGG11
from gradalign.progress import progress

CHECKPOINT_FORMAT = 1
"""Bumped when the checkpoint layout or the training step changes: older checkpoints are refused."""

CURVES = ("loss", "lr", "readout_train_acc", "readout_test_acc", "s_min", "s_max", "s_mean", "participation_ratio")
"""Per-epoch curves of a run, in the order of `train_siamese`'s result."""


@dataclass(frozen=True)
class SiameseSettings:
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
        """ConfigError for settings that cannot run, before any compute."""
        problems = [
            (self.loss not in DEEP_LOSSES, f"unknown loss {self.loss!r}; choose one of {', '.join(DEEP_LOSSES)}"),
            (self.epochs < 1, f"epochs must be ≥ 1; got {self.epochs}"),
            (not 2 <= self.batch_size <= n_train, f"batch_size must be in [2, {n_train} training images]; "
                                                  f"got {self.batch_size}"),
            (not 0 <= self.warmup_epochs < self.epochs, f"warmup_epochs must be in [0, epochs = {self.epochs}); "
                                                        f"got {self.warmup_epochs}"),
            (min(self.lr, self.readout_lr) <= 0, f"lr and readout_lr must be > 0; got {self.lr}, {self.readout_lr}"),
            (not 0 <= self.momentum < 1, f"momentum must be in [0, 1); got {self.momentum}"),
            (min(self.weight_decay, self.probe_l2) < 0, "weight_decay and probe_l2 must be ≥ 0"),
            (not 0 <= self.ema_base <= 1, f"ema_base must be in [0, 1]; got {self.ema_base}"),
            (not 0 <= self.directpred_tau < 1, f"predictor_tau must be in [0, 1); got {self.predictor_tau}"),
            (self.predictor_alpha <= 0 or self.predictor_eps < 0, "predictor_alpha must be > 0, predictor_eps ≥ 0"),
            (self.width <= 0, f"width must be > 0; got {self.width}"),
            (min(self.projector_hidden, self.projector_dim, self.probe_iterations, self.eval_batch_size) < 1,
             "projector_hidden, projector_dim, probe_iterations and eval_batch_size must be ≥ 1"),
            (not 0 < self.crop_scale_min <= 1, f"crop_scale_min must be in (0, 1]; got {self.crop_scale_min}"),
        ]
        for bad, message in problems:
            if bad:
                raise ConfigError(message)


# ----------------------------------------------------------------------------- networks and schedules


def projection_mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """One hidden layer: Linear – BatchNorm1d – ReLU – Linear (§3)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                         nn.Linear(hidden, out_dim))


class SiameseNet(nn.Module):
    """Backbone + projector: images → (features h, embedding z)."""

    def __init__(self, in_channels: int, width: float, hidden: int, out_dim: int):
        super().__init__()
        self.backbone = VGG11(in_channels, width)
        self.projector = projection_mlp(self.backbone.feature_dim, hidden, out_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return h, self.projector(h)


def ema_rate(step: int, total_steps: int, base: float) -> float:
    """τ_k = 1 − (1 − base)(cos(πk/K) + 1)/2: base at k = 0, 1 at k = K (BYOL)."""
    return 1 - (1 - base) * (math.cos(math.pi * step / total_steps) + 1) / 2


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """θ_t ← τ θ_t + (1 − τ) θ_o for parameters; buffers (BatchNorm statistics) copied."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1 - tau)
    for t, o in zip(target.buffers(), online.buffers()):
        t.copy_(o)


def learning_rate(step: int, total_steps: int, warmup_steps: int, peak: float) -> float:
    """Linear warm-up to `peak` over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * (1 + math.cos(math.pi * (step - warmup_steps) / (total_steps - warmup_steps))) / 2


# ----------------------------------------------------------------------------- training state and step


class SiameseTraining:
    """Everything a run updates: networks, predictor, readout, optimisers, the data/augmentation generator."""

    def __init__(self, s: SiameseSettings, in_channels: int, classes: int, steps_per_epoch: int,
                 augment: SimCLRAugment, device: torch.device):
        self.s, self.augment, self.device = s, augment, device
        self.steps_per_epoch, self.total_steps = steps_per_epoch, steps_per_epoch * s.epochs
        self.fast = device.type == "cuda"
        with torch.random.fork_rng(devices=[]):  # seeded initialisation; the caller's RNG is untouched
            torch.manual_seed(s.seed)
            self.net = SiameseNet(in_channels, s.width, s.projector_hidden, s.projector_dim).to(device)
            self.readout = nn.Linear(self.net.backbone.feature_dim, classes).to(device)
        if self.fast and s.channels_last:
            self.net.to(memory_format=torch.channels_last)
        self.target = copy.deepcopy(self.net).requires_grad_(False) if s.ema else None
        self.predictor = DirectPredictor(s.projector_dim, s.predictor_alpha, s.directpred_tau, s.predictor_eps,
                                         device=device)
        self.loss_fn = DEEP_LOSSES[s.loss]
        self.opt = torch.optim.SGD(self.net.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
        self.readout_opt = torch.optim.Adam(self.readout.parameters(), lr=s.readout_lr)
        self.generator = torch.Generator(device).manual_seed(s.seed)

    def views(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = images.float() / 255
        v1, v2 = self.augment(x, self.generator), self.augment(x, self.generator)
        if self.fast and self.s.channels_last:
            v1, v2 = (v.contiguous(memory_format=torch.channels_last) for v in (v1, v2))
        return v1, v2

    def step(self, images, labels, step: int, previous_loss, sums: torch.Tensor) -> torch.Tensor:
        """One SGD step on a batch; adds (loss, readout hits, labelled count) to `sums` on the device."""
        s = self.s
        for group in self.opt.param_groups:
            group["lr"] = learning_rate(step, self.total_steps, s.warmup_epochs * self.steps_per_epoch, s.lr)
        x1, x2 = self.views(images)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.fast and s.bf16):
            (h1, z1), (h2, z2) = self.net(x1), self.net(x2)
            if self.target is not None:
                with torch.no_grad():
                    t1, t2 = self.target(x1)[1], self.target(x2)[1]
            else:
                t1, t2 = z1.detach(), z2.detach()
        z1, z2, t1, t2 = (v.float() for v in (z1, z2, t1, t2))
        self.predictor.update(torch.cat([z1, z2]))
        _check_finite({f"the loss at step {step - 1}": previous_loss,
                       f"the projector output at step {step}": self.predictor.C})
        W_P = self.predictor.matrix()
        loss = self.loss_fn(z1, t2, W_P) + self.loss_fn(z2, t1, W_P)
        logits, y = self.readout(torch.cat([h1, h2]).detach().float()), labels.repeat(2)
        labelled = (y >= 0).sum().float()
        readout_loss = F.cross_entropy(logits, y, ignore_index=-1, reduction="sum") / labelled.clamp(min=1)
        self.opt.zero_grad(set_to_none=True)
        self.readout_opt.zero_grad(set_to_none=True)
        (loss + readout_loss).backward()  # disjoint parameters (features detached): one backward for both
        self.opt.step()
        self.readout_opt.step()
        if self.target is not None:
            ema_update(self.target, self.net, ema_rate(step, self.total_steps, s.ema_base))
        sums += torch.stack([loss.detach(), logits.argmax(1).eq(y).sum().float(), labelled])  # y = −1 never hits
        return loss.detach()

    def train_epoch(self, epoch: int, images: torch.Tensor, labels: torch.Tensor, bar) -> tuple[float, ...]:
        """One pass in a fresh random order (last partial batch dropped); (mean loss, readout accuracy)."""
        B = self.s.batch_size
        order = torch.randperm(len(images), generator=self.generator, device=self.device)
        sums, loss = torch.zeros(3, device=self.device), None
        for i in range(self.steps_per_epoch):
            batch = order[i * B:(i + 1) * B]
            loss = self.step(images[batch], labels[batch], epoch * self.steps_per_epoch + i, loss, sums)
            bar.update()
        _check_finite({f"the loss at step {(epoch + 1) * self.steps_per_epoch - 1}": loss})
        total_loss, hits, labelled = sums.tolist()  # the epoch's one host read of its metrics
        return total_loss / self.steps_per_epoch, hits / max(labelled, 1)

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "target": self.target.state_dict() if self.target else None,
                "predictor": self.predictor.state_dict(), "readout": self.readout.state_dict(),
                "opt": self.opt.state_dict(), "readout_opt": self.readout_opt.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        for name in ("net", "predictor", "readout", "opt", "readout_opt"):
            getattr(self, name).load_state_dict(state[name])
        if self.target is not None:
            self.target.load_state_dict(state["target"])
        self.generator.set_state(state["generator"])


def _check_finite(quantities: dict) -> None:
    """One host read for all: it shares the synchronisation that the eigendecomposition needs anyway."""
    quantities = {name: v for name, v in quantities.items() if v is not None}
    flags = torch.stack([torch.isfinite(v).all() for v in quantities.values()]).tolist()
    for name, ok in zip(quantities, flags):
        if not ok:
            raise DivergenceError(f"{name} is NaN or Inf: the run diverged; lower the learning rate")


# ----------------------------------------------------------------------------- data and evaluation


def as_uint8_nchw(images) -> torch.Tensor:
    """uint8 (N, H, W) or (N, C, H, W) → (N, C, H, W)."""
    images = torch.as_tensor(images)
    if images.dtype != torch.uint8 or images.dim() not in (3, 4):
        raise ConfigError(f"images must be uint8 (N, H, W) or (N, C, H, W); got {images.dtype} {tuple(images.shape)}")
    return images[:, None] if images.dim() == 3 else images


def channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 (N, C, H, W) images scaled to [0, 1] (float64, in chunks)."""
    total = squares = torch.zeros(images.shape[1], dtype=torch.float64, device=images.device)
    for chunk in images.split(4096):
        x = chunk.double() / 255
        total, squares = total + x.sum(dim=(0, 2, 3)), squares + (x * x).sum(dim=(0, 2, 3))
    n = images.numel() // images.shape[1]
    mean = total / n
    return tuple(mean.tolist()), tuple((squares / n - mean**2).clamp(min=1e-12).sqrt().tolist())


@torch.no_grad()
def extract_features(backbone: nn.Module, images: torch.Tensor, mean, std, batch_size: int = 1024,
                     bf16: bool = False, channels_last: bool = False) -> torch.Tensor:
    """Float32 features of unaugmented, normalised images, backbone in eval mode (BN running stats)."""
    was_training = backbone.training
    backbone.eval()
    out = []
    for chunk in images.split(batch_size):
        x = normalise(chunk.float() / 255, mean, std)
        x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            out.append(backbone(x).float())
    backbone.train(was_training)
    return torch.cat(out)


@torch.no_grad()
def accuracy(classifier: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    return float(classifier(features).argmax(1).eq(labels).double().mean())


def linear_probe(train_features, train_labels, test_features, test_labels, l2: float = 1e-4,
                 iterations: int = 300) -> float:
    """Test accuracy of a multinomial logistic regression on frozen features.

    Features standardised with the training mean and std; weights from zero; full-batch L-BFGS
    (strong Wolfe line search) on cross-entropy + l2/2 ‖W‖²: convex, so no learning rate to tune, and
    deterministic. Labels −1 (unlabelled images) are left out.
    """
    train_features, train_labels = train_features[train_labels >= 0], train_labels[train_labels >= 0]
    mu, sd = train_features.mean(0), train_features.std(0).clamp(min=1e-6)
    a, b = (train_features - mu) / sd, (test_features - mu) / sd
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    W = torch.zeros(a.shape[1], classes, device=a.device, requires_grad=True)
    bias = torch.zeros(classes, device=a.device, requires_grad=True)
    opt = torch.optim.LBFGS([W, bias], max_iter=iterations, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(a @ W + bias, train_labels) + 0.5 * l2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return float((b @ W + bias).argmax(1).eq(test_labels).double().mean())


def spectrum_summary(s: torch.Tensor) -> dict:
    """min, max, mean of DirectPred's normalised eigenvalues s and the participation ratio (Σs)²/Σs²."""
    s = s.double()
    return {"s_min": float(s.min()), "s_max": float(s.max()), "s_mean": float(s.mean()),
            "participation_ratio": float(s.sum() ** 2 / (s * s).sum())}


def _check_data(train_images, train_labels, test_images, test_labels) -> None:
    if train_images.shape[1] not in (1, 3):
        raise ConfigError(f"images need 1 or 3 channels; got {train_images.shape[1]}")
    if train_images.shape[1:] != test_images.shape[1:]:
        raise ConfigError(f"train and test images differ in shape: {tuple(train_images.shape[1:])} "
                          f"vs {tuple(test_images.shape[1:])}")
    for images, labels, name in ((train_images, train_labels, "train"), (test_images, test_labels, "test")):
        if labels.shape != (len(images),):
            raise ConfigError(f"{name} labels must have shape ({len(images)},); got {tuple(labels.shape)}")
    if (test_labels < 0).any() or not (train_labels >= 0).any():
        raise ConfigError("test labels must be ≥ 0, and some training labels too (−1 marks unlabelled images)")


# ----------------------------------------------------------------------------- checkpoints


def _fingerprint(s: SiameseSettings, device: torch.device, *tensors: torch.Tensor) -> str:
    """Hash of the settings, device type, format and data (shapes + up to 2²⁰ evenly spaced values each)."""
    digest = hashlib.sha256(json.dumps({"format": CHECKPOINT_FORMAT, "settings": asdict(s), "device": device.type},
                                       sort_keys=True).encode())
    for t in tensors:
        flat = t.reshape(-1)
        sample = flat[torch.linspace(0, len(flat) - 1, min(len(flat), 1 << 20), dtype=torch.float64).long()]
        digest.update(str(tuple(t.shape)).encode() + sample.cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _load_checkpoint(path: Path, fingerprint: str, s: SiameseSettings) -> dict:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("fingerprint") != fingerprint:
        stored = state.get("settings", {})
        differ = [f.name for f in fields(s) if stored.get(f.name) != getattr(s, f.name)]
        what = f"settings {', '.join(differ)}" if differ else "data, device or checkpoint format"
        raise ConfigError(f"checkpoint {path} belongs to another run (its {what} differ); "
                          f"pass another checkpoint path or delete it to start over")
    return state


# ----------------------------------------------------------------------------- entry point


def train_siamese(train_images, train_labels, test_images, test_labels, settings: SiameseSettings,
                  device: torch.device | str = "cpu", checkpoint: Path | str | None = None, *,
                  max_epochs_this_call: int | None = None, time_limit_s: float | None = None) -> dict:
    """Train a Siamese VGG11 with DirectPred (§3, Table 1) and return plain-Python results.

    Images: uint8 (N, H, W) or (N, C, H, W), C = 1 or 3, e.g. 28×28, 32×32, 96×96; labels int64,
    −1 for unlabelled training images (used by the Siamese loss only). The data set is moved to
    `device` whole and augmented there. Normalisation uses the training set's channel statistics.
    `checkpoint`: saved after every epoch, resumed from when present (a checkpoint from other
    settings or data is a ConfigError). `max_epochs_this_call` / `time_limit_s` stop early after a
    completed epoch (for time-boxed sessions); the result then has complete = False and no probe.
    Returns: settings, epochs_done, complete, steps, curves (per epoch: CURVES), final_spectrum,
    readout_test_acc, probe_test_acc, epoch_seconds, images_per_s (pairs of views per second,
    training only), device.
    """
    s, device = settings, torch.device(device)
    train_images, test_images = as_uint8_nchw(train_images), as_uint8_nchw(test_images)
    train_labels, test_labels = torch.as_tensor(train_labels).long(), torch.as_tensor(test_labels).long()
    s.check(len(train_images))
    if (max_epochs_this_call is not None and max_epochs_this_call < 1) or (
            time_limit_s is not None and time_limit_s <= 0):
        raise ConfigError(f"max_epochs_this_call must be ≥ 1 and time_limit_s > 0; "
                          f"got {max_epochs_this_call}, {time_limit_s}")
    _check_data(train_images, train_labels, test_images, test_labels)
    fast = device.type == "cuda"
    if fast:
        torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick its fastest kernels
    fingerprint = _fingerprint(s, device, train_images, train_labels, test_images, test_labels)
    mean, std = channel_stats(train_images)
    steps_per_epoch = len(train_images) // s.batch_size
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    run = SiameseTraining(s, train_images.shape[1], classes, steps_per_epoch,
                          SimCLRAugment(mean, std, crop_scale=(s.crop_scale_min, 1.0)), device)
    record = {"curves": {name: [] for name in CURVES}, "epoch_seconds": []}
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = _load_checkpoint(path, fingerprint, s)
        run.load_state_dict(state["run"])
        record = state["record"]
    train_images, train_labels = train_images.to(device), train_labels.to(device)
    test_images, test_labels = test_images.to(device), test_labels.to(device)
    features = lambda images: extract_features(run.net.backbone, images, mean, std, s.eval_batch_size,  # noqa: E731
                                               fast and s.bf16, fast and s.channels_last)

    start_epoch, begun = len(record["epoch_seconds"]), time.perf_counter()
    desc = f"siamese {s.loss} {'EMA' if s.ema else 'no EMA'}"
    with progress(None, desc=desc, total=(s.epochs - start_epoch) * steps_per_epoch) as bar:
        for epoch in range(start_epoch, s.epochs):
            epoch_began = time.perf_counter()
            loss, readout_train_acc = run.train_epoch(epoch, train_images, train_labels, bar)
            record["epoch_seconds"].append(time.perf_counter() - epoch_began)
            values = {"loss": loss, "lr": run.opt.param_groups[0]["lr"], "readout_train_acc": readout_train_acc,
                      "readout_test_acc": accuracy(run.readout, features(test_images), test_labels),
                      **spectrum_summary(run.predictor.spectrum()[0])}
            for name in CURVES:
                record["curves"][name].append(values[name])
            bar.set_postfix(loss=f"{loss:.3f}", readout=f"{values['readout_test_acc']:.3f}")
            if path is not None:
                save_torch(path, {"fingerprint": fingerprint, "settings": asdict(s), "run": run.state_dict(),
                                  "record": record})
            done, elapsed = epoch + 1 - start_epoch, time.perf_counter() - begun
            next_end = elapsed * (done + 1) / done  # expected time once another epoch is done
            if done == max_epochs_this_call or (time_limit_s is not None and next_end > time_limit_s):
                break

    epochs_done = len(record["epoch_seconds"])
    complete = epochs_done == s.epochs
    test_features = features(test_images)
    probe = None
    if complete:
        labelled = train_labels >= 0
        probe = linear_probe(features(train_images[labelled]), train_labels[labelled], test_features, test_labels,
                             s.probe_l2, s.probe_iterations)
    seconds = sum(record["epoch_seconds"])
    return {
        "settings": asdict(s), "epochs_done": epochs_done, "complete": complete,
        "steps": epochs_done * steps_per_epoch, "curves": record["curves"],
        "final_spectrum": run.predictor.spectrum()[0].tolist(),
        "readout_test_acc": accuracy(run.readout, test_features, test_labels),
        "probe_test_acc": probe, "epoch_seconds": record["epoch_seconds"],
        "images_per_s": epochs_done * steps_per_epoch * s.batch_size / seconds if seconds else None,
        "device": str(device),
    }
