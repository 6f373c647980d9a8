"""Tests of workloads/: dataset loaders, models, gradient summaries and data sharding (CPU, fast)."""

from __future__ import annotations

import gzip
import math
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

import workloads
from workloads import DatasetFormatError, build_dataset, build_model, model_summary, shard_indices

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


def dense(inputs: int, outputs: int) -> int:
    return inputs * outputs + outputs


def conv(in_channels: int, out_channels: int, kernel: int, bias: bool = True) -> int:
    return in_channels * out_channels * kernel * kernel + (out_channels if bias else 0)


def bn(channels: int) -> int:
    return 2 * channels


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


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


# ---------------------------------------------------------------- models


@pytest.mark.parametrize(
    "name,shape,options",
    [
        ("mlp", (1, 28, 28), {}),
        ("mlp", (20,), {"width": 8, "depth": 2}),
        ("mlp", (3, 32, 32), {"depth": 0}),
        ("lenet5", (1, 28, 28), {}),
        ("lenet5", (3, 32, 32), {}),
        ("resnet20", (1, 28, 28), {}),
        ("resnet20", (3, 32, 32), {}),
        ("resnet18", (3, 32, 32), {}),
        ("resnet18", (1, 28, 28), {}),
        ("resnet50", (3, 32, 32), {}),
        ("vgg11", (1, 28, 28), {"head": "cifar"}),
        ("vgg11", (3, 32, 32), {"batch_norm": False, "head": "cifar"}),
        ("vgg16", (3, 32, 32), {}),
        ("alexnet", (1, 28, 28), {}),
        ("alexnet", (3, 32, 32), {}),
    ],
)
def test_model_forward_shape(name, shape, options):
    torch.manual_seed(0)
    model = build_model(name, shape, 10, **options)
    with torch.no_grad():
        logits = model.eval()(torch.randn(2, *shape))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


def test_models_run_on_imagenet_sized_input():
    torch.manual_seed(0)
    for name in ("resnet18", "alexnet"):
        model = build_model(name, [3, 224, 224], 1000).eval()
        with torch.no_grad():
            assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


def test_model_train_step_gives_gradients():
    torch.manual_seed(0)
    model = build_model("resnet20", (3, 32, 32), 10)
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_mlp_parameter_counts():
    # The papers' MNIST network: 784-4096-4096-4096-10.
    expected = dense(784, 4096) + 2 * dense(4096, 4096) + dense(4096, 10)
    assert expected == 36_818_954
    with torch.device("meta"):
        assert count(build_model("mlp", (1, 28, 28), 10)) == expected
        assert count(build_model("mlp", (20,), 3, width=8, depth=2)) == dense(20, 8) + dense(8, 8) + dense(8, 3)
        assert count(build_model("mlp", (5,), 2, depth=0)) == dense(5, 2)


@pytest.mark.parametrize("channels", [1, 3])
def test_lenet5_parameter_count(channels):
    expected = conv(channels, 6, 5) + conv(6, 16, 5) + dense(400, 120) + dense(120, 84) + dense(84, 10)
    shape = (channels, 28, 28) if channels == 1 else (channels, 32, 32)
    assert count(build_model("lenet5", shape, 10)) == expected
    if channels == 1:
        assert expected == 61_706


@pytest.mark.parametrize("channels", [1, 3])
def test_resnet20_parameter_count(channels):
    def block(cin, cout):
        shortcut = conv(cin, cout, 1, bias=False) + bn(cout) if cin != cout else 0
        return conv(cin, cout, 3, bias=False) + bn(cout) + conv(cout, cout, 3, bias=False) + bn(cout) + shortcut

    expected = conv(channels, 16, 3, bias=False) + bn(16)
    for cin, cout in ((16, 16), (16, 32), (32, 64)):
        expected += block(cin, cout) + 2 * block(cout, cout)
    expected += dense(64, 10)
    assert count(build_model("resnet20", (channels, 32, 32), 10)) == expected
    if channels == 3:
        assert expected == 272_474


@pytest.mark.parametrize(
    "name,options,expected",
    [
        # torchvision's published counts for 3x224x224 input and 1000 classes.
        ("resnet18", {}, 11_689_512),
        ("resnet50", {}, 25_557_032),
        ("vgg11", {"batch_norm": False}, 132_863_336),
        ("vgg11", {}, 132_868_840),
        ("vgg16", {"batch_norm": False}, 138_357_544),
        ("vgg16", {"batch_norm": True}, 138_365_992),
        ("alexnet", {}, 61_100_840),
    ],
)
def test_imagenet_models_match_torchvision_counts(name, options, expected):
    with torch.device("meta"):  # counts without allocating the weights
        assert count(build_model(name, (3, 224, 224), 1000, **options)) == expected


