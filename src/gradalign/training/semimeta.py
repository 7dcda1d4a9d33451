"""Semi-supervised training with meta-gradient pseudo labels on the one loop: SemiMeta's protocol (Zhang et
al. 2020, App. C; the official `train_meta.py`, book/appendix/protocols.md).

- Data: a class-balanced labeled set and a *disjoint* unlabeled set, drawn with the run's data seed; per-channel
  mean/std normalisation (no ZCA); random crop with zero padding 4, plus a horizontal flip except on SVHN (kept
  on Fashion-MNIST, our choice, as for SGR). One augmented view per image per step feeds every pass.
- Batches: 128 labeled + 128 unlabeled; each stream an endless concatenation of independent reshuffles.
- SGD, momentum 0.9 (not Nesterov), weight decay on every parameter (BN included), lr 0.1 with a linear
  warm-up over the first 1 % of the steps (4,000 of 400k), × 0.1 at 75 % and 87.5 % (300k, 350k); the
  consistency weight ramped up linearly over the warm-up. The meta step uses the scheduled lr as α = β.
- Evaluation every `eval_every` steps (400 in the code): the test error, which the paper reports at its best
  (no validation split), and the error on a held-out validation split of the training images, which the book
  uses to select a test error as well (our addition: both are shown, each named).

Finished runs live in the run cache (kind `metagrad.ssl`), keyed by their `SemiMetaRunSpec`, so the ablation,
Table 1 and the t-SNE figure share runs. At the end of a run the pooled features (Conv-Large's last channels: 128-d
at width 1, 16-d at ×0.125) of a sample of labeled, unlabeled and test images are embedded in 2-D by t-SNE
(scikit-learn) for Figure 3, and the labeled and unlabeled features are compared by their squared MMD
(`analysis.feature_mmd`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from gradalign.models.conv_large import DROPOUT as CONV_LARGE_DROPOUT  # Table 6 and the authors' model.py
from gradalign.config import Settings, require
from gradalign.data.augment import normalise
from gradalign.data.crop_flip import crop_flip
from gradalign.methods.divergence import error_chance
from gradalign.methods.semimeta import VARIANTS, SemiMetaSettings, semimeta_step
from gradalign.store.run_unit import Unit
from gradalign.training import loop
from gradalign.training.checkpoint import data_digest, fingerprint
from gradalign.training.evaluate import classification_metrics
from gradalign.training.streams import IndexStream

PSEUDO_DIAGNOSTICS = ("pseudo_update", "pseudo_changed")  # methods.semimeta.pseudo_label_update
RUN_KIND = "metagrad.ssl"
RUN_VERSION = 1


@dataclass(frozen=True)
class SemiMetaProtocol(Settings):
    steps: int = 400_000
    batch_labeled: int = 128
    batch_unlabeled: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float | None = None  # None: the data set's (App. C: 5e-5 on SVHN, 1e-4 elsewhere)
    warmup_fraction: float = 0.01  # 4,000 of 400,000 steps
    decay_at: tuple[float, ...] = (0.75, 0.875)  # 300k, 350k of 400k
    decay: float = 0.1
    eval_every: int = 400
    crop_padding: int = 4
    flip: bool | None = None  # None: the data set's (App. C: no flips on SVHN; flips elsewhere)

    def validate(self) -> None:
        for name in ("steps", "eval_every"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("batch_labeled", "batch_unlabeled"):
            require(self, name, getattr(self, name) >= 2, "must be >= 2 (BatchNorm in training mode)")
        require(self, "lr", self.lr > 0, "must be > 0")
        require(self, "momentum", 0 <= self.momentum < 1, "must be in [0, 1)")
        ok = self.weight_decay is None or self.weight_decay >= 0
        require(self, "weight_decay", ok, "must be >= 0 (or null: the data set's)")
        require(self, "warmup_fraction", 0 <= self.warmup_fraction < 1, "must be in [0, 1)")
        require(self, "decay_at", all(0 < d <= 1 for d in self.decay_at), "must be fractions in (0, 1]")
        require(self, "decay", 0 < self.decay <= 1, "must be in (0, 1]")
        require(self, "crop_padding", self.crop_padding >= 0, "must be >= 0")

    def for_dataset(self, dataset: str) -> SemiMetaProtocol:
        """The protocol with the data set's defaults (App. C) where a field is None; a value set by hand stays."""
        svhn = dataset == "svhn"
        return replace(
            self,
            weight_decay=(5e-5 if svhn else 1e-4) if self.weight_decay is None else self.weight_decay,
            flip=(not svhn) if self.flip is None else self.flip,
        )

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup_fraction * self.steps)

    def lr_at(self, step: int) -> float:
        """The code's `compute_lr` at 0-based `step`: linear warm-up from 0, then × decay past each milestone."""
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        return self.lr * self.decay ** sum(step > d * self.steps for d in self.decay_at)

    def ramp(self, step: int) -> float:
        """The consistency weight's factor: linear over the warm-up (the code's `compute_weight`), then 1."""
        return min(1.0, step / self.warmup_steps) if self.warmup_steps else 1.0


