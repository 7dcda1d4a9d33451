"""Local-BP training of a split network on the one loop: SGR's CIFAR protocol (Yang et al. 2024, App. E).

A run is one network (ResNet-32, PlainNet-32 or a Table 7 VGG), split into K modules with the method's
local heads (`methods.local`), trained with one SGD optimizer per module and its head (Algorithm 1):
lr 0.1, momentum 0.9, weight decay 5e-4 on every parameter, batch 128, the learning rate on a cosine
from 0.1 to 0 over the whole run (per step: our choice; App. E says "cosine schedule"), augmentation
random crop with zero padding 4 + horizontal flip (App. E's "standard augmentation").

Fashion-MNIST (the cpu/gpu substitute for CIFAR) keeps the flip (our choice: its classes are clothes,
which a mirror image does not change) and crops 28 px from the 36 px zero-padded image. The data set
lives on the device as uint8; every step draws its batch from a per-epoch random order (the last
partial batch dropped, our choice) and augments it there, from one seeded generator. A train subset,
where given, is drawn once with the spec's `data_seed` (default 0: the same images for every method and seed: our
choice, so that methods are compared on the same data and seeds vary only the initialisation, order and
augmentation).

After every epoch: test accuracy and loss of the network's own classifier (the last module's head:
`nn.Sequential(*modules, head)` is the model), in eval mode (BN running statistics), and the epoch's
means of the step diagnostics (train loss and accuracy of the batches, each module's local loss and
SGR term). No validation split: the paper reports the accuracy at the end of training, and so do we. Runs of
the BP-free PlainMLP (`mlp<L>`, Table 4) also record Figure 3's ΔL_k per module (`input_effect`): one more
forward pass before and one after each step.

Finished runs live in the run cache (kind `sgr.local`): a run is keyed by its `LocalRunSpec` only, so
experiments that need the same run (Table 3's ResNet-32 SGR at K = 16 and Table 6's) share it. A global-BP
run that diverges (as global BP may in a deep VGG, Table 7's "fail"), or a local method's final run in
Tables 3, 6 and 7 (`divergence_is_a_result`), trains on through a test accuracy back at chance, and on a NaN or
an exploded loss is stored as failed at chance accuracy, with the step and the quantity. Any other divergence
(NaN or Inf, an exploded loss, a test accuracy back at chance after it had learned: `divergence`) stops the run
with a `DivergenceError`: nothing is cached or recorded. Inside a command's time box (`timebox`) a checkpointed
run stops after the epoch where the box would overrun and raises `TimeBoxSpent` (`training.loop`).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from gradalign.config import Settings, require
from gradalign.data.augment import normalise
from gradalign.data.crop_flip import crop_flip
from gradalign.methods.divergence import accuracy_chance
from gradalign.errors import DivergenceError
from gradalign.training.local_divergence import divergence_is_a_result
from gradalign.runtime import flushed_denormals
from gradalign.analysis.input_effect import input_effect, module_inputs
from gradalign.methods.local import LOCAL_METHODS, TITLES, LocalSettings
from gradalign.models.plain_conv import bp_free_plainnet, conv_depth
from gradalign.store.run_unit import Unit, without_defaults
from gradalign.training import loop
from gradalign.training.checkpoint import fingerprint
from gradalign.training.fast import FastPath, autocast, prepare_model
from gradalign.training.local_data import LocalData, local_data
from gradalign.training.evaluate import classification_metrics

RUN_KIND = "sgr.local"
RUN_VERSION = 1
RESNETS = {"resnet32": False, "plainnet32": True}  # name: plain (no identity connections)


def vgg_name(depth: int) -> str:
    return f"vgg{depth}"


def network_depth(network: str) -> int | None:
    """The depth of a `vgg<d>` name, else None."""
    digits = network[3:]
    return int(digits) if network.startswith("vgg") and digits.isdigit() else None


def mlp_depth(network: str) -> int | None:
    """The number of blocks of an `mlp<L>` name (the BP-free PlainMLP), else None."""
    digits = network[3:]
    return int(digits) if network.startswith("mlp") and digits.isdigit() and int(digits) >= 1 else None


def network_splits(network: str) -> tuple[int, ...]:
    """The K a network can be split into: ResNet-32 / PlainNet-32 1, 2, 3, 16; VGG-d 1, 5, d − 2; MLP-L, conv-L 1, L."""
    from gradalign.models.vgg_deep import VGG_STAGES

    if network in RESNETS:
        return (1, 2, 3, 16)
    if mlp_depth(network) or conv_depth(network):
        return tuple(sorted({1, mlp_depth(network) or conv_depth(network)}))
    depth = network_depth(network)
    return tuple(sorted({1, VGG_STAGES, depth - 2})) if depth else ()


def known_network(network: str) -> bool:
    from gradalign.models.vgg_deep import VGG_STAGES

    depth = network_depth(network)
    vgg = depth is not None and depth >= 7 and (depth - 2) % VGG_STAGES == 0
    return network in RESNETS or vgg or mlp_depth(network) is not None or conv_depth(network) is not None


@dataclass(frozen=True)
class SGRProtocol(Settings):
    """SGR's CIFAR protocol (App. E): SGD 0.1, momentum 0.9, wd 5e-4, cosine, batch 128, 200 epochs."""

    epochs: int = 200
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    crop_padding: int = 4  # random crop of the input size from the zero-padded image
    flip: bool = True  # horizontal flip, p = 0.5 (kept on Fashion-MNIST: our choice)

    def validate(self) -> None:
        require(self, "epochs", self.epochs >= 1, "must be >= 1")
        require(self, "batch_size", self.batch_size >= 2, "must be >= 2 (BatchNorm in training mode)")
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "momentum", 0 <= self.momentum < 1, "must be in [0, 1)")
        require(self, "weight_decay", self.weight_decay >= 0, "must be >= 0")
        require(self, "crop_padding", self.crop_padding >= 0, "must be >= 0")

    def lr_at(self, step: int, total_steps: int) -> float:
        """Cosine from `lr` at step 0 to 0 at `total_steps` (0-based step; per step, our choice)."""
        return self.lr * (1 + math.cos(math.pi * step / total_steps)) / 2


