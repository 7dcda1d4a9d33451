"""The data of the local-BP runs (`training.local`, `training.bp_free`): the (subset of the) image set on the device.

The train images stay uint8 (augmented per step on the device); the test images are normalised once with the
recorded channel statistics. Subsets are drawn with the run's data seed (train) and data seed + 1 (test), the
same images for every method and seed. The last data set built is kept (`training.data_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.data.augment import normalise
from gradalign.training.checkpoint import data_digest


@dataclass
class LocalData:
    """Train images uint8 (N, C, H, W) on the device, labels; the normalised test set."""

    images: torch.Tensor
    labels: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def digest(self) -> str:
        return data_digest(self.images, self.labels, self.test_x, self.test_y)


def local_data(
    dataset: str, n_train: int, n_test: int, device, data_seed: int = 0, validation: int = 0, pad_to: int = 0
) -> LocalData:
    """The (subset of the) data set on `device`, test images normalised with the recorded channel statistics;
    the subsets drawn with `data_seed` (train) and `data_seed + 1` (test). `validation` > 0: the evaluation set
    is that many training images held out from the training subset (one permutation drawn with `data_seed`:
    the first `n_train` train, the next `validation` evaluate; 0 train images: all the others), and the test
    split is not read (learning rates and λ are chosen on it: our choice). `pad_to` > 0: every image zero-padded,
    centred, to `pad_to` × `pad_to` pixels before anything else (`pad_images`)."""
    from gradalign.training.data_cache import cached_data

    key = ("local_data", dataset, n_train, n_test, data_seed, str(device), validation, pad_to)
    return cached_data(key, lambda: _local_data(dataset, n_train, n_test, device, data_seed, validation, pad_to))


def pad_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """(N, C, H, W) images zero-padded, centred (the extra pixel of an odd margin at the bottom and right), to
    `size` × `size`: 28-pixel Fashion-MNIST at 32 pixels has CIFAR's geometry (LeNet-5 read MNIST so), and the
    padding is black, its background. The run's random crop then pads the padded image again."""
    from gradalign.errors import ConfigError

    h, w = images.shape[-2:]
    if size < max(h, w):
        raise ConfigError(f"pad_to={size} is smaller than the {h}x{w} images")
    top, left = (size - h) // 2, (size - w) // 2
    return torch.nn.functional.pad(images, (left, size - w - left, top, size - h - top))


def _split_validation(images, labels, n_train: int, validation: int, seed: int):
    from gradalign.errors import ConfigError

    n_train = n_train or len(images) - validation
    if n_train <= 0 or n_train + validation > len(images):
        raise ConfigError(f"{n_train:,} training + {validation:,} validation images exceed the {len(images):,} held")
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    train, held = order[:n_train], order[n_train : n_train + validation]
    return images[train], labels[train], images[held], labels[held]


def _local_data(
    dataset: str, n_train: int, n_test: int, device, data_seed: int, validation: int = 0, pad_to: int = 0
) -> LocalData:
    from gradalign.data.image_sets import image_set_info, load_image_set, random_subset

    info = image_set_info(dataset)
    if validation:
        images, labels, test_images, test_labels = _split_validation(
            *load_image_set(dataset, "train"), n_train, validation, data_seed
        )
    else:
        images, labels = random_subset(*load_image_set(dataset, "train"), n_train, data_seed)
        test_images, test_labels = random_subset(*load_image_set(dataset, "test"), n_test, data_seed + 1)
    if pad_to:
        images, test_images = pad_images(images, pad_to), pad_images(test_images, pad_to)
    test_x = normalise(test_images.float() / 255, info.mean, info.std)
    return LocalData(
        images.to(device), labels.to(device), test_x.to(device), test_labels.to(device), info.mean, info.std
    )