@dataclass(frozen=True)
class SemiMetaRunSpec(Settings):
    """Everything one training run depends on (its run-cache key)."""

    method: SemiMetaSettings = SemiMetaSettings(gamma=1.0)
    protocol: SemiMetaProtocol = SemiMetaProtocol(weight_decay=1e-4, flip=True)
    dataset: str = "fashion_mnist"
    n_labeled: int = 1000
    n_unlabeled: int = 0  # 0: every training image not labeled and not in the validation split
    n_validation: int = 5000
    n_test: int = 0  # 0: the whole test split
    width: float = 1.0  # the model's channels × this
    data_seed: int = 0  # the split (the code's README seeds: SVHN 7788, CIFAR-10 8469)
    seed: int = 0  # initialisation, batch order, augmentation, mixup
    tsne_points: int = 300  # per set (labeled, unlabeled, test) for Figure 3; 0: none
    model: str = "conv_large"  # a key of MODELS (Table 2: shake_shake26); not in the key when Conv-Large
    dropout: float | None = None  # Conv-Large's Dropout2d rate; None: the paper's 0.5 (not in the key then)

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        require(self, "model", self.model in MODELS, f"must be one of {tuple(MODELS)}")
        require(self, "method.gamma", self.method.gamma is not None, "must be set (a config resolves it per data set)")
        for name in ("weight_decay", "flip"):
            require(self, f"protocol.{name}", getattr(self.protocol, name) is not None, "must be set (see for_dataset)")
        require(self, "width", self.model != "resnet18" or self.width == 1, "must be 1 for resnet18 (torchvision's)")
        require(self, "n_labeled", self.n_labeled >= self.protocol.batch_labeled, "must be >= protocol.batch_labeled")
        ok = self.n_unlabeled == 0 or self.n_unlabeled >= self.protocol.batch_unlabeled
        require(self, "n_unlabeled", ok, "must be 0 or >= protocol.batch_unlabeled")
        require(self, "n_validation", self.n_validation >= 0, "must be >= 0")
        require(self, "n_test", self.n_test >= 0, "must be >= 0")
        require(self, "width", self.width > 0, "must be > 0")
        require(self, "tsne_points", self.tsne_points >= 0, "must be >= 0")
        if self.dropout is not None:
            require(self, "dropout", 0 <= self.dropout < 1, "must lie in [0, 1)")
            require(self, "dropout", self.model == "conv_large", f"is Conv-Large's; {self.model} has no dropout layer")
        if self.method.mixup:
            same = self.protocol.batch_labeled == self.protocol.batch_unlabeled
            require(self, "protocol.batch_unlabeled", same, "must equal batch_labeled with mixup (pairs, Eq. 12)")

    def to_dict(self) -> dict:
        """The run-cache key's fields; `model` only when it is not Conv-Large, so that the runs stored before
        the field existed keep their keys."""
        out = super().to_dict()
        if self.model == "conv_large":
            del out["model"]
        if self.dropout in (None, CONV_LARGE_DROPOUT):  # the paper's rate: stored runs keep their keys
            del out["dropout"]
        return out

    @property
    def title(self) -> str:
        return f"{VARIANTS[self.method.variant][0]} {self.n_labeled} labels seed {self.seed}"


