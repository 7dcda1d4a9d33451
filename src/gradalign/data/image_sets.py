"""Image classification sets read straight from torchvision's on-disk layouts.

Every loader returns `(images uint8 (N, C, H, W), labels int64 (N,))` as tensors. The files are read
here, not through torchvision's dataset classes, because those verify MD5 checksums of the whole
archive. torchvision is used only for `download=True`: its class fetches and unpacks the official
archive into `root` once, then our reader takes over. The data root is found like Fashion-MNIST's:
`root` if given, `$GRADALIGN_DATA`, `data/` of the checkout.

Layouts read (as torchvision's download leaves them under `root`):

- CIFAR-10 `cifar-10-batches-py/{data_batch_1..5, test_batch}`, CIFAR-100 `cifar-100-python/{train,
  test}`: Python pickles of a dict with `data` (N x 3072 uint8, each row the red, green, blue planes
  of a 32 x 32 image, row-major) and `labels` (CIFAR-10) or `fine_labels` (CIFAR-100). Pickles can
  run code when loaded: only read files from a source you trust.
- SVHN `{train,test,extra}_32x32.mat`: MATLAB v5 files with `X` (32, 32, 3, N) and `y` (N, 1), the
  digit 0 stored as label 10.
- STL-10 `stl10_binary/{train,test,unlabeled}_X.bin`: raw uint8, N x 3 x 96 x 96 with each channel
  stored column by column (so the last two axes are swapped on disk); `{train,test}_y.bin`: one byte
  per image, labels 1..10. The unlabeled split gets labels of -1.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gradalign.sizes import DATA_SPLITS
from gradalign.data.fashion_mnist import MalformedDataError, data_root, load_fashion_mnist
from gradalign.errors import ConfigError, DataNotFoundError, GradalignError
from gradalign.data.vision import import_torchvision

__all__ = ["MalformedDataError", "load_image_set", "IMAGE_SETS", "TRAIN_SIZES"]


@dataclass(frozen=True)
class ImageSetInfo:
    """What a model and its input normalisation need to know about a data set.

    `mean`/`std` are per-channel on pixels scaled to [0, 1], computed over the training split; None
    where no standard value is recorded here (use `channel_mean_std`, which computes them).
    """

    name: str
    title: str
    num_classes: int
    channels: int
    image_size: int
    splits: tuple[str, ...]
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    homepage: str

    @property
    def chance_accuracy(self) -> float:
        """The accuracy (%) of a uniform guess over the classes: the chance level verdicts and charts read."""
        return 100.0 / self.num_classes


IMAGE_SETS = {
    info.name: info
    for info in (
        ImageSetInfo(
            "fashion_mnist",
            "Fashion-MNIST",
            10,
            1,
            28,
            ("train", "test"),
            (0.2860,),
            (0.3530,),
            "github.com/zalandoresearch/fashion-mnist",
        ),
        ImageSetInfo(
            "cifar10",
            "CIFAR-10",
            10,
            3,
            32,
            ("train", "test"),
            (0.4914, 0.4822, 0.4465),
            (0.2470, 0.2435, 0.2616),
            "www.cs.toronto.edu/~kriz/cifar.html",
        ),
        ImageSetInfo(
            "cifar100",
            "CIFAR-100",
            100,
            3,
            32,
            ("train", "test"),
            (0.5071, 0.4865, 0.4409),
            (0.2673, 0.2564, 0.2762),
            "www.cs.toronto.edu/~kriz/cifar.html",
        ),
        ImageSetInfo(
            "svhn",
            "SVHN",
            10,
            3,
            32,
            ("train", "test", "extra"),
            (0.4377, 0.4438, 0.4728),
            (0.1980, 0.2010, 0.1970),
            "ufldl.stanford.edu/housenumbers",
        ),
        ImageSetInfo(
            "stl10", "STL-10", 10, 3, 96, ("train", "test", "unlabeled"), None, None, "cs.stanford.edu/~acoates/stl10"
        ),
    )
}


TRAIN_SIZES = {name: splits["train"] for name, splits in DATA_SPLITS.items()}
"""Images in each training split (labeled), to check label counts before any data is read."""


def image_set_info(name: str) -> ImageSetInfo:
    if name not in IMAGE_SETS:
        raise ConfigError(f"unknown image set {name!r}; choose one of {', '.join(IMAGE_SETS)}")
    return IMAGE_SETS[name]


def _check_split(name: str, split: str) -> None:
    splits = image_set_info(name).splits
    if split not in splits:
        raise ConfigError(f"{name} has no split {split!r}; choose one of {', '.join(splits)}")


def _require(paths: list[Path], name: str, download, root: Path) -> None:
    """Run `download(root)` if a file is missing and it is given, else say which file is missing."""
    missing = [p for p in paths if not p.exists()]
    if missing and download is not None:
        try:
            download(str(root))
        except (OSError, RuntimeError) as err:
            reason = " ".join(str(err).split())
            raise DataNotFoundError(f"downloading {image_set_info(name).title} into {root} failed: {reason}") from None
        missing = [p for p in paths if not p.exists()]
    if missing:
        info = image_set_info(name)
        raise DataNotFoundError(
            f"{info.title} file {missing[0]} not found: pass download=True (torchvision fetches it from "
            f"{info.homepage}), copy the unpacked files there, or set GRADALIGN_DATA to their parent"
        )


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels.astype(np.int64))


def _read_cifar_pickle(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")  # written by Python 2
        data, labels = np.asarray(entry["data"]), np.asarray(entry[label_key])
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise MalformedDataError(f"{path} is not a CIFAR pickle with 'data' and {label_key!r} ({err!r})") from None
    except (OSError, ImportError) as err:
        raise MalformedDataError(f"{path} cannot be read as a CIFAR pickle ({type(err).__name__}: {err})") from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels.shape != (len(data),):
        raise MalformedDataError(
            f"{path}: expected 'data' uint8 (N, 3072) and N labels, got {data.dtype} {data.shape} and {labels.shape}"
        )
    if len(data) == 0:
        raise MalformedDataError(f"{path} holds no images")
    return data, labels


def _check_labels(path: Path, labels: np.ndarray, low: int, high: int) -> None:
    """Integer labels in [low, high], else a one-line MalformedDataError naming the file and the first bad one."""
    if not np.issubdtype(labels.dtype, np.integer) and not (
        np.issubdtype(labels.dtype, np.floating) and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels))
    ):
        raise MalformedDataError(f"{path}: labels of type {labels.dtype} are not whole numbers")
    bad = (labels < low) | (labels > high)
    if bad.any():
        i = int(np.argmax(bad))
        raise MalformedDataError(f"{path} holds label {labels[i]} at index {i}; expected {low}..{high}")


def _load_cifar(name: str, folder: str, files: list[str], label_key: str, root, fetch):
    root = data_root(root)
    paths = [root / folder / file for file in files]
    _require(paths, name, fetch, root)
    parts = [_read_cifar_pickle(path, label_key) for path in paths]
    for path, (_, labels) in zip(paths, parts):
        _check_labels(path, labels, 0, image_set_info(name).num_classes - 1)
    data = np.concatenate([data for data, _ in parts])
    labels = np.concatenate([labels for _, labels in parts])
    return _tensors(data.reshape(-1, 3, 32, 32), labels)


def load_cifar10(split: str = "train", root: str | Path | None = None, download: bool = False):
    """CIFAR-10 from `<root>/cifar-10-batches-py/`: train is data_batch_1..5 (50000), test is test_batch."""
    _check_split("cifar10", split)
    files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    fetch = (lambda r: import_torchvision().datasets.CIFAR10(r, train=False, download=True)) if download else None
    return _load_cifar("cifar10", "cifar-10-batches-py", files, "labels", root, fetch)


def load_cifar100(split: str = "train", root: str | Path | None = None, download: bool = False):
    """CIFAR-100 from `<root>/cifar-100-python/{train,test}`, with the 100 fine labels."""
    _check_split("cifar100", split)
    fetch = (lambda r: import_torchvision().datasets.CIFAR100(r, train=False, download=True)) if download else None
    return _load_cifar("cifar100", "cifar-100-python", [split], "fine_labels", root, fetch)


def load_svhn(split: str = "train", root: str | Path | None = None, download: bool = False):
    """SVHN cropped digits from `<root>/{split}_32x32.mat`; label 10 (the digit 0) becomes 0."""
    _check_split("svhn", split)
    root = data_root(root)
    path = root / f"{split}_32x32.mat"
    fetch = (lambda r: import_torchvision().datasets.SVHN(r, split=split, download=True)) if download else None
    _require([path], "svhn", fetch, root)
    try:
        from scipy.io import loadmat
    except ImportError:
        raise GradalignError("reading SVHN needs scipy: pip install scipy") from None
    from scipy.io.matlab import MatReadError

    try:
        mat = loadmat(str(path))
        images, labels = np.asarray(mat["X"]), np.asarray(mat["y"]).astype(np.int64).reshape(-1)
    except (KeyError, ValueError, TypeError, OSError, IndexError, EOFError, MatReadError) as err:
        raise MalformedDataError(f"{path} is not an SVHN .mat file with 'X' and 'y' ({err!r})") from None
    if images.ndim != 4 or images.shape[:3] != (32, 32, 3) or labels.shape != (images.shape[3],):
        raise MalformedDataError(
            f"{path}: expected X (32, 32, 3, N) and y (N, 1), got {images.shape} and {labels.shape}"
        )
    if images.shape[3] == 0:
        raise MalformedDataError(f"{path} holds no images")
    _check_labels(path, np.asarray(mat["y"]).reshape(-1), 1, 10)
    labels[labels == 10] = 0
    # X[row, col, channel, image] -> (image, channel, row, col)
    return _tensors(images.astype(np.uint8).transpose(3, 2, 0, 1), labels)


STL10_PIXELS = 3 * 96 * 96


def load_stl10(split: str = "train", root: str | Path | None = None, download: bool = False):
    """STL-10 from `<root>/stl10_binary/{split}_X.bin` (+ `{split}_y.bin`); labels 0..9, -1 when unlabeled."""
    _check_split("stl10", split)
    root = data_root(root)
    image_path = root / "stl10_binary" / f"{split}_X.bin"
    label_path = None if split == "unlabeled" else root / "stl10_binary" / f"{split}_y.bin"
    # One archive holds every split: fetch it through the small test split.
    fetch = (lambda r: import_torchvision().datasets.STL10(r, split="test", download=True)) if download else None
    _require([p for p in (image_path, label_path) if p is not None], "stl10", fetch, root)
    raw = _read_bytes(image_path)
    if raw.size == 0 or raw.size % STL10_PIXELS:
        raise MalformedDataError(f"{image_path}: {raw.size} bytes is not a whole number of 3x96x96 images")
    # On disk each channel is column-major: (image, channel, col, row) -> swap the last two axes.
    images = raw.reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)
    if label_path is None:
        return _tensors(images, np.full(len(images), -1))
    labels = _read_bytes(label_path).astype(np.int64)
    if labels.shape != (len(images),) or labels.min() < 1 or labels.max() > 10:
        raise MalformedDataError(
            f"{label_path}: expected {len(images)} labels in 1..10, got {labels.size} "
            f"in {labels.min(initial=0)}..{labels.max(initial=0)}"
        )
    return _tensors(images, labels - 1)


def _read_bytes(path: Path) -> np.ndarray:
    try:
        return np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        raise MalformedDataError(f"{path} cannot be read ({err.strerror or err})") from None


def _load_fashion_mnist_nchw(split: str = "train", root=None, download: bool = False):
    _check_split("fashion_mnist", split)
    images, labels = load_fashion_mnist(train=split == "train", root=root, download=download)
    return images.unsqueeze(1), labels.long()


LOADERS = {
    "fashion_mnist": _load_fashion_mnist_nchw,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "svhn": load_svhn,
    "stl10": load_stl10,
}


def load_image_set(name: str, split: str = "train", root: str | Path | None = None, download: bool = False):
    """(images uint8 (N, C, H, W), labels int64 (N,)) of one split of a named set (see `IMAGE_SETS`)."""
    image_set_info(name)
    return LOADERS[name](split, root=root, download=download)


def channel_mean_std(
    name: str, root: str | Path | None = None, download: bool = False, chunk: int = 1000
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of pixels in [0, 1]: the recorded values, else computed on the train split."""
    info = image_set_info(name)
    if info.mean is not None and info.std is not None:
        return info.mean, info.std
    images, _ = load_image_set(name, "train", root=root, download=download)
    total = torch.zeros(info.channels, dtype=torch.float64)
    total_sq = torch.zeros(info.channels, dtype=torch.float64)
    for start in range(0, len(images), chunk):
        pixels = images[start : start + chunk].double().div_(255)
        total += pixels.sum(dim=(0, 2, 3))
        total_sq += pixels.square().sum(dim=(0, 2, 3))
    count = images.numel() / info.channels
    mean = total / count
    std = (total_sq / count - mean.square()).clamp_min(0).sqrt()
    return tuple(mean.tolist()), tuple(std.tolist())


def random_subset(images: torch.Tensor, labels: torch.Tensor, n: int, seed: int):
    """`n` images drawn without replacement (seeded); all of them when n is 0 or the set's size. More than the
    set holds is refused (configs check their sizes before any data loads; this is the last guard)."""
    if n > len(images):
        raise ConfigError(
            f"asked for {n:,} images of a split that holds {len(images):,}; sizes are refused, not capped"
        )
    if n == 0 or n == len(images):
        return images, labels
    keep = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:n]
    return images[keep], labels[keep]


def load_pretraining_data(name: str, train_subset: int, test_subset: int, seed: int):
    """(train images, train labels, test images, test labels) for self-supervised pretraining: STL-10's
    training split also holds its 100,000 unlabeled images (labels -1); subsets drawn with seed, seed + 1."""
    train = load_image_set(name, "train")
    if name == "stl10":
        extra = load_image_set(name, "unlabeled")
        train = (torch.cat([train[0], extra[0]]), torch.cat([train[1], extra[1]]))
    test = load_image_set(name, "test")
    return random_subset(*train, train_subset, seed) + random_subset(*test, test_subset, seed + 1)
