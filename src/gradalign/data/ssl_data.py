"""The data of one semi-supervised run: split, preprocessed and resident on the training device.

Oliver et al.'s protocol (book/appendix/protocols.md): a seeded validation split, class-balanced labeled images, an
unlabeled stream that includes the labeled images. Preprocessing: CIFAR per-image global contrast
normalisation then ZCA fitted on the training images; SVHN, and Fashion-MNIST (our choice, the LGA
paper does not say), scaled to [−1, 1]. `n_pool` < all: the unlabeled pool is the labeled images plus a
seeded random subset of the others (the `smoke`/`cpu` presets, so that LGA's per-image labels w are
visited often enough in a short run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gradalign.data.image_sets import image_set_info, load_image_set
from gradalign.data.preprocess import fit_zca, global_contrast_normalize
from gradalign.data.ssl_augment import SSLAugment
from gradalign.data.ssl_split import ssl_split
from gradalign.errors import ConfigError


@dataclass
class SSLData:
    """Preprocessed float images on the training device; the unlabeled pool includes the labeled images."""

    x_labeled: torch.Tensor
    y_labeled: torch.Tensor
    x_unlabeled: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    augment: SSLAugment
    num_classes: int
    description: dict = field(default_factory=dict)
    y_unlabeled: torch.Tensor | None = None  # the pool's true labels: for diagnostics only, never read by a method


def preprocess(name: str, train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    """uint8 (N, C, H, W) → float32, by the data set's rule; statistics from `train` only."""
    if name.startswith("cifar"):
        train_f = global_contrast_normalize(train.float())
        zca = fit_zca(train_f, regularization=0.1)
        return [zca.apply(train_f)] + [zca.apply(global_contrast_normalize(x.float())) for x in others]
    return [x.float().div(127.5).sub(1.0) for x in (train, *others)]


def subset(indices: torch.Tensor, n: int | None, seed: int, keep: torch.Tensor | None = None) -> torch.Tensor:
    """`keep` plus a seeded random choice of the other `indices`, n in all (all of them when n is None). More than
    there are is refused, not capped (configs check this before any data loads; this is the last guard)."""
    if n is not None and n > len(indices):
        raise ConfigError(f"asked for {n:,} images of {len(indices):,}; sizes are refused, not capped")
    if n is None or n == len(indices):
        return indices
    rest = indices if keep is None else indices[~torch.isin(indices, keep)]
    n_keep = 0 if keep is None else len(keep)
    if n < n_keep:
        raise ConfigError(f"an unlabeled pool of {n} cannot hold the {n_keep} labeled images")
    pick = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed))[: n - n_keep]]
    return torch.cat([keep, pick]).sort().values if keep is not None else pick.sort().values


def prepare_ssl_data(
    name: str,
    n_labeled: int,
    n_validation: int,
    seed: int,
    device="cpu",
    n_pool: int | None = None,
    n_test: int | None = None,
    root=None,
) -> SSLData:
    info = image_set_info(name)
    images, labels = load_image_set(name, "train", root=root)
    test_images, test_labels = load_image_set(name, "test", root=root)
    split = ssl_split(labels, n_labeled, n_validation, seed, info.num_classes)
    pool = subset(split.unlabeled, n_pool, seed + 7, keep=split.labeled)
    test = subset(torch.arange(len(test_images)), n_test, seed + 11)
    train_f, test_f = preprocess(name, images, test_images[test])
    device = torch.device(device)
    move = lambda t: t.to(device).contiguous()  # noqa: E731
    return SSLData(
        move(train_f[split.labeled]),
        move(labels[split.labeled]),
        move(train_f[pool]),
        move(train_f[split.validation]),
        move(labels[split.validation]),
        move(test_f),
        move(test_labels[test]),
        SSLAugment.for_dataset(name),
        info.num_classes,
        {
            "dataset": info.title,
            "labeled": n_labeled,
            "unlabeled_pool": len(pool),
            "validation": n_validation,
            "test": len(test),
        },
        move(labels[pool]),
    )