def _conv_large(classes: int, channels: int, width: float, dropout: float | None = None):
    from gradalign.models.conv_large import ConvLarge

    return ConvLarge(classes, channels, width, CONV_LARGE_DROPOUT if dropout is None else dropout)


def _shake_shake(classes: int, channels: int, width: float):
    from gradalign.models.shake_shake import ShakeShake26

    return ShakeShake26(classes, channels, width)


def _resnet18(classes: int, channels: int, width: float):
    from gradalign.models.resnet18 import ResNet18

    if width != 1:
        raise ValueError(f"ResNet-18 comes at width 1 only (torchvision's); got width {width}")
    return ResNet18(classes, channels)


# name -> (classes, input channels, width) -> a module with `features` and `head`
MODELS = {"conv_large": _conv_large, "shake_shake26": _shake_shake, "resnet18": _resnet18}


@dataclass
class SemiMetaData:
    """uint8 train images on the device, split; normalised validation and test sets; the channel statistics."""

    x_labeled: torch.Tensor
    y_labeled: torch.Tensor
    x_unlabeled: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: int

    def digest(self) -> str:
        return data_digest(self.x_labeled, self.y_labeled, self.x_unlabeled, self.x_val, self.x_test)


def semimeta_data(spec: SemiMetaRunSpec, device) -> SemiMetaData:
    """The split of Zhang et al.: labeled (class-balanced) and unlabeled disjoint, plus our validation split.
    The last split made is kept in memory: an experiment's runs share it across seeds and variants."""
    from gradalign.training.data_cache import cached_data

    key = (spec.dataset, spec.n_labeled, spec.n_unlabeled, spec.n_validation, spec.n_test, spec.data_seed, str(device))
    return cached_data((RUN_KIND, *key), lambda: _split_data(spec, device))


def _split_data(spec: SemiMetaRunSpec, device) -> SemiMetaData:
    from gradalign.data.image_sets import image_set_info, load_image_set, random_subset
    from gradalign.data.ssl_split import ssl_split

    info = image_set_info(spec.dataset)
    images, labels = load_image_set(spec.dataset, "train")
    test_images, test_labels = random_subset(*load_image_set(spec.dataset, "test"), spec.n_test, spec.data_seed + 1)
    split = ssl_split(labels, spec.n_labeled, spec.n_validation, spec.data_seed, info.num_classes)
    unlabeled = split.unlabeled[~torch.isin(split.unlabeled, split.labeled)]
    if spec.n_unlabeled:
        pick = torch.randperm(len(unlabeled), generator=torch.Generator().manual_seed(spec.data_seed + 2))
        unlabeled = unlabeled[pick[: spec.n_unlabeled]].sort().values
    device = torch.device(device)

    def norm(x):
        return normalise(x.float() / 255, info.mean, info.std).to(device)

    return SemiMetaData(
        images[split.labeled].to(device),
        labels[split.labeled].to(device),
        images[unlabeled].to(device),
        norm(images[split.validation]),
        labels[split.validation].to(device),
        norm(test_images),
        test_labels.to(device),
        info.mean,
        info.std,
        info.num_classes,
    )


