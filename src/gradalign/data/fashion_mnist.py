"""Fashion-MNIST through torchvision, found offline.

Where we look, in order: `root` if given, `$GRADALIGN_DATA` (set but empty is refused), `data/` of the checkout.
torchvision reads the gunzipped IDX files from `<root>/FashionMNIST/raw/`; when they are missing there but the
Debian package `dataset-fashion-mnist` is installed (`/usr/share/datasets/fashion-mnist/*.gz`),
`prepare_fashion_mnist` unpacks them (a failed write leaves no partial file). Otherwise a one-line
`DataNotFoundError` says how to get them.

The IDX files are read and validated here (`read_idx`), not by torchvision: the magic number (unsigned bytes,
3 dimensions for images, 1 for labels), the image size (28 x 28), the file's length against its header (a
file cut short or with bytes beyond its data), at least one image, as many labels as images, and labels in
0..9. Anything else is a one-line `MalformedDataError` naming the file. torchvision is used only to download.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import zlib
from pathlib import Path

import numpy as np

from gradalign.environment import project_root
from gradalign.errors import DataNotFoundError, GradalignError
from gradalign.store.store_root import env_folder

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


class MalformedDataError(GradalignError, ValueError):
    """A data file exists but does not have the layout we read."""


IDX_UBYTE = 0x08
IMAGE_SHAPE = (28, 28)


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """The unsigned-byte array of the IDX file at `path`, which must have `ndim` dimensions; every byte of the
    file accounted for by its header. MalformedDataError (one line, naming the file) otherwise."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise MalformedDataError(f"{path} cannot be read ({err.strerror or err})") from None
    if not raw:
        raise MalformedDataError(f"{path} is empty (0 bytes); copy the IDX file again")
    if len(raw) < 4:
        raise MalformedDataError(f"{path} is cut short ({len(raw)} bytes, not even a magic number)")
    zero, kind, dims = int.from_bytes(raw[:2], "big"), raw[2], raw[3]
    if zero != 0 or kind != IDX_UBYTE or dims != ndim:
        raise MalformedDataError(
            f"{path} has magic number 0x{int.from_bytes(raw[:4], 'big'):08x}, expected 0x{(IDX_UBYTE << 8) | ndim:08x} "
            f"(IDX, unsigned bytes, {ndim} dimension{'s' if ndim > 1 else ''}): not a Fashion-MNIST "
            f"{'image' if ndim == 3 else 'label'} file"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise MalformedDataError(f"{path} is cut short inside its header ({len(raw)} of {header} bytes)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected:
        what = "is cut short" if len(raw) < expected else "has bytes beyond its data"
        raise MalformedDataError(
            f"{path} {what}: its header says {' x '.join(map(str, shape))} values ({expected:,} bytes), "
            f"the file has {len(raw):,} bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def read_split(raw: Path, train: bool):
    """(images uint8 (N, 28, 28), labels int64 (N,)) of one split from the IDX files in `raw`, validated."""
    import torch

    prefix = "train" if train else "t10k"
    image_path, label_path = raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"
    images, labels = read_idx(image_path, 3), read_idx(label_path, 1)
    if images.shape[1:] != IMAGE_SHAPE:
        raise MalformedDataError(f"{image_path} holds images of {images.shape[1]} x {images.shape[2]}, not 28 x 28")
    if len(images) == 0:
        raise MalformedDataError(f"{image_path} holds no images")
    if len(labels) != len(images):
        raise MalformedDataError(
            f"{label_path} holds {len(labels):,} labels for the {len(images):,} images of {image_path.name}"
        )
    if labels.max() >= len(CLASSES):
        bad = int(np.argmax(labels >= len(CLASSES)))
        raise MalformedDataError(
            f"{label_path} holds label {int(labels[bad])} at index {bad}; Fashion-MNIST labels are 0..9"
        )
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def data_root(root: str | Path | None = None) -> Path:
    """`root` when given, else `$GRADALIGN_DATA`, else `data/` of the checkout; an empty GRADALIGN_DATA is a one-line
    ConfigError (`store_root.env_folder`, the rule of every folder variable), never read as unset."""
    return Path(root or env_folder("GRADALIGN_DATA", "./data") or project_root() / "data")


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
        try:
            with gzip.open(source / f"{name}.gz", "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(raw / name)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # BadGzipFile is an OSError: caught first
            _remove(tmp)
            raise MalformedDataError(
                f"{source / name}.gz is not a whole gzip file ({err}); reinstall the package"
            ) from None
        except OSError:  # a full disk, a read-only folder: no partial file left behind
            _remove(tmp)
            raise
    return raw


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def load_fashion_mnist(train: bool = True, root: str | Path | None = None, download: bool = False):
    """(images uint8 (N, 28, 28), labels int64 (N,)) as tensors; the whole split fits in memory."""
    from gradalign.data.vision import import_torchvision

    datasets = import_torchvision().datasets
    root = data_root(root)
    if not download and prepare_fashion_mnist(root) is None:
        raise DataNotFoundError(
            f"Fashion-MNIST not found in {raw_dir(root)}: install the Debian package dataset-fashion-mnist "
            f"(apt-get install dataset-fashion-mnist), copy the four IDX files there, set GRADALIGN_DATA, "
            f"or pass download=True"
        )
    raw = raw_dir(root)
    if download and not all((raw / name).exists() for name in FILES):
        datasets.FashionMNIST(str(root), train=train, download=True)
    return read_split(raw, train)
