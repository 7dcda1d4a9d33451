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
    from gradalign.data.vision import import_torchvision

    tv = import_torchvision()
    out = tv.transforms.functional.hflip(torch.arange(6.0).reshape(1, 2, 3))
    assert out.tolist() == [[[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]]


# --- corrupt IDX files: one line naming the file, never a traceback from torchvision --------------------------


def _corrupt(raw, name, change):
    path = raw / name
    path.write_bytes(change(path.read_bytes()))
    return path


IDX_DAMAGE = {  # name: (file, change(bytes), split, the start of the reason)
    "images truncated": ("train-images-idx3-ubyte", lambda b: b[:-100], True, "is cut short"),
    "images cut inside the header": ("train-images-idx3-ubyte", lambda b: b[:9], True, "cut short inside its header"),
    "images bad magic": ("train-images-idx3-ubyte", lambda b: b"\x00\x00\x08\x01" + b[4:], True, "has magic number"),
    "images not bytes": ("train-images-idx3-ubyte", lambda b: b"\x00\x00\x0d\x03" + b[4:], True, "has magic number"),
    "images with trailing bytes": ("train-images-idx3-ubyte", lambda b: b + b"\x00", True, "bytes beyond its data"),
    "labels short": ("train-labels-idx1-ubyte", lambda b: b[:-3], True, "is cut short"),
    "labels bad magic": ("train-labels-idx1-ubyte", lambda b: b"\x00\x00\x08\x03" + b[4:], True, "has magic number"),
    "labels fewer than images": (
        "train-labels-idx1-ubyte",
        lambda b: struct.pack(">II", 0x0801, 5) + b[8:13],
        True,
        "holds 5 labels for the 7 images",
    ),
    "labels out of range": (
        "t10k-labels-idx1-ubyte",
        lambda b: b[:8] + bytes([200]) * (len(b) - 8),
        False,
        "label 200",
    ),
    "empty test images": ("t10k-images-idx3-ubyte", lambda b: b"", False, "is empty"),
    "empty test labels": ("t10k-labels-idx1-ubyte", lambda b: b"", False, "is empty"),
    "no images": (
        "t10k-images-idx3-ubyte",
        lambda b: struct.pack(">IIII", 0x0803, 0, 28, 28),
        False,
        "holds no images",
    ),
    "wrong image size": (
        "train-images-idx3-ubyte",
        lambda b: struct.pack(">IIII", 0x0803, 7, 28 * 28, 1) + b[16:],
        True,
        "not 28 x 28",
    ),
    "three bytes": ("train-images-idx3-ubyte", lambda b: b[:3], True, "not even a magic number"),
}


@pytest.mark.parametrize("name", IDX_DAMAGE)
def test_corrupt_idx_file_is_one_line_naming_it(tmp_path, name):
    from gradalign.data.fashion_mnist import MalformedDataError

    file, change, train, reason = IDX_DAMAGE[name]
    raw = tmp_path / "FashionMNIST" / "raw"
    _tiny_split(raw, gz=False)
    path = _corrupt(raw, file, change)
    with pytest.raises(MalformedDataError) as err:
        load_fashion_mnist(train=train, root=tmp_path)
    message = str(err.value)
    assert message.startswith(str(path)) and reason in message and "\n" not in message


def test_corrupt_data_through_the_cli_is_one_line_and_no_record(tmp_path, monkeypatch, capsys):
    from gradalign.cli import main

    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    _tiny_split(raw, gz=False)
    _corrupt(raw, "train-labels-idx1-ubyte", lambda b: b[:-2])
    monkeypatch.setenv("GRADALIGN_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    assert main(["run", "sgr.tab4", "--preset", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train-labels-idx1-ubyte is cut short" in err and "Traceback" not in err
    assert not list((tmp_path / "results").rglob("*.json"))


def test_truncated_package_archive_is_one_line(tmp_path):
    from gradalign.data.fashion_mnist import MalformedDataError

    _tiny_split(tmp_path / "debian", gz=True)
    archive = tmp_path / "debian" / "t10k-images-idx3-ubyte.gz"
    archive.write_bytes(archive.read_bytes()[:-20])
    with pytest.raises(MalformedDataError, match="is not a whole gzip file"):
        prepare_fashion_mnist(tmp_path / "root", source=tmp_path / "debian")
    assert not list((tmp_path / "root").rglob("*.tmp"))