class SemiMetaRun:
    """One run's state: the model (Conv-Large unless the spec names another), its SGD optimizer, the two index
    streams and the augmentation generator."""

    resumes_between_evaluations = True  # the state holds all a step reads: the loop may stop it at any step

    def __init__(self, spec: SemiMetaRunSpec, data: SemiMetaData, device):
        from gradalign.data.image_sets import image_set_info

        self.spec, self.data, self.device, p = spec, data, torch.device(device), spec.protocol
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            extra = {} if spec.dropout is None else {"dropout": spec.dropout}
            model = MODELS[spec.model](data.classes, image_set_info(spec.dataset).channels, spec.width, **extra)
            self.model = model.to(self.device)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay
        )
        self.labeled = IndexStream(len(data.x_labeled), p.batch_labeled, spec.seed)
        self.unlabeled = IndexStream(len(data.x_unlabeled), p.batch_unlabeled, spec.seed + 1)
        self.generator = torch.Generator(self.device).manual_seed(spec.seed)
        self.lr = 0.0

    def view(self, x: torch.Tensor) -> torch.Tensor:
        p, d = self.spec.protocol, self.data
        return normalise(crop_flip(x.float() / 255, p.crop_padding, p.flip, self.generator), d.mean, d.std)

    def step(self, t: int) -> dict[str, torch.Tensor]:
        p, d = self.spec.protocol, self.data
        self.lr = p.lr_at(t - 1)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        i_l, i_u = self.labeled.next().to(self.device), self.unlabeled.next().to(self.device)
        x_l, x_u = self.view(d.x_labeled[i_l]), self.view(d.x_unlabeled[i_u])
        return semimeta_step(
            self.model, self.optimizer, x_l, d.y_labeled[i_l], x_u, self.lr, p.ramp(t - 1), self.spec.method, d.classes
        )

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict[str, float]:
        test_error, test_loss = classification_metrics(self.model, self.data.x_test, self.data.y_test)
        values = {"test_error": test_error, "test_loss": test_loss, "train_loss": sums["loss"] / count, "lr": self.lr}
        for name in PSEUDO_DIAGNOSTICS:  # the meta variants: the pseudo-label update, averaged since the last one
            if name in sums:
                values[name] = sums[name] / count
        if len(self.data.x_val):
            values["val_error"], values["val_loss"] = classification_metrics(
                self.model, self.data.x_val, self.data.y_val
            )
        return values

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "labeled": self.labeled.state_dict(),
            "unlabeled": self.unlabeled.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.labeled.load_state_dict(state["labeled"])
        self.unlabeled.load_state_dict(state["unlabeled"])
        self.generator.set_state(
            state["generator"].cpu()
        )  # a checkpoint loads to the run's device; torch takes generator states as CPU byte tensors only


def tsne_embedding(run: SemiMetaRun, points: int) -> dict:
    """Figure 3: 2-D t-SNE of the pooled features of `points` labeled, unlabeled and test images (the first
    `points` of each set, un-augmented, eval mode), with the classes of the labeled and test points; the silhouette
    score of the test features by class in the pooled-feature space (its dimension is the model's `feature_dim`:
    128 at Conv-Large's width 1, 16 at ×0.125), how well they cluster; and the squared MMD between the labeled and
    the unlabeled features in that space with its permutation p-value (`analysis.feature_mmd`: Gaussian kernel at
    the median distance), how far apart the two sets' features lie (runs trained before it have none)."""
    from gradalign.analysis.feature_mmd import feature_mmd
    from sklearn.manifold import TSNE
    from sklearn.metrics import silhouette_score
    from threadpoolctl import threadpool_limits

    d, model = run.data, run.model
    pick = slice(0, points)
    sets = {
        "labeled": (normalise(d.x_labeled[pick].float() / 255, d.mean, d.std), d.y_labeled[pick]),
        "unlabeled": (normalise(d.x_unlabeled[pick].float() / 255, d.mean, d.std), None),
        "test": (d.x_test[pick], d.y_test[pick]),
    }
    model.eval()
    with torch.no_grad():
        feats = torch.cat([model.features(x) for x, _ in sets.values()]).double().cpu().numpy()
    model.train()
    tsne = TSNE(2, perplexity=min(30.0, (len(feats) - 1) / 3), init="pca", random_state=run.spec.seed)
    with threadpool_limits(1):  # scikit-learn's OpenMP beside torch's: 100x slower in a Jupyter kernel here
        xy = tsne.fit_transform(feats)
    n_l, n_u = len(sets["labeled"][0]), len(sets["unlabeled"][0])
    test_y = sets["test"][1].cpu().numpy()
    out, start = {"test_silhouette": float(silhouette_score(feats[n_l + n_u :], test_y))}, 0
    out["labeled_unlabeled_mmd"] = feature_mmd(feats[:n_l], feats[n_l : n_l + n_u])
    for name, (x, y) in sets.items():
        n = len(x)
        out[name] = {"xy": xy[start : start + n].round(3).tolist(), "y": None if y is None else y.cpu().tolist()}
        start += n
    return out


