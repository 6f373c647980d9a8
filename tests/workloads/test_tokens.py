"""Language-model data of workloads/ (tokens.py, its entries in datasets.py): TokenWindows, the python_source
corpus against an independent reading of the standard library, nanoGPT token files and what is refused of
them (CPU, fast)."""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

import workloads
from workloads import LANGUAGE_MODEL, DatasetFormatError, TokenWindows, build_dataset, python_source_info
from workloads import tokens as tokens_module

# ---------------------------------------------------------------- TokenWindows


def test_windows_over_arange():
    windows = TokenWindows(np.arange(23, dtype=np.uint8), seq_len=5)
    # 22 targets (every token but the first) make 4 whole windows; tokens 21 and 22 are left over.
    assert len(windows) == 4 and windows.seq_len == 5
    for i in range(4):
        x, y = windows[i]
        assert x.dtype == torch.int64 and y.dtype == torch.int64
        assert x.tolist() == list(range(5 * i, 5 * i + 5))
        assert y.tolist() == list(range(5 * i + 1, 5 * i + 6))
    assert windows[-1][1].tolist() == [16, 17, 18, 19, 20]
    assert windows[np.int64(2)][0].tolist() == windows[torch.tensor(2)][0].tolist() == [10, 11, 12, 13, 14]
    for index in (4, -5):
        with pytest.raises(IndexError):
            windows[index]


def test_windows_whole_stream_and_uint16():
    # seq_len + 1 tokens: exactly one window, the last token only a target.
    tokens = np.array([65535, 1, 2, 40000], dtype=np.uint16)
    windows = TokenWindows(tokens, seq_len=3)
    assert len(windows) == 1
    assert windows[0][0].tolist() == [65535, 1, 2] and windows[0][1].tolist() == [1, 2, 40000]
    assert list(torch.utils.data.DataLoader(windows, batch_size=2))[0][1].tolist() == [[1, 2, 40000]]


@pytest.mark.parametrize(
    "tokens,seq_len,error,message",
    [
        (np.arange(5, dtype=np.uint8), 5, ValueError, "5 tokens are too few for one window of seq_len 5"),
        (np.arange(6, dtype=np.int32), 2, TypeError, "uint8 or uint16"),
        (np.zeros((3, 3), dtype=np.uint8), 2, TypeError, "1-D"),
        ([1, 2, 3], 1, TypeError, "got list"),
        (np.arange(6, dtype=np.uint8), 0, ValueError, "seq_len"),
    ],
)
def test_windows_refuse(tokens, seq_len, error, message):
    with pytest.raises(error, match=message):
        TokenWindows(tokens, seq_len)


# ---------------------------------------------------------------- python_source


def read_stdlib() -> list[tuple[str, bytes]]:
    """(relative path, bytes) of every standard-library .py file outside installed packages, in path order."""
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in ("site-packages", "dist-packages")]
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.isfile(path):
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                files.append((relative, Path(path).read_bytes()))
    return sorted(files)


@pytest.fixture(scope="module")
def python_source() -> workloads.DatasetPair:
    return build_dataset("python_source")


def test_python_source_shape_and_task(python_source):
    assert python_source.input_shape == (64,) and python_source.num_classes == 256
    assert python_source.task == LANGUAGE_MODEL
    info = python_source_info()
    for split, size in ((python_source.train, info["train_bytes"]), (python_source.test, info["test_bytes"])):
        assert isinstance(split, TokenWindows) and split.seq_len == 64
        assert split.tokens.dtype == np.uint8 and len(split.tokens) == size
        assert not split.tokens.flags.writeable  # the cached corpus is shared
        assert len(split) == (size - 1) // 64


def test_python_source_matches_the_standard_library(python_source):
    files = read_stdlib()
    assert len(files) > 500
    digest = hashlib.sha256()
    for relative, data in files:
        digest.update(relative.encode() + b"\0" + data + b"\0")
    # Every 10th file in path order is a test file, each file followed by a newline.
    test = b"".join(data + b"\n" for _, data in files[::10])
    train = b"".join(data + b"\n" for k, (_, data) in enumerate(files) if k % 10)
    assert python_source.test.tokens.tobytes() == test
    assert python_source.train.tokens.tobytes() == train
    total = sum(len(data) + 1 for _, data in files)
    assert python_source_info() == {"python": "{}.{}.{}".format(*sys.version_info), "files": len(files),
                                    "train_bytes": len(train), "test_bytes": len(test),
                                    "sha256": digest.hexdigest()}
    assert len(train) + len(test) == total


