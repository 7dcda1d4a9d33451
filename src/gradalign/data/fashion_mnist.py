"""Fashion-MNIST through torchvision, found offline.

Where we look, in order: `root` if given, `$GRADALIGN_DATA`, `data/` of the checkout. torchvision
reads the gunzipped IDX files from `<root>/FashionMNIST/raw/`; when they are missing there but the
Debian package `dataset-fashion-mnist` is installed (`/usr/share/datasets/fashion-mnist/*.gz`),
`prepare_fashion_mnist` unpacks them. Otherwise a one-line `DataNotFoundError` says how to get them.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from gradalign.environment import project_root
from gradalign.errors import DataNotFoundError

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def data_root(root: str | Path | None = None) -> Path:
    return Path(root or os.environ.get("GRADALIGN_DATA") or project_root() / "data")


def raw_dir(root: str | Path | None = None) -> Path:
    return data_root(root) / "FashionMNIST" / "raw"


def prepare_fashion_mnist(root: str | Path | None = None, source: Path = DEBIAN_DIR) -> Path | None:
    """Unpack the Debian package's .gz files into `<root>/FashionMNIST/raw/`; None if none found."""
    raw = raw_dir(root)
    if all((raw / name).exists() for name in FILES):
        return raw
    if not all((source / f"{name}.gz").exists() for name in FILES):
        return None
    raw.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        tmp = raw / f"{name}.tmp"
        with gzip.open(source / f"{name}.gz", "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        tmp.replace(raw / name)
    return raw


def load_fashion_mnist(train: bool = True, root: str | Path | None = None, download: bool = False):
    """(images uint8 (N, 28, 28), labels int64 (N,)) as tensors; the whole split fits in memory."""
    from gradalign.vision import import_torchvision

    datasets = import_torchvision().datasets
    root = data_root(root)
    if not download and prepare_fashion_mnist(root) is None:
        raise DataNotFoundError(
            f"Fashion-MNIST not found in {raw_dir(root)}: install the Debian package dataset-fashion-mnist "
            f"(apt-get install dataset-fashion-mnist), copy the four IDX files there, set GRADALIGN_DATA, "
            f"or pass download=True"
        )
    ds = datasets.FashionMNIST(str(root), train=train, download=download)
    return ds.data, ds.targets