def train_semimeta(spec: SemiMetaRunSpec, device="cpu", checkpoint: Path | str | None = None) -> dict:
    """Train one run; checkpointed at every evaluation and resumed from `checkpoint` (bitwise on CPU).

    Inside a command's time box the loop stops it at the evaluation where the box would overrun (or at the first
    step past the box), checkpointed, and raises `TimeBoxSpent`; a NaN, an exploded loss or a test error back at
    chance is a `DivergenceError`."""
    data = semimeta_data(spec, device)
    run = SemiMetaRun(spec, data, device)
    run.model.train()
    torch.manual_seed(spec.seed)  # dropout and mixup draw from the global generator (checkpointed by the loop)
    out = loop.train(
        run,
        spec.protocol.steps,
        eval_at=loop.every(spec.protocol.eval_every, spec.protocol.steps),
        name=spec.title,
        checkpoint=Path(checkpoint) if checkpoint is not None else None,
        run_fingerprint=fingerprint({"spec": spec.to_dict(), "data": data.digest(), "version": RUN_VERSION}),
        map_location=run.device,
        chance=(error_chance("test_error", data.classes),),
    )
    h = out.history
    labeled = normalise(data.x_labeled.float() / 255, data.mean, data.std)
    labeled_error, _ = classification_metrics(run.model, labeled, data.y_labeled)  # eval mode, the final model
    best = min(range(len(h["step"])), key=lambda i: h["test_error"][i])
    selected = min(range(len(h["step"])), key=lambda i: h["val_error"][i]) if "val_error" in h else None
    return {
        "spec": spec.to_dict(),
        "history": h,
        "best_test_error": h["test_error"][best],  # the paper's number: the best test accuracy over training
        "best_test_step": h["step"][best],
        "selected_test_error": h["test_error"][selected] if selected is not None else None,  # at the best val error
        "selected_step": h["step"][selected] if selected is not None else None,
        "final_test_error": h["test_error"][-1],
        "labeled_error": labeled_error,  # does it fit its own labeled training set?
        "tsne": tsne_embedding(run, spec.tsne_points) if spec.tsne_points else None,
        "train_seconds": out.train_seconds,
        "device": str(run.device),
    }


def semimeta_unit(spec: SemiMetaRunSpec, device=None) -> Unit:
    """One run as a run-cache unit (kind `metagrad.ssl`, keyed by the spec alone). `device`: where it trains;
    None: chosen where it runs (CUDA when the job sees a GPU)."""
    return Unit(spec.title, RUN_KIND, spec.to_dict(), RUN_VERSION, functools.partial(_train_unit, spec, device))


def _train_unit(spec: SemiMetaRunSpec, device, checkpoint: Path) -> dict:
    from gradalign.runtime import select_device

    return train_semimeta(spec, select_device() if device is None else device, checkpoint)


def semimeta_run(spec: SemiMetaRunSpec, device="cpu") -> dict:
    """One run, from the run cache when it is there."""
    return semimeta_unit(spec, device).run()
