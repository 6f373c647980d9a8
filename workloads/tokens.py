"""Language-model data: a stream of token ids cut into windows of ``seq_len`` next-token examples.

- ``python_source``: bytes of the running interpreter's standard library, a
  corpus of about 31 MB (CPython 3.11) that needs no download. Tokens are bytes
  (vocabulary 256). The ``.py`` files under ``sysconfig.get_paths()["stdlib"]``,
  recursively, skipping any folder named site-packages or dist-packages, are
  sorted by their path relative to that folder (POSIX text); file k (0-based)
  goes to the test split if k % 10 == 0, else to the training split. A split is
  its files' bytes in that order, each file followed by one newline byte. The
  corpus thus depends on the installed interpreter: ``python_source_info()``
  names it (Python version, file and byte counts, a SHA-256 over every file's
  relative path, a NUL, its bytes, a NUL, in order). It is read once per
  process; ``seed`` changes nothing.
- ``tokens``: nanoGPT's token files, ``train.bin`` and ``val.bin`` in
  ``data_dir``, each a flat array of uint16 token ids in the machine's byte
  order (little-endian on x86 and ARM, as nanoGPT's ``np.memmap`` writes
  them). They are memory-mapped read-only, never read whole, so they may be
  larger than memory. The vocabulary is ``vocab_size`` or, unset, the largest
  token id + 1; either way both files are scanned once for their largest id.

Sample i of a split is the window x = tokens[i T : i T + T] and its targets
y = tokens[i T + 1 : i T + T + 1] (T = seq_len): non-overlapping windows, the
stream's last token only a target, an incomplete last window dropped.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import os
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .dataset_types import LANGUAGE_MODEL, DatasetFormatError, DatasetPair

BYTE_VOCAB = 256
TEST_EVERY = 10  # python_source: every 10th file is a test file
TOKEN_FILES = ("train.bin", "val.bin")
TOKEN_DTYPE = np.uint16
# Tokens per pass of a whole-file scan: 32 MiB of uint16 at a time keeps memory bounded for any file size.
CHUNK = 1 << 24
_EXCLUDED_DIRS = ("site-packages", "dist-packages")


class TokenWindows(Dataset):
    """Non-overlapping next-token windows of ``seq_len`` over a 1-D uint8 or uint16 token array.

    ``tokens`` may be an in-memory array or an ``np.memmap``: a sample reads
    only its own window. Samples are ``(x, y)``, both int64 [seq_len].
    """

    def __init__(self, tokens: np.ndarray, seq_len: int) -> None:
        if not isinstance(tokens, np.ndarray) or tokens.ndim != 1 or tokens.dtype not in (np.uint8, np.uint16):
            described = f"{tokens.dtype} {tokens.shape}" if isinstance(tokens, np.ndarray) else type(tokens).__name__
            raise TypeError(f"TokenWindows needs a 1-D uint8 or uint16 array, got {described}")
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
        if len(tokens) < seq_len + 1:
            raise ValueError(f"{len(tokens)} tokens are too few for one window of seq_len {seq_len} "
                             f"(it takes {seq_len + 1})")
        self.tokens = tokens
        self.seq_len = seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = operator.index(index)  # numpy and 0-d torch integers too, as samplers may give them
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"window {index} out of range for {count} windows")
        start = (index % count) * self.seq_len
        # astype copies the window out of a read-only or memory-mapped array.
        window = torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


@dataclass(frozen=True)
class _Corpus:
    train: np.ndarray  # uint8, read-only: shared by every loader call of the process
    test: np.ndarray
    files: int
    sha256: str


def _stdlib_sources() -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of every standard-library ``.py`` file, sorted by the relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for folder, subfolders, names in os.walk(root):
        # Pruned in place so that os.walk never descends into installed packages.
        subfolders[:] = [name for name in subfolders if name not in _EXCLUDED_DIRS]
        for name in names:
            path = Path(folder, name)
            if name.endswith(".py") and path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


@functools.cache
def _python_corpus() -> _Corpus:
    train: list[bytes] = []
    test: list[bytes] = []
    digest = hashlib.sha256()
    sources = _stdlib_sources()
    for k, (relative, path) in enumerate(sources):
        data = path.read_bytes()
        digest.update(os.fsencode(relative) + b"\0" + data + b"\0")
        (test if k % TEST_EVERY == 0 else train).extend((data, b"\n"))
    # frombuffer over bytes gives read-only arrays, so no caller can alter the cached corpus.
    return _Corpus(train=np.frombuffer(b"".join(train), dtype=np.uint8),
                   test=np.frombuffer(b"".join(test), dtype=np.uint8), files=len(sources), sha256=digest.hexdigest())


def python_source_info() -> dict[str, str | int]:
    """What the python_source corpus of this interpreter is: python (version), files, train_bytes,
    test_bytes (separators included) and sha256 (see the module docstring)."""
    corpus = _python_corpus()
    return {"python": platform.python_version(), "files": corpus.files, "train_bytes": len(corpus.train),
            "test_bytes": len(corpus.test), "sha256": corpus.sha256}


def load_python_source(data_dir: Path | None, seed: int, *, seq_len: int = 64) -> DatasetPair:
    """The standard library's bytes in windows of ``seq_len``; a fixed split by file, so ``seed`` changes
    nothing."""
    if data_dir is not None:
        raise ValueError(f"the python_source dataset reads no files; leave data_dir unset (got {data_dir})")
    corpus = _python_corpus()
    for name, split in (("train", corpus.train), ("test", corpus.test)):
        if len(split) < seq_len + 1:
            raise ValueError(f"python_source: seq_len {seq_len} is too long for the {name} split of "
                             f"{len(split)} bytes")
    return DatasetPair(train=TokenWindows(corpus.train, seq_len), test=TokenWindows(corpus.test, seq_len),
                       input_shape=(seq_len,), num_classes=BYTE_VOCAB, task=LANGUAGE_MODEL)


def _open_tokens(path: Path, seq_len: int) -> np.memmap:
    if not path.is_file():
        raise FileNotFoundError(f"token file not found: {path}")
    size = path.stat().st_size
    if size == 0:
        raise DatasetFormatError(f"{path}: empty file; expected uint16 token ids")
    if size % np.dtype(TOKEN_DTYPE).itemsize:
        raise DatasetFormatError(f"{path}: {size} bytes, an odd count, cannot hold uint16 token ids")
    tokens = np.memmap(path, dtype=TOKEN_DTYPE, mode="r")
    if len(tokens) < seq_len + 1:
        raise DatasetFormatError(f"{path}: {len(tokens)} tokens are too few for one window of seq_len "
                                 f"{seq_len} (it takes {seq_len + 1})")
    return tokens


def _largest_id(tokens: np.ndarray) -> int:
    return max(int(tokens[begin:begin + CHUNK].max()) for begin in range(0, len(tokens), CHUNK))


def load_tokens(data_dir: Path | None, seed: int, *, seq_len: int = 64, vocab_size: int | None = None) -> DatasetPair:
    """``train.bin`` and ``val.bin`` of ``data_dir`` (the test split is val.bin) in windows of ``seq_len``;
    fixed files, so ``seed`` changes nothing."""
    if data_dir is None:
        raise ValueError("tokens needs data_dir: a directory with train.bin and val.bin "
                         "(uint16 token ids, nanoGPT's format)")
    paths = [data_dir / name for name in TOKEN_FILES]
    # Both opened before either is scanned, so that a missing or malformed file is reported at once.
    splits = [_open_tokens(path, seq_len) for path in paths]
    largest = [_largest_id(tokens) for tokens in splits]
    if vocab_size is None:
        vocab_size = max(largest) + 1
    for path, top in zip(paths, largest):
        if top >= vocab_size:
            raise DatasetFormatError(f"{path}: token id {top} is outside the vocabulary of vocab_size {vocab_size}")
    train, test = (TokenWindows(tokens, seq_len) for tokens in splits)
    return DatasetPair(train=train, test=test, input_shape=(seq_len,), num_classes=vocab_size, task=LANGUAGE_MODEL)