@dataclass(frozen=True)
class LocalRunSpec(Settings):
    """Everything one training run depends on (its run-cache key)."""

    network: str = "resnet32"  # resnet32, plainnet32, vgg<d> (Table 7: d = 5m + 2), mlp<L>, conv<L> (Table 4)
    method: LocalSettings = LocalSettings()
    protocol: SGRProtocol = SGRProtocol()
    dataset: str = "fashion_mnist"
    width: float = 1.0  # channel multiplier of the network (and so of its local heads)
    vgg_batch_norm: bool = True  # VGG only: conv → BN → ReLU (our choice; see `build_split_network`)
    vgg_init: str = "torchvision"  # VGG only: `models.vgg_deep`'s init ("fan_in": the no-BN reading's)
    pad_to: int = 0  # VGG only, > 0: images zero-padded to pad_to px (`training.local_data.pad_images`)
    n_train: int = 0  # train subset (0: the whole training split)
    n_test: int = 0  # test subset (0: the whole test split)
    seed: int = 0  # initialisation, batch order and augmentation
    data_seed: int = 0  # the train/test subsets: the same images for every method and seed (our choice)
    validation: int = 0  # > 0: evaluate on that many held-out training images instead of the test split
    fast: FastPath = FastPath()  # the training step under bf16 autocast / channels-last (training.fast)

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS
        from gradalign.models.vgg_deep import INITS

        require(self, "validation", self.validation >= 0, "must be >= 0")
        require(self, "vgg_init", self.vgg_init in INITS, f"must be one of {', '.join(INITS)}")
        vgg = network_depth(self.network) is not None and self.method.head_kind != "infopro"  # its heads: 28 px
        require(self, "pad_to", self.pad_to == 0 or vgg, "is for a VGG without InfoPro heads only")
        require(self, "fast.compile", not self.fast.compile, "is not supported by the local steps (autograd.grad)")
        ok = known_network(self.network)
        require(self, "network", ok, "must be resnet32, plainnet32, vgg<d> (d = 5m + 2), mlp<L> or conv<L> (L <= 4)")
        splits = network_splits(self.network)
        require(self, "method.modules", self.method.modules in splits, f"must be one of {splits} for {self.network}")
        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        require(self, "width", self.width > 0, "must be > 0")
        require(self, "n_train", self.n_train == 0 or self.n_train >= self.protocol.batch_size, "must be 0 or >= batch")
        require(self, "n_test", self.n_test >= 0, "must be >= 0")
        require(self, "seed", self.seed >= 0, "must be >= 0")

    @property
    def title(self) -> str:
        return f"{TITLES[self.method.method]} K={self.method.modules} {self.network} seed {self.seed}"

    def to_dict(self) -> dict:
        """The run-cache key's fields; `data_seed`, `validation`, `fast`, `vgg_init` and `pad_to` only when not
        their defaults, so that runs stored before the fields existed keep their keys."""
        return without_defaults(self, super().to_dict(), ("data_seed", "validation", "fast", "vgg_init", "pad_to"))


