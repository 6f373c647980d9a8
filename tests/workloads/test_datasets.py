"""The dataset loaders of workloads/ (mnist.py, idx.py, cifar10.py, synthetic.py, datasets.py): the bundled
MNIST split, a user's MNIST and CIFAR-10 files and what is refused of them, synthetic data (CPU, fast)."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import workloads
from workloads import DatasetFormatError, build_dataset

MNIST_DIR = Path(workloads.__file__).resolve().parent / "data" / "mnist"
MNIST_TEST_CLASS_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


# ---------------------------------------------------------------- helpers (independent of the code under test)


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    """An IDX file: 0, 0, type 0x08 (ubyte), ndim, big-endian uint32 dims, data."""
    data = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    data += struct.pack(f">{array.ndim}I", *array.shape) + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)


def read_bundled_images() -> np.ndarray:
    raw = gzip.decompress((MNIST_DIR / "t10k-images-idx3-ubyte.gz").read_bytes())
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(10000, 28, 28)


def write_mnist_dir(directory: Path, rng: np.random.Generator, n_train: int = 20, n_test: int = 7) -> dict:
    parts = {}
    for prefix, n, compress in (("train", n_train, True), ("t10k", n_test, False)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        suffix = ".gz" if compress else ""
        write_idx(directory / f"{prefix}-images-idx3-ubyte{suffix}", images, compress)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte{suffix}", labels, compress)
        parts[prefix] = (images, labels)
    return parts


# ---------------------------------------------------------------- MNIST, bundled split


@pytest.fixture(scope="module")
def mnist() -> workloads.DatasetPair:
    return build_dataset("mnist")


def test_bundled_mnist_shapes_and_dtypes(mnist):
    assert mnist.train.x.shape == (8000, 1, 28, 28) and mnist.test.x.shape == (2000, 1, 28, 28)
    assert mnist.train.x.dtype == torch.float32 and mnist.train.y.dtype == torch.int64
    assert mnist.test.x.dtype == torch.float32 and mnist.test.y.dtype == torch.int64
    assert mnist.input_shape == (1, 28, 28) and mnist.num_classes == 10
    assert len(mnist.train) == 8000 and len(mnist.test) == 2000


def test_bundled_mnist_normalised(mnist):
    # A black pixel (0) maps to -mean/std, a white one (255) to (1-mean)/std.
    assert mnist.train.x.min().item() == pytest.approx(-MNIST_MEAN / MNIST_STD, abs=1e-5)
    assert mnist.train.x.max().item() == pytest.approx((1 - MNIST_MEAN) / MNIST_STD, abs=1e-5)


def test_bundled_mnist_class_counts_add_up(mnist):
    counts = torch.bincount(mnist.train.y, minlength=10) + torch.bincount(mnist.test.y, minlength=10)
    assert counts.tolist() == MNIST_TEST_CLASS_COUNTS
    # A random 80/20 split keeps every class in both parts.
    assert (torch.bincount(mnist.test.y, minlength=10) > 100).all()


def test_bundled_mnist_split_is_deterministic_and_ignores_seed(mnist):
    again = build_dataset("mnist", seed=123)
    for a, b in ((mnist.train, again.train), (mnist.test, again.test)):
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)


def test_bundled_mnist_is_read_once_per_process_and_each_load_is_its_own_copy():
    first = build_dataset("mnist")
    expected = first.test.x[0].clone()
    first.test.x.mul_(0)  # a model that changes its inputs in place
    first.train.y.fill_(0)
    second = build_dataset("mnist")
    assert torch.equal(second.test.x[0], expected) and torch.bincount(second.train.y).numel() == 10
    assert second.train.x.data_ptr() != first.train.x.data_ptr()


def test_bundled_mnist_split_is_disjoint_and_covers_the_file(mnist):
    file_images = read_bundled_images()
    # Undo the normalisation to recover the raw bytes of every image.
    def raw(split):
        pixels = torch.round(split.x * MNIST_STD * 255 + MNIST_MEAN * 255).to(torch.uint8).numpy()
        return {image.tobytes() for image in pixels.reshape(len(split), -1)}

    train, test = raw(mnist.train), raw(mnist.test)
    assert len(train) == 8000 and len(test) == 2000
    assert not train & test
    assert train | test == {image.tobytes() for image in file_images.reshape(10000, -1)}


# ---------------------------------------------------------------- MNIST from a user's directory


def test_mnist_data_dir_loads_standard_files(tmp_path):
    parts = write_mnist_dir(tmp_path, np.random.default_rng(0))
    data = build_dataset("mnist", data_dir=tmp_path)
    for split, (images, labels) in ((data.train, parts["train"]), (data.test, parts["t10k"])):
        expected = (torch.from_numpy(images.astype(np.float32)) / 255 - MNIST_MEAN) / MNIST_STD
        assert torch.allclose(split.x, expected.unsqueeze(1), atol=1e-6)
        assert torch.equal(split.y, torch.from_numpy(labels.astype(np.int64)))
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10
    assert build_dataset("mnist", data_dir=str(tmp_path)).train.x.shape == (20, 1, 28, 28)


def test_mnist_missing_file_names_it(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(1))
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        build_dataset("mnist", data_dir=tmp_path)


def test_mnist_truncated_file_names_path(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(2))
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DatasetFormatError, match="truncated") as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(path) in str(err.value) and isinstance(err.value, ValueError)


def test_mnist_truncated_gzip_names_path(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(3))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(DatasetFormatError) as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(path) in str(err.value)


def test_mnist_bad_magic_names_path(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(4))
    path = tmp_path / "t10k-labels-idx1-ubyte"
    data = bytearray(path.read_bytes())
    data[3] = 3  # labels claiming three dimensions: an images file in the wrong place
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="magic") as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(path) in str(err.value) and "0x00000801" in str(err.value)


def test_mnist_count_mismatch_names_both_files(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(5))
    labels = tmp_path / "t10k-labels-idx1-ubyte"
    write_idx(labels, np.zeros(6, dtype=np.uint8))
    with pytest.raises(DatasetFormatError, match="7 images") as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(labels) in str(err.value) and "t10k-images-idx3-ubyte" in str(err.value)


def test_mnist_label_out_of_range(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(6))
    labels = tmp_path / "t10k-labels-idx1-ubyte"
    write_idx(labels, np.full(7, 10, dtype=np.uint8))
    with pytest.raises(DatasetFormatError, match="label 10"):
        build_dataset("mnist", data_dir=tmp_path)


@pytest.mark.parametrize("split", ["train", "t10k"])
def test_mnist_without_images_names_the_file(tmp_path, split):
    write_mnist_dir(tmp_path, np.random.default_rng(7), **{"n_train" if split == "train" else "n_test": 0})
    images = tmp_path / f"{split}-images-idx3-ubyte{'.gz' if split == 'train' else ''}"
    with pytest.raises(DatasetFormatError) as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(err.value) == f"{images}: no images (header shape [0, 28, 28])"


def test_mnist_header_whose_size_overflows_int64_is_a_format_error(tmp_path):
    write_mnist_dir(tmp_path, np.random.default_rng(8))
    path = tmp_path / "t10k-images-idx3-ubyte"
    # 2**31 x 2**31 x 2**31 bytes: 2**93, which int64 arithmetic wraps to 0, the data found
    path.write_bytes(struct.pack(">BBBB3I", 0, 0, 0x08, 3, 2**31, 2**31, 2**31))
    with pytest.raises(DatasetFormatError) as err:
        build_dataset("mnist", data_dir=tmp_path)
    assert str(err.value) == (f"{path}: truncated: header shape [2147483648, 2147483648, 2147483648] needs "
                              f"{2**93} data bytes, found 0")


# ---------------------------------------------------------------- CIFAR-10


def write_cifar_dir(directory: Path, protocol: int, str_keys: bool = False) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(protocol)
    batches = {}
    for name, n in [(f"data_batch_{i}", 4) for i in range(1, 6)] + [("test_batch", 3)]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).tolist()
        keys = ("data", "labels") if str_keys else (b"data", b"labels")
        batch = {keys[0]: data, keys[1]: labels, b"batch_label": b"testing"}
        (directory / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        batches[name] = (data, labels)
    return batches


def cifar_expected(data: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(data.astype(np.float32)).reshape(-1, 3, 32, 32) / 255
    return (x - torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)) / torch.tensor(CIFAR_STD).view(1, 3, 1, 1)


@pytest.mark.parametrize("protocol,str_keys", [(2, False), (4, True), (5, False)])
def test_cifar10_loads_python_batches(tmp_path, protocol, str_keys):
    batches = write_cifar_dir(tmp_path, protocol, str_keys)
    data = build_dataset("cifar10", data_dir=tmp_path)
    train_data = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    train_labels = sum((batches[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert data.train.x.shape == (20, 3, 32, 32) and data.test.x.shape == (3, 3, 32, 32)
    assert data.train.x.dtype == torch.float32 and data.train.y.dtype == torch.int64
    assert torch.allclose(data.train.x, cifar_expected(train_data), atol=1e-5)
    assert data.train.y.tolist() == train_labels
    assert torch.allclose(data.test.x, cifar_expected(batches["test_batch"][0]), atol=1e-5)
    assert data.test.y.tolist() == batches["test_batch"][1]
    assert data.input_shape == (3, 32, 32) and data.num_classes == 10


def test_cifar10_accepts_parent_directory(tmp_path):
    write_cifar_dir(tmp_path / "cifar-10-batches-py", protocol=4)
    assert build_dataset("cifar10", data_dir=tmp_path).train.x.shape == (20, 3, 32, 32)


def test_cifar10_missing_batch_names_it(tmp_path):
    write_cifar_dir(tmp_path, protocol=4)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        build_dataset("cifar10", data_dir=tmp_path)


def test_cifar10_needs_data_dir():
    with pytest.raises(ValueError, match="data_dir"):
        build_dataset("cifar10")


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_cifar10_refuses_arbitrary_pickle_globals(tmp_path):
    write_cifar_dir(tmp_path, protocol=4)
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({b"data": _Payload(), b"labels": []}))
    with pytest.raises(DatasetFormatError, match="not allowed") as err:
        build_dataset("cifar10", data_dir=tmp_path)
    assert str(path) in str(err.value)


def test_cifar10_wrong_data_shape(tmp_path):
    write_cifar_dir(tmp_path, protocol=4)
    path = tmp_path / "data_batch_2"
    path.write_bytes(pickle.dumps({b"data": np.zeros((4, 100), np.uint8), b"labels": [0] * 4}))
    with pytest.raises(DatasetFormatError, match=r"\[N, 3072\]") as err:
        build_dataset("cifar10", data_dir=tmp_path)
    assert str(path) in str(err.value)


def test_cifar10_truncated_batch(tmp_path):
    write_cifar_dir(tmp_path, protocol=4)
    path = tmp_path / "data_batch_1"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DatasetFormatError) as err:
        build_dataset("cifar10", data_dir=tmp_path)
    assert str(path) in str(err.value)


# ---------------------------------------------------------------- synthetic


def test_synthetic_shapes_and_classes():
    data = build_dataset("synthetic", input_shape=[3, 8, 8], num_classes=7, num_samples=100)
    assert data.train.x.shape == (100, 3, 8, 8) and data.test.x.shape == (256, 3, 8, 8)
    assert data.train.x.dtype == torch.float32 and data.train.y.dtype == torch.int64
    assert data.input_shape == (3, 8, 8) and data.num_classes == 7
    assert int(data.train.y.min()) >= 0 and int(data.train.y.max()) < 7
    assert build_dataset("synthetic", num_samples=2000).test.x.shape[0] == 500
    assert build_dataset("synthetic", num_samples=10, test_samples=3).test.x.shape == (3, 1, 28, 28)


def test_synthetic_defaults_and_balance():
    data = build_dataset("synthetic")
    assert data.train.x.shape == (1024, 1, 28, 28) and data.num_classes == 10
    counts = torch.bincount(data.train.y, minlength=10)
    assert (counts > 1024 / 10 / 3).all()  # no class starved
    assert data.train.x.std().item() == pytest.approx(1.0, abs=0.05)


def test_synthetic_deterministic_per_seed():
    a = build_dataset("synthetic", seed=3, input_shape=[16], num_samples=64)
    b = build_dataset("synthetic", seed=3, input_shape=[16], num_samples=64)
    c = build_dataset("synthetic", seed=4, input_shape=[16], num_samples=64)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.train.y, b.train.y)
    assert torch.equal(a.test.x, b.test.x) and torch.equal(a.test.y, b.test.y)
    assert not torch.equal(a.train.x, c.train.x) and not torch.equal(a.train.y, c.train.y)


def test_synthetic_labels_are_learnable_by_least_squares():
    # The labels are a noisy linear function of the inputs: one-hot least squares on
    # the training set beats chance (10%) by far on the test set.
    data = build_dataset("synthetic", input_shape=[64], num_samples=2000)
    x = torch.cat([data.train.x, torch.ones(2000, 1)], dim=1)
    targets = torch.nn.functional.one_hot(data.train.y, 10).float()
    weights = torch.linalg.lstsq(x, targets).solution
    test_x = torch.cat([data.test.x, torch.ones(len(data.test), 1)], dim=1)
    accuracy = ((test_x @ weights).argmax(1) == data.test.y).float().mean().item()
    assert accuracy > 0.5


@pytest.mark.parametrize(
    "options,message",
    [
        ({"input_shape": []}, "input_shape"),
        ({"input_shape": [3, 0]}, "input_shape"),
        ({"num_classes": 1}, "num_classes"),
        ({"num_samples": 0}, "num_samples"),
        ({"num_samples": 2.5}, "num_samples"),
        ({"classes": 10}, "valid options: input_shape, num_classes, num_samples, test_samples"),
    ],
)
def test_synthetic_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        build_dataset("synthetic", **options)


def test_synthetic_rejects_data_dir(tmp_path):
    with pytest.raises(ValueError, match="data_dir"):
        build_dataset("synthetic", data_dir=tmp_path)


def test_unknown_dataset_and_option():
    with pytest.raises(ValueError, match="mnist, cifar10, synthetic"):
        build_dataset("imagenet")
    with pytest.raises(ValueError, match="takes no options"):
        build_dataset("mnist", num_samples=10)
    # None means "not set", so the flat training config can pass every key.
    assert build_dataset("synthetic", input_shape=[4], num_classes=None, test_samples=None).num_classes == 10