def test_python_source_is_read_once_and_ignores_seed(python_source):
    again = build_dataset("python_source", seed=5, seq_len=128)
    assert again.train.tokens is python_source.train.tokens and again.test.tokens is python_source.test.tokens
    assert again.input_shape == (128,) and len(again.train) == (len(again.train.tokens) - 1) // 128
    assert python_source_info() == python_source_info()
    x, y = again.train[3]
    assert x.tolist() == again.train.tokens[384:512].tolist() and y.tolist() == again.train.tokens[385:513].tolist()


def test_python_source_refusals(tmp_path):
    with pytest.raises(ValueError, match="reads no files; leave data_dir unset"):
        build_dataset("python_source", data_dir=tmp_path)
    with pytest.raises(ValueError, match="seq_len 10000000 is too long for the test split of "):
        build_dataset("python_source", seq_len=10_000_000)
    with pytest.raises(ValueError, match="seq_len"):
        build_dataset("python_source", seq_len=0)
    with pytest.raises(ValueError, match="valid options: seq_len$"):
        build_dataset("python_source", vocab_size=300)


# ---------------------------------------------------------------- tokens (nanoGPT's train.bin / val.bin)


def write_tokens(directory: Path, train: np.ndarray, val: np.ndarray) -> None:
    train.astype(np.uint16).tofile(directory / "train.bin")
    val.astype(np.uint16).tofile(directory / "val.bin")


@pytest.fixture
def token_dir(tmp_path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    train = rng.integers(0, 900, size=1001, dtype=np.uint16)
    val = rng.integers(0, 900, size=257, dtype=np.uint16)
    val[100] = 1234  # the largest id lies in val.bin
    write_tokens(tmp_path, train, val)
    return tmp_path, train, val


def test_tokens_memory_mapped_windows(token_dir):
    directory, train, val = token_dir
    data = build_dataset("tokens", data_dir=directory, seq_len=10)
    assert data.input_shape == (10,) and data.num_classes == 1235 and data.task == LANGUAGE_MODEL
    assert isinstance(data.train.tokens, np.memmap) and isinstance(data.test.tokens, np.memmap)
    assert len(data.train) == 100 and len(data.test) == 25
    assert data.train[99][0].tolist() == train[990:1000].tolist()
    assert data.train[99][1].tolist() == train[991:1001].tolist()
    assert data.test[10][0].tolist() == val[100:110].tolist() and data.test[10][0][0].item() == 1234
    assert np.array_equal(data.train.tokens, train) and np.array_equal(data.test.tokens, val)
    assert build_dataset("tokens", data_dir=str(directory)).input_shape == (64,)


def test_tokens_vocab_size(token_dir, monkeypatch):
    directory, _, _ = token_dir
    assert build_dataset("tokens", data_dir=directory, vocab_size=1235).num_classes == 1235
    assert build_dataset("tokens", data_dir=directory, vocab_size=50257).num_classes == 50257
    with pytest.raises(DatasetFormatError) as err:
        build_dataset("tokens", data_dir=directory, vocab_size=1234)
    assert str(err.value) == f"{directory / 'val.bin'}: token id 1234 is outside the vocabulary of vocab_size 1234"
    monkeypatch.setattr(tokens_module, "CHUNK", 7)  # the chunked scan finds the same largest id
    assert build_dataset("tokens", data_dir=directory, seq_len=10).num_classes == 1235


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("train.bin", b"", "empty file"),
        ("val.bin", b"\x01\x00\x02", "3 bytes, an odd count"),
        ("val.bin", np.arange(10, dtype=np.uint16).tobytes(), "10 tokens are too few for one window of seq_len 10"),
    ],
)
def test_tokens_malformed_file_named(token_dir, name, content, message):
    directory, _, _ = token_dir
    (directory / name).write_bytes(content)
    with pytest.raises(DatasetFormatError, match=message) as err:
        build_dataset("tokens", data_dir=directory, seq_len=10)
    text = str(err.value)
    assert text.startswith(f"{directory / name}: ") and "\n" not in text


def test_tokens_missing_file_and_data_dir(token_dir):
    directory, _, _ = token_dir
    (directory / "val.bin").unlink()
    with pytest.raises(FileNotFoundError, match="val.bin"):
        build_dataset("tokens", data_dir=directory)
    with pytest.raises(ValueError, match="tokens needs data_dir"):
        build_dataset("tokens")
    with pytest.raises(ValueError, match="vocab_size"):
        build_dataset("tokens", data_dir=directory, vocab_size=0)


def test_registry_entries():
    assert workloads.DATA_DIR["python_source"] is None and workloads.DATA_DIR["tokens"] == "required"
    assert [p.name for p in workloads.dataset_options("python_source")] == ["seq_len"]
    assert [p.name for p in workloads.dataset_options("tokens")] == ["seq_len", "vocab_size"]
    # One declaration of seq_len, shared.
    assert [p.name for p in workloads.DATASET_OPTIONS].count("seq_len") == 1