# --- the network, its modules and heads --------------------------------------------------------------------


def build_split_network(spec: LocalRunSpec, info) -> tuple[nn.Module, nn.ModuleList, list[nn.Module]]:
    """(model, its K modules, the K − 1 local heads) of a run; the last module's head is `model.head`. The BP-free
    `mlp<L>` (Table 4) and `conv<L>` (its conv reading) want the `etf` head (theirs is one): a module per block.

    Table 7's VGG gets BatchNorm after every conv by default (`vgg_batch_norm`, our choice, against
    `models.vgg_deep`'s default): without it, on Fashion-MNIST at SGR's lr 0.1, VGG-12 stayed at chance
    for 5 epochs under global BP and SGR's local losses blew up to ~3,000 before the ReLUs died (measured
    here), whereas the paper's global BP reaches 90.8 % at d = 12 with the same protocol."""
    from gradalign.methods.infopro import InfoProHead
    from gradalign.models.local_heads import local_head
    from gradalign.models.resnet_cifar import module_channels, resnet32, split_into_modules
    from gradalign.models.vgg_deep import vgg_deep, vgg_module_channels, vgg_modules

    K, classes, kind = spec.method.modules, info.num_classes, spec.method.head_kind
    if spec.network in RESNETS:
        model = resnet32(classes, info.channels, spec.width, plain=RESNETS[spec.network])
        modules, channels = split_into_modules(model, K), module_channels(model, K)
    elif mlp_depth(spec.network) or conv_depth(spec.network):
        args = (spec.network, classes, info.channels, info.image_size, spec.width, K)
        model, modules, channels = bp_free_plainnet(*args)
    else:
        depth = network_depth(spec.network)
        model = vgg_deep(depth, classes, info.channels, spec.width, spec.vgg_batch_norm, spec.vgg_init)
        modules, channels = vgg_modules(model, K), vgg_module_channels(model, K)
    if kind == "infopro":
        size, mean, std = info.image_size, info.mean, info.std
        heads = [InfoProHead(c, classes, info.channels, size, mean, std) for c in channels[:-1]]
    else:
        heads = [local_head(kind, c, classes) for c in channels[:-1]] if K > 1 else []
    return model, modules, heads


# --- the run -----------------------------------------------------------------------------------------------


def _mean_over(sums: dict[str, float], count: int, prefix: str, K: int) -> list[float | None]:
    return [sums[f"{prefix}{k}"] / count if f"{prefix}{k}" in sums else None for k in range(1, K + 1)]


