"""CIFAR-10 from the "python version" batches (``data_batch_1`` .. ``data_batch_5``, ``test_batch``).

Each batch is a pickled dict with ``data`` (uint8 [N, 3072], channel-major
32x32 planes) and ``labels`` (N ints in 0..9). Pickle can run arbitrary code, so
batches are read with an Unpickler that resolves only the few globals a NumPy
array needs; anything else is refused as a malformed file. ``data_dir`` may be
the batch directory itself or its parent holding ``cifar-10-batches-py``.

Images become float32 [N, 3, 32, 32] normalised per channel with the training
set's mean (0.4914, 0.4822, 0.4465) and std (0.2470, 0.2435, 0.2616).
"""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .dataset_types import DatasetFormatError, DatasetPair, Split

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
SUBDIR = "cifar-10-batches-py"
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)


def _latin1_encode(text: str, encoding: str) -> bytes:
    # Protocol-2 pickles written by Python 3 store bytes as _codecs.encode(str, "latin1");
    # other codecs (zlib, base64...) are never needed, so they are refused.
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refusing codec {encoding!r}")
    return codecs.encode(text, encoding)


# The functions NumPy names when it pickles an array, looked up from NumPy itself because
# their module moved (numpy.core -> numpy._core in NumPy 2); both spellings are accepted.
_RECONSTRUCT = np.ndarray.__reduce__(np.empty(0))[0]
_FROMBUFFER = np.empty(0).__reduce_ex__(5)[0]
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("_codecs", "encode"): _latin1_encode,
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, 3072] and labels int64 [N] of one batch file."""
    try:
        with path.open("rb") as f:
            # encoding="bytes": the official batches are Python 2 pickles with byte-string keys.
            batch = _ArrayOnlyUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DatasetFormatError(f"{path}: not a CIFAR-10 python batch ({err})") from err
    if not isinstance(batch, dict):
        raise DatasetFormatError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
    # Python 2 pickles give bytes keys; batches re-pickled under Python 3 may give str keys.
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        described = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DatasetFormatError(f"{path}: 'data' must be a uint8 array [N, 3072], got {described}")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError) as err:
        raise DatasetFormatError(f"{path}: 'labels' must be a list of ints ({err})") from err
    if labels.shape != (data.shape[0],):
        raise DatasetFormatError(
            f"{path}: {data.shape[0]} images but 'labels' has shape {labels.shape}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DatasetFormatError(f"{path}: labels must lie in 0..{NUM_CLASSES - 1}")
    return data, labels


def _split(paths: list[Path]) -> Split:
    parts = [_read_batch(path) for path in paths]
    data = np.concatenate([images for images, _ in parts])
    labels = np.concatenate([lab for _, lab in parts])
    x = torch.from_numpy(data).reshape(-1, *IMAGE_SHAPE).float().div_(255.0)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return Split(x=(x - mean) / std, y=torch.from_numpy(labels))


def load_cifar10(data_dir: Path | None, seed: int) -> DatasetPair:
    """CIFAR-10 as a DatasetPair; the official train/test split, so ``seed`` changes nothing."""
    if data_dir is None:
        raise ValueError(
            "cifar10 needs data_dir: a directory with data_batch_1..5 and test_batch "
            "(the CIFAR-10 python version)"
        )
    if (data_dir / SUBDIR).is_dir():
        data_dir = data_dir / SUBDIR
    # Checked before parsing so that a missing file is reported before seconds of loading.
    for name in (*TRAIN_FILES, TEST_FILE):
        if not (data_dir / name).is_file():
            raise FileNotFoundError(f"CIFAR-10 batch not found: {data_dir / name}")
    train = _split([data_dir / name for name in TRAIN_FILES])
    test = _split([data_dir / TEST_FILE])
    return DatasetPair(train=train, test=test, input_shape=IMAGE_SHAPE, num_classes=NUM_CLASSES)
