import gzip
import struct

import pytest
import torch

from gradalign.data.fashion_mnist import DEBIAN_DIR, FILES, load_fashion_mnist, prepare_fashion_mnist
from gradalign.errors import DataNotFoundError


def _write_idx(path, tensor, gz=False):
    """IDX format: big-endian magic (0x08 = ubyte, number of dims), the dims, then the bytes."""
    header = struct.pack(">I", 0x0800 | tensor.dim()) + b"".join(struct.pack(">I", d) for d in tensor.shape)
    data = header + tensor.to(torch.uint8).numpy().tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def _tiny_split(folder, gz, n=7):
    folder.mkdir(parents=True, exist_ok=True)
    images = torch.randint(0, 256, (n, 28, 28), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    labels = torch.arange(n, dtype=torch.uint8) % 10
    suffix = ".gz" if gz else ""
    for prefix in ("train", "t10k"):
        _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, gz)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, gz)
    return images, labels


def test_loads_tiny_idx_files_through_torchvision(tmp_path, monkeypatch):
    images, labels = _tiny_split(tmp_path / "FashionMNIST" / "raw", gz=False)
    monkeypatch.setenv("GRADALIGN_DATA", str(tmp_path))
    x, y = load_fashion_mnist(train=True)
    assert torch.equal(x, images) and torch.equal(y, labels.long())


def test_prepares_from_gzipped_package_files(tmp_path):
    images, labels = _tiny_split(tmp_path / "debian", gz=True)
    raw = prepare_fashion_mnist(tmp_path / "root", source=tmp_path / "debian")
    assert sorted(p.name for p in raw.iterdir()) == sorted(FILES)
    x, y = load_fashion_mnist(train=False, root=tmp_path / "root")
    assert torch.equal(x, images) and torch.equal(y, labels.long())


def test_missing_data_is_a_one_line_error(tmp_path, monkeypatch):
    import gradalign.data.fashion_mnist as fm

    monkeypatch.setattr(fm, "DEBIAN_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(fm.prepare_fashion_mnist, "__defaults__", (None, tmp_path / "nowhere"))
    with pytest.raises(DataNotFoundError) as err:
        load_fashion_mnist(root=tmp_path / "empty")
    assert "dataset-fashion-mnist" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(
    not (DEBIAN_DIR / "train-images-idx3-ubyte.gz").exists(),
    reason="Debian package dataset-fashion-mnist not installed (make data installs it)",
)
def test_real_fashion_mnist(tmp_path):
    x, y = load_fashion_mnist(train=True, root=tmp_path)
    assert x.shape == (60000, 28, 28) and x.dtype == torch.uint8
    assert torch.bincount(y).tolist() == [6000] * 10
    x_test, y_test = load_fashion_mnist(train=False, root=tmp_path)
    assert x_test.shape == (10000, 28, 28) and torch.bincount(y_test).tolist() == [1000] * 10


def test_torchvision_guard_gives_working_transforms():
    from gradalign.vision import import_torchvision

    tv = import_torchvision()
    out = tv.transforms.functional.hflip(torch.arange(6.0).reshape(1, 2, 3))
    assert out.tolist() == [[[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]]
