"""Loaders of CIFAR-10/100, SVHN, STL-10 on tiny files written in the real on-disk layouts.

Each test writes images with the byte layout of the official files, then checks that a pixel written
for image i, channel c, row r, column k comes back at [i, c, r, k].
"""

import pickle
import struct

import numpy as np
import pytest
import torch

from gradalign.data import image_sets
from gradalign.data.image_sets import (
    IMAGE_SETS,
    MalformedDataError,
    channel_mean_std,
    image_set_info,
    load_cifar10,
    load_cifar100,
    load_image_set,
    load_stl10,
    load_svhn,
)
from gradalign.errors import ConfigError, DataNotFoundError


def _random_images(n, size, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, 3, size, size), dtype=np.uint8)


def _write_cifar_batch(path, images, labels, label_key="labels"):
    """One pickled dict; each row of `data` is the red, green, blue 32x32 planes, row-major."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"batch_label": "tiny", "data": images.reshape(len(images), 3072), label_key: list(labels)}
    path.write_bytes(pickle.dumps(entry, protocol=2))


def _write_cifar10(root, n=4):
    written = {}
    for seed, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        images, labels = _random_images(n, 32, seed), [(seed + j) % 10 for j in range(n)]
        _write_cifar_batch(root / "cifar-10-batches-py" / name, images, labels)
        written[name] = images, labels
    return written


def test_cifar10_pixels_and_labels(tmp_path):
    written = _write_cifar10(tmp_path)
    x, y = load_cifar10("train", root=tmp_path)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    expected = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert torch.equal(x, torch.from_numpy(expected))
    assert y.tolist() == sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    x_test, y_test = load_cifar10("test", root=tmp_path)
    assert torch.equal(x_test, torch.from_numpy(written["test_batch"][0]))
    assert y_test.tolist() == written["test_batch"][1]


def test_cifar_row_layout_is_channel_then_row_then_column(tmp_path):
    rows = np.zeros((2, 3072), dtype=np.uint8)
    i, c, r, k = 1, 2, 5, 7
    rows[i, c * 1024 + r * 32 + k] = 255
    _write_cifar_batch(tmp_path / "cifar-100-python" / "test", rows, [3, 99], label_key="fine_labels")
    x, y = load_cifar100("test", root=tmp_path)
    assert x.shape == (2, 3, 32, 32) and x[i, c, r, k] == 255 and x.sum() == 255
    assert y.tolist() == [3, 99]


def _write_svhn(path, images, labels):
    """MATLAB file as in the official set: X (32, 32, 3, N) indexed [row, col, channel, image], y (N, 1)."""
    from scipy.io import savemat

    savemat(str(path), {"X": images.transpose(2, 3, 1, 0), "y": np.asarray(labels, dtype=np.float64)[:, None]})


def test_svhn_pixels_and_label_10_is_digit_0(tmp_path):
    images = _random_images(5, 32, 0)
    images[3, 1, 4, 9] = 7  # X[4, 9, 1, 3] in the file
    _write_svhn(tmp_path / "extra_32x32.mat", images, [10, 1, 2, 9, 10])
    from scipy.io import loadmat

    assert loadmat(str(tmp_path / "extra_32x32.mat"))["X"][4, 9, 1, 3] == 7
    x, y = load_svhn("extra", root=tmp_path)
    assert x.shape == (5, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert torch.equal(x, torch.from_numpy(images)) and x[3, 1, 4, 9] == 7
    assert y.tolist() == [0, 1, 2, 9, 0]


def _stl10_bytes(images):
    """Raw STL-10 layout: image by image, channel by channel, each 96x96 plane stored column by column."""
    return images.transpose(0, 1, 3, 2).tobytes()


def test_stl10_column_major_pixels_and_labels(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    images = _random_images(3, 96, 0)
    (folder / "train_X.bin").write_bytes(_stl10_bytes(images))
    (folder / "train_y.bin").write_bytes(bytes([1, 10, 5]))
    x, y = load_stl10("train", root=tmp_path)
    assert x.shape == (3, 3, 96, 96) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert torch.equal(x, torch.from_numpy(images)) and y.tolist() == [0, 9, 4]

    # One lit byte at the offset the format gives pixel (image 1, channel 2, row 3, column 50).
    raw = bytearray(2 * 3 * 96 * 96)
    i, c, r, k = 1, 2, 3, 50
    raw[((i * 3 + c) * 96 + k) * 96 + r] = 200
    (folder / "unlabeled_X.bin").write_bytes(bytes(raw))
    x, y = load_stl10("unlabeled", root=tmp_path)
    assert x[i, c, r, k] == 200 and x.sum() == 200 and y.tolist() == [-1, -1]


def test_dispatcher_gives_every_set_as_nchw(tmp_path):
    _write_cifar10(tmp_path)
    _write_svhn(tmp_path / "test_32x32.mat", _random_images(2, 32, 1), [10, 3])
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    fm_images = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    for prefix in ("train", "t10k"):  # IDX: big-endian magic 0x0803/0x0801, the dims, the bytes
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x0803, 3, 28, 28) + fm_images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x0801, 3) + bytes([4, 0, 9]))
    x, y = load_image_set("fashion_mnist", "test", root=tmp_path)
    assert x.shape == (3, 1, 28, 28) and torch.equal(x[:, 0], torch.from_numpy(fm_images)) and y.tolist() == [4, 0, 9]
    assert load_image_set("cifar10", "test", root=tmp_path)[0].shape == (4, 3, 32, 32)
    assert load_image_set("svhn", "test", root=tmp_path)[1].tolist() == [0, 3]
    for name, info in IMAGE_SETS.items():
        assert info.channels == len(info.mean or (0,) * info.channels) and info.num_classes in (10, 100)


def test_missing_file_is_one_line_naming_the_path(tmp_path):
    _write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataNotFoundError) as err:
        load_cifar10("train", root=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_3") in message and "download=True" in message
    assert "\n" not in message
    for name, split in [("svhn", "train"), ("stl10", "test"), ("cifar100", "train")]:
        with pytest.raises(DataNotFoundError, match="download=True") as err:
            load_image_set(name, split, root=tmp_path / "empty")
        assert str(tmp_path / "empty") in str(err.value) and "\n" not in str(err.value)


def test_data_root_from_environment(tmp_path, monkeypatch):
    _write_cifar10(tmp_path)
    monkeypatch.setenv("GRADALIGN_DATA", str(tmp_path))
    assert load_cifar10("test")[0].shape == (4, 3, 32, 32)


def test_malformed_files_are_one_line_errors(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    (folder / "test_X.bin").write_bytes(bytes(1000))
    (folder / "test_y.bin").write_bytes(bytes([1]))
    with pytest.raises(MalformedDataError, match="test_X.bin") as err:
        load_stl10("test", root=tmp_path)
    assert "\n" not in str(err.value)
    (folder / "test_X.bin").write_bytes(bytes(3 * 96 * 96))
    (folder / "test_y.bin").write_bytes(bytes([0]))  # labels start at 1
    with pytest.raises(MalformedDataError, match="1..10"):
        load_stl10("test", root=tmp_path)
    _write_cifar_batch(tmp_path / "cifar-100-python" / "train", _random_images(2, 32, 0), [1, 2])  # no fine_labels
    with pytest.raises(MalformedDataError, match="fine_labels") as err:
        load_cifar100("train", root=tmp_path)
    assert "\n" not in str(err.value)


def test_unknown_name_or_split_lists_the_choices():
    with pytest.raises(ConfigError, match="cifar10, cifar100, svhn, stl10") as err:
        load_image_set("imagenet", "train")
    assert "fashion_mnist" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="train, test, extra"):
        load_image_set("svhn", "valid")
    assert image_set_info("stl10").image_size == 96 and image_set_info("cifar100").num_classes == 100


def test_download_calls_torchvision_once_then_reads_the_files(tmp_path, monkeypatch):
    calls = []

    class FakeCIFAR10:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            _write_cifar10(tmp_path)

    fake_torchvision = type("tv", (), {"datasets": type("ds", (), {"CIFAR10": FakeCIFAR10})})
    monkeypatch.setattr(image_sets, "import_torchvision", lambda: fake_torchvision)
    x, _ = load_cifar10("train", root=tmp_path, download=True)
    x_again, _ = load_cifar10("train", root=tmp_path, download=True)
    assert calls == [(str(tmp_path), False, True)] and torch.equal(x, x_again) and x.shape == (20, 3, 32, 32)


def test_channel_stats_computed_when_not_recorded(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    images = np.zeros((2, 3, 96, 96), dtype=np.uint8)
    images[:, 1] = 255
    images[0, 2] = 255
    (folder / "train_X.bin").write_bytes(_stl10_bytes(images))
    (folder / "train_y.bin").write_bytes(bytes([1, 2]))
    mean, std = channel_mean_std("stl10", root=tmp_path, chunk=1)
    assert mean == pytest.approx((0.0, 1.0, 0.5)) and std == pytest.approx((0.0, 0.0, 0.5))
    assert channel_mean_std("cifar10")[0] == IMAGE_SETS["cifar10"].mean


# --- label ranges and empty files ------------------------------------------------------------------------------


def test_cifar_labels_out_of_range_are_refused(tmp_path):
    _write_cifar10(tmp_path)
    _write_cifar_batch(tmp_path / "cifar-10-batches-py" / "test_batch", _random_images(3, 32, 0), [1, 200, 3])
    with pytest.raises(MalformedDataError, match=r"test_batch holds label 200 at index 1; expected 0\.\.9"):
        load_cifar10("test", root=tmp_path)
    _write_cifar_batch(tmp_path / "cifar-100-python" / "test", _random_images(2, 32, 0), [5, 100], "fine_labels")
    with pytest.raises(MalformedDataError, match=r"holds label 100 at index 1; expected 0\.\.99"):
        load_cifar100("test", root=tmp_path)
    _write_cifar_batch(tmp_path / "cifar-100-python" / "train", _random_images(2, 32, 0), [-1, 3], "fine_labels")
    with pytest.raises(MalformedDataError, match="holds label -1 at index 0"):
        load_cifar100("train", root=tmp_path)


def test_empty_or_cut_cifar_pickles_are_refused(tmp_path):
    _write_cifar10(tmp_path)
    _write_cifar_batch(tmp_path / "cifar-10-batches-py" / "test_batch", np.zeros((0, 3, 32, 32), np.uint8), [])
    with pytest.raises(MalformedDataError, match="holds no images"):
        load_cifar10("test", root=tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(MalformedDataError, match="data_batch_3 is not a CIFAR pickle"):
        load_cifar10("train", root=tmp_path)
    path.unlink()
    path.mkdir()  # a folder where the file should be
    with pytest.raises(MalformedDataError, match="data_batch_3 cannot be read"):
        load_cifar10("train", root=tmp_path)


def test_svhn_labels_out_of_range_and_cut_files_are_refused(tmp_path):
    _write_svhn(tmp_path / "test_32x32.mat", _random_images(3, 32, 0), [1, 11, 2])
    with pytest.raises(MalformedDataError, match=r"holds label 11\.0 at index 1; expected 1\.\.10"):
        load_svhn("test", root=tmp_path)
    _write_svhn(tmp_path / "train_32x32.mat", _random_images(3, 32, 0), [1, 0, 2])
    with pytest.raises(MalformedDataError, match=r"holds label 0\.0 at index 1"):
        load_svhn("train", root=tmp_path)
    _write_svhn(tmp_path / "extra_32x32.mat", _random_images(3, 32, 0), [1, 2, 3])
    raw = (tmp_path / "extra_32x32.mat").read_bytes()
    for cut in (0, 10, 100, 300, len(raw) // 2):
        (tmp_path / "extra_32x32.mat").write_bytes(raw[:cut])
        with pytest.raises(MalformedDataError, match="extra_32x32.mat is not an SVHN .mat file"):
            load_svhn("extra", root=tmp_path)


def test_stl10_empty_and_out_of_range_files_are_refused(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    (folder / "test_X.bin").write_bytes(b"")
    (folder / "test_y.bin").write_bytes(b"")
    with pytest.raises(MalformedDataError, match="test_X.bin: 0 bytes"):
        load_stl10("test", root=tmp_path)
    (folder / "train_X.bin").write_bytes(_stl10_bytes(_random_images(2, 96, 0)))
    (folder / "train_y.bin").write_bytes(bytes([1, 11]))
    with pytest.raises(MalformedDataError, match="expected 2 labels in 1..10"):
        load_stl10("train", root=tmp_path)


def test_a_subset_larger_than_the_split_is_refused_not_capped():
    images, labels = torch.zeros(5, 1, 2, 2, dtype=torch.uint8), torch.arange(5)
    assert image_sets.random_subset(images, labels, 0, 0)[0].shape[0] == 5
    assert image_sets.random_subset(images, labels, 5, 0)[0].shape[0] == 5
    assert image_sets.random_subset(images, labels, 3, 0)[0].shape[0] == 3
    with pytest.raises(ConfigError, match="asked for 6 images of a split that holds 5"):
        image_sets.random_subset(images, labels, 6, 0)
