"""ImageNet streamed from disk for the ImageNet presets (sgr.tab2, sgr.tab5, metagrad.tab3), one rank's
share of every global batch, resumable.

Layout: torchvision's ImageFolder, `<root>/train/<wnid>/*.JPEG` and `<root>/val/<wnid>/*.JPEG` (the validation
images sorted into class folders, as the PyTorch ImageNet example expects). Decoding with PIL in DataLoader
worker processes; the images never sit in memory together.

Transforms (the standard ImageNet recipe, Goyal et al. / the PyTorch example, which App. E's recipes build on):
training: RandomResizedCrop(size, scale (0.08, 1)), horizontal flip, ToTensor, Normalize(ImageNet mean, std);
evaluation: Resize(size · 8/7) (256 for 224), CenterCrop(size), ToTensor, Normalize.

Order and randomness (`RankStream`): epoch e visits the training images in the permutation drawn from
seed + e, the same on every rank, cut into global batches of `global_batch` (the last incomplete one dropped);
rank r of a world of W takes rows [r·B/W, (r+1)·B/W) of each global batch, so the ranks together see exactly
the batch one process would. Each image's augmentation is drawn from a generator seeded by (seed, epoch, index),
inside the worker that loads it: the images a run sees do not depend on the number of workers or ranks, and a
resumed stream (its state: epoch and batches delivered) delivers the same batches as one never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from gradalign.errors import ConfigError, DataNotFoundError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
"""ImageNet's per-channel mean and std (torchvision's pretrained-model convention)."""


def imagenet_root(data_root: str = "") -> Path:
    """Where ImageNet is: `data_root` when given, else `$GRADALIGN_DATA/imagenet` (or `./data/imagenet`)."""
    from gradalign.data.fashion_mnist import data_root as default_root

    return Path(data_root) if data_root else default_root() / "imagenet"


def imagenet_split(
    root: str | Path,
    split: str,
    size: int,
    crop_scale: tuple[float, float] = (0.08, 1.0),
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
):
    """torchvision ImageFolder of `<root>/<split>` with the split's transform (`crop_scale`, `crop_ratio`: the
    training crop's area fraction and aspect ratio); DataNotFoundError when the folder is absent."""
    from gradalign.data.vision import import_torchvision

    if split not in ("train", "val"):
        raise ConfigError(f"split must be 'train' or 'val'; got {split!r}")
    folder = Path(root) / split
    if not folder.is_dir() or not any(p.is_dir() for p in folder.iterdir()):
        raise DataNotFoundError(
            f"no ImageNet {split} images at {folder}: put ILSVRC-2012 there in ImageFolder layout "
            f"({split}/<wnid>/*.JPEG), or set data_root"
        )
    transforms = import_torchvision().transforms
    if split == "train":
        steps = [transforms.RandomResizedCrop(size, crop_scale, crop_ratio), transforms.RandomHorizontalFlip()]
    else:
        steps = [transforms.Resize(round(size * 8 / 7)), transforms.CenterCrop(size)]
    transform = transforms.Compose([*steps, transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    return import_torchvision().datasets.ImageFolder(str(folder), transform=transform)


class SeededImages(torch.utils.data.Dataset):
    """Item (epoch, index): image `index` of `images`, its random transform drawn from (seed, epoch, index)."""

    def __init__(self, images, seed: int):
        self.images, self.seed = images, seed

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, item: tuple[int, int]):
        epoch, index = item
        with torch.random.fork_rng(devices=[]):  # torchvision's transforms draw from the global generator
            torch.manual_seed(((self.seed * 1_000_003 + epoch) * 1_000_000_007 + index) % 2**63)
            return self.images[index]


class RankStream:
    """This rank's batches of the training images, epoch after epoch (module docstring); `next()` gives
    (images, labels) on the CPU; `state_dict` / `load_state_dict` resume it."""

    def __init__(
        self, images, global_batch: int, rank: int, world_size: int, seed: int, workers: int = 8, pin_memory=False
    ):
        if global_batch < world_size or global_batch % world_size:
            raise ConfigError(f"global batch {global_batch} does not split evenly over {world_size} processes")
        if len(images) < global_batch:
            raise ConfigError(f"a global batch of {global_batch} needs at least as many images; have {len(images)}")
        self.data = SeededImages(images, seed)
        self.global_batch, self.rank, self.world_size, self.seed = global_batch, rank, world_size, seed
        self.workers, self.pin_memory = workers, pin_memory
        self.epoch, self.delivered = 0, 0  # batches of this epoch already returned by next()
        self._batches = None

    @property
    def batches_per_epoch(self) -> int:
        return len(self.data) // self.global_batch

    def _index_batches(self) -> Iterator[list[tuple[int, int]]]:
        share = self.global_batch // self.world_size
        epoch, start = self.epoch, self.delivered
        while True:
            order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.seed + epoch))
            for b in range(start, self.batches_per_epoch):
                rows = order[b * self.global_batch :][self.rank * share : (self.rank + 1) * share]
                yield [(epoch, int(i)) for i in rows]
            epoch, start = epoch + 1, 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._batches is None:
            loader = torch.utils.data.DataLoader(
                self.data,
                batch_sampler=self._index_batches(),
                num_workers=self.workers,
                pin_memory=self.pin_memory,
            )
            self._batches = iter(loader)
        batch = next(self._batches)
        self.delivered += 1
        if self.delivered == self.batches_per_epoch:
            self.epoch, self.delivered = self.epoch + 1, 0
        return batch[0], batch[1]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "delivered": self.delivered}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.delivered = int(state["epoch"]), int(state["delivered"])
        self._batches = None  # the next batch comes from a loader that starts at the restored place


def class_balanced_split(targets: list[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(labeled, unlabeled) indices: `fraction` of each class's images (rounded, at least one) drawn with `seed`,
    the rest unlabeled; disjoint, as SemiMeta's code splits (book/appendix/protocols.md)."""
    if not 0 < fraction < 1:
        raise ConfigError(f"the labeled fraction must be in (0, 1); got {fraction}")
    by_class: dict[int, list[int]] = {}
    for i, c in enumerate(targets):
        by_class.setdefault(int(c), []).append(i)
    generator, labeled = torch.Generator().manual_seed(seed), []
    for c in sorted(by_class):
        members = by_class[c]
        order = torch.randperm(len(members), generator=generator).tolist()
        labeled += [members[i] for i in order[: max(1, round(fraction * len(members)))]]
    chosen = set(labeled)
    return sorted(labeled), [i for i in range(len(targets)) if i not in chosen]


def rank_indices(n: int, rank: int, world_size: int) -> range:
    """The evaluation images of one rank: every world_size-th, starting at `rank` (together: each once)."""
    return range(rank, n, world_size)