def test_vgg_cifar_head_count():
    # The small-image head replaces the 7x7x512-4096-4096 classifier by one 512-10 layer.
    with torch.device("meta"):
        full = count(build_model("vgg16", (3, 32, 32), 10))
        small = count(build_model("vgg16", (3, 32, 32), 10, head="cifar"))
    assert full - small == dense(512 * 49, 4096) + dense(4096, 4096) + dense(4096, 10) - dense(512, 10)


@pytest.mark.parametrize(
    "name,shape,options,message",
    [
        ("resnet34", (3, 32, 32), {}, "mlp, lenet5, resnet20, resnet18, resnet50, vgg11, vgg16, alexnet"),
        ("mlp", (1, 28, 28), {"widht": 10}, "valid options: width, depth"),
        ("lenet5", (1, 28, 28), {"width": 10}, "takes no options"),
        ("mlp", (1, 28, 28), {"width": 0}, "width"),
        ("mlp", (1, 28, 28), {"depth": True}, "depth"),
        ("vgg11", (3, 32, 32), {"head": "tiny"}, "'imagenet', 'cifar'"),
        ("vgg11", (3, 32, 32), {"batch_norm": "yes"}, "batch_norm"),
        ("lenet5", (784,), {}, "channels, height, width"),
        ("mlp", (1, -2), {}, "input_shape"),
    ],
)
def test_build_model_errors(name, shape, options, message):
    with pytest.raises(ValueError, match=message):
        build_model(name, shape, 10, **options)


def test_none_options_mean_defaults():
    with torch.device("meta"):
        model = build_model("resnet20", [3, 32, 32], 10, width=None, depth=None)
    assert count(model) == 272_474


# ---------------------------------------------------------------- model_summary


def test_model_summary_by_hand():
    model = nn.Sequential(nn.Linear(40, 30), nn.ReLU(), nn.Linear(30, 2))
    # Tensors: 1200 (weight), 30, 60, 2 elements; only the first reaches 1024.
    summary = model_summary(model)
    assert summary == {
        "parameters": 1292,
        "grad_bytes_fp32": 4 * 1292,
        "compressible_share": pytest.approx(1200 / 1292),
    }
    assert model_summary(model, min_compress_numel=60)["compressible_share"] == pytest.approx(1260 / 1292)
    assert model_summary(model, min_compress_numel=1)["compressible_share"] == 1.0


def test_model_summary_frozen_and_empty():
    model = nn.Sequential(nn.Linear(40, 30), nn.Linear(30, 2))
    model[0].weight.requires_grad_(False)
    summary = model_summary(model)
    assert summary["parameters"] == 1292 and summary["grad_bytes_fp32"] == 4 * 92
    assert summary["compressible_share"] == 0.0
    assert model_summary(nn.ReLU()) == {"parameters": 0, "grad_bytes_fp32": 0, "compressible_share": 0.0}


# ---------------------------------------------------------------- shard_indices


@pytest.mark.parametrize("num_samples,world_size", [(10, 1), (10, 2), (10, 3), (7, 4), (3, 5), (1000, 8)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_match_distributed_sampler(num_samples, world_size, shuffle):
    data = range(num_samples)
    for epoch in (0, 3):
        for rank in range(world_size):
            sampler = DistributedSampler(data, world_size, rank, shuffle=shuffle, seed=11)
            sampler.set_epoch(epoch)
            shard = shard_indices(num_samples, rank, world_size, epoch, seed=11, shuffle=shuffle)
            assert shard.dtype == torch.int64
            assert shard.tolist() == list(sampler)


@pytest.mark.parametrize("num_samples,world_size", [(12, 4), (10, 3), (3, 5)])
def test_shards_cover_and_are_disjoint_up_to_padding(num_samples, world_size):
    shards = [shard_indices(num_samples, r, world_size, epoch=2, seed=0) for r in range(world_size)]
    per_rank = math.ceil(num_samples / world_size)
    assert all(len(s) == per_rank for s in shards)
    everything = torch.cat(shards)
    assert set(everything.tolist()) == set(range(num_samples))
    assert len(everything) - len(set(everything.tolist())) == per_rank * world_size - num_samples


def test_shards_deterministic_and_differ_by_epoch_and_seed():
    a = shard_indices(100, 1, 4, epoch=0, seed=5)
    assert torch.equal(a, shard_indices(100, 1, 4, epoch=0, seed=5))
    assert not torch.equal(a, shard_indices(100, 1, 4, epoch=1, seed=5))
    assert not torch.equal(a, shard_indices(100, 1, 4, epoch=0, seed=6))
    # 0..9 padded by wrapping to 0..9, 0, 1; rank 1 of 3 takes every third from position 1.
    assert shard_indices(10, 1, 3, epoch=0, seed=0, shuffle=False).tolist() == [1, 4, 7, 0]


@pytest.mark.parametrize("rank,world_size", [(2, 2), (-1, 2), (0, 0)])
def test_shards_reject_bad_rank(rank, world_size):
    with pytest.raises(ValueError):
        shard_indices(10, rank, world_size, epoch=0, seed=0)