class LocalRun:
    """One local-learning run's state: network, heads, one optimizer per module, the data generator."""

    def __init__(self, spec: LocalRunSpec, data: LocalData, device):
        from gradalign.data.image_sets import image_set_info

        self.spec, self.data, self.device, p = spec, data, torch.device(device), spec.protocol
        with torch.random.fork_rng(devices=[]):  # seeded initialisation; the caller's RNG is untouched
            torch.manual_seed(spec.seed)
            model, modules, heads = build_split_network(spec, image_set_info(spec.dataset))
        self.model, self.modules = prepare_model(model.to(self.device), spec.fast), modules
        self.local_heads = prepare_model(nn.ModuleList(heads).to(self.device), spec.fast)
        self.heads = [*self.local_heads, self.model.head]
        self.optimizers = [
            torch.optim.SGD(
                [*module.parameters(), *head.parameters()], lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay
            )
            for module, head in zip(self.modules, self.heads)
        ]
        self.step_fn = LOCAL_METHODS[spec.method.method]
        self.measure_input_effect = mlp_depth(spec.network) is not None and spec.method.modules > 1  # Figure 3
        self.start_schedule()

    def start_schedule(self) -> None:
        """The epoch schedule and the batch-order / augmentation generator, from the spec's seed."""
        p = self.spec.protocol
        self.steps_per_epoch = len(self.data.images) // p.batch_size
        self.total_steps = self.steps_per_epoch * p.epochs
        self.generator = torch.Generator(self.device).manual_seed(self.spec.seed)
        self.order, self.lr, self.epoch_began = None, p.lr, 0.0
        self.epoch_seconds: list[float] = []

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch i of the epoch's order: augmented, normalised images and labels."""
        p, B = self.spec.protocol, self.spec.protocol.batch_size
        index = self.order[i * B : (i + 1) * B]
        x = crop_flip(self.data.images[index].float() / 255, p.crop_padding, p.flip, self.generator)
        return normalise(x, self.data.mean, self.data.std), self.data.labels[index]

    def step(self, t: int) -> dict[str, torch.Tensor]:
        k = t - 1
        i = k % self.steps_per_epoch
        if i == 0:
            self.order = torch.randperm(len(self.data.images), generator=self.generator, device=self.device)
            self.epoch_began = time.perf_counter()
        self.lr = self.spec.protocol.lr_at(k, self.total_steps)
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = self.lr
        x, y = self.batch(i)
        if not self.measure_input_effect:
            return self.take_step(x, y)
        old = module_inputs(self.modules, x)
        return {**self.take_step(x, y), **input_effect(self.modules, self.heads, x, y, old)}

    def take_step(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """The method's step, on the fast path where the spec asks for it (its diagnostics in float32)."""
        if not self.spec.fast.on:
            return self.step_fn(self.modules, self.heads, self.optimizers, x, y, self.spec.method)
        if self.spec.fast.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast(self.spec.fast, self.device):
            out = self.step_fn(self.modules, self.heads, self.optimizers, x, y, self.spec.method)
        return {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in out.items()}

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict:
        self.epoch_seconds.append(time.perf_counter() - self.epoch_began)
        error, loss = classification_metrics(self.model, self.data.test_x, self.data.test_y)
        K = len(self.optimizers)  # one per module
        sgr = [v for v in _mean_over(sums, count, "sgr_", K) if v is not None]
        return {
            "epoch": t // self.steps_per_epoch,
            "test_acc": 100.0 - error,
            "test_loss": loss,
            "train_loss": sums["loss"] / count,
            "train_acc": 100.0 * sums["acc"] / count,
            "lr": self.lr,
            "sgr": sum(sgr) / len(sgr) if sgr else None,  # the mean over modules 2..K of the epoch's mean
            "sgr_by_module": _mean_over(sums, count, "sgr_", K),
            "local_loss_by_module": _mean_over(sums, count, "local_loss_", K),
            **(
                {"input_effect_by_module": _mean_over(sums, count, "input_effect_", K)}
                if self.measure_input_effect
                else {}
            ),
        }

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "local_heads": self.local_heads.state_dict(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "generator": self.generator.get_state(),
            "order": self.order,
            "epoch_seconds": list(self.epoch_seconds),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.local_heads.load_state_dict(state["local_heads"])
        for opt, saved in zip(self.optimizers, state["optimizers"]):
            opt.load_state_dict(saved)
        # a checkpoint loads to the run's device; torch takes generator states as CPU byte tensors only
        self.generator.set_state(state["generator"].cpu())
        self.order = state["order"]
        self.epoch_seconds = list(state["epoch_seconds"])


def train_local(
    spec: LocalRunSpec,
    device="cpu",
    checkpoint: Path | str | None = None,
    *,
    max_epochs_this_call: int | None = None,
    data: LocalData | None = None,
    make_run=LocalRun,  # or another run on the same batches and evaluation (training.bp_free)
    version: int = RUN_VERSION,
) -> dict:
    """Train one run; checkpointed after every epoch and resumed from `checkpoint` (bitwise on CPU).

    Returns plain Python: the spec, the per-epoch history, the final test accuracy and loss, whether it
    diverged (then `final_test_acc` is chance, 100 / classes: Table 7's "fail"; only where
    `divergence_is_a_result`, else the DivergenceError propagates), the wall time.
    `max_epochs_this_call` stops early after that many epochs (complete = False; for tests and time boxes).
    """
    from gradalign.data.image_sets import image_set_info

    device = torch.device(device)
    if data is None:
        data = local_data(spec.dataset, spec.n_train, spec.n_test, device, spec.data_seed, spec.validation, spec.pad_to)
    run = make_run(spec, data, device)
    classes = image_set_info(spec.dataset).num_classes
    failure = None
    try:
        with flushed_denormals(device):
            out = loop.train(
                run,
                run.total_steps,
                eval_at=loop.every(run.steps_per_epoch, run.total_steps),
                name=spec.title,
                checkpoint=Path(checkpoint) if checkpoint is not None else None,
                run_fingerprint=fingerprint({"spec": spec.to_dict(), "data": data.digest(), "version": version}),
                max_evals=max_epochs_this_call,
                map_location=device,
                chance=() if divergence_is_a_result(spec) else (accuracy_chance("test_acc", classes),),
            )
        history, complete, seconds = out.history, out.complete, out.train_seconds
    except DivergenceError as err:
        if not divergence_is_a_result(spec):
            raise
        failure, history, complete, seconds = str(err), {}, True, sum(run.epoch_seconds)  # Table 7's "fail"
    chance = 100.0 / classes
    return {
        "spec": spec.to_dict(),
        "history": history,
        "complete": complete,
        "diverged": failure,
        "final_test_acc": history["test_acc"][-1] if failure is None else chance,
        "final_test_loss": history["test_loss"][-1] if failure is None else None,
        "best_test_acc": max(history["test_acc"]) if failure is None else chance,
        "epochs_done": len(history.get("test_acc", [])),
        "steps_per_epoch": run.steps_per_epoch,
        "train_seconds": seconds,
        "epoch_seconds": run.epoch_seconds,
        "device": str(device),
    }


def local_unit(spec: LocalRunSpec, device=None) -> Unit:
    """One run as a run-cache unit (kind `sgr.local`, keyed by the spec alone). `device`: where it trains; None:
    chosen where it runs (CUDA when the job sees a GPU)."""
    return Unit(spec.title, RUN_KIND, spec.to_dict(), RUN_VERSION, functools.partial(_train_unit, spec, device))


def _train_unit(spec: LocalRunSpec, device, checkpoint: Path) -> dict:
    from gradalign.runtime import select_device

    return train_local(spec, select_device() if device is None else device, checkpoint)


def local_run(spec: LocalRunSpec, device="cpu") -> dict:
    """One run, from the run cache when it is there."""
    return local_unit(spec, device).run()
