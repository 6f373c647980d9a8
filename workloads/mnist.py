"""MNIST from IDX files: the project's bundled test split by default, or a user's directory.

Default (``data_dir=None``): the official MNIST test split shipped in
``workloads/data/mnist`` (10,000 images, see its README.md for attribution),
split into 8,000 training and 2,000 test images by a fixed random permutation
(NumPy's legacy ``RandomState(SPLIT_SEED)``, whose stream NumPy keeps frozen
across versions). The split ignores the ``seed`` argument on purpose: every
run, repeat and worker count is trained and evaluated on the same images, so
accuracy differences come from the training, not from the split. The
permutation also mixes the file's two halves (different writer populations).

With ``data_dir``: the standard files ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
``t10k-labels-idx1-ubyte`` (each plain or ``.gz``) as train and test.

Images become float32 [N, 1, H, W] normalised with the usual MNIST mean
0.1307 and std 0.3081; labels must lie in 0..9, and each split must hold at least one image.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from .dataset_types import DatasetFormatError, DatasetPair, Split
from .idx import read_idx

BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "mnist"
SPLIT_SEED = 2016
BUNDLED_TRAIN_SIZE = 8000
MEAN = 0.1307
STD = 0.3081
NUM_CLASSES = 10


def _find(directory: Path, stem: str) -> Path:
    candidates = [directory / stem, directory / f"{stem}.gz"]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"MNIST file not found: expected {candidates[0]} or {candidates[1].name} in {directory}"
    )


def _load_part(directory: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Images [N, H, W] and labels [N] (uint8) of ``prefix`` ('train' or 't10k')."""
    images_path = _find(directory, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(directory, f"{prefix}-labels-idx1-ubyte")
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if 0 in images.shape:  # valid IDX, but nothing to train or evaluate on
        raise DatasetFormatError(f"{images_path}: no images (header shape {list(images.shape)})")
    if images.shape[0] != labels.shape[0]:
        raise DatasetFormatError(
            f"MNIST count mismatch: {images_path} holds {images.shape[0]} images "
            f"but {labels_path} holds {labels.shape[0]} labels"
        )
    if labels.size and labels.max() >= NUM_CLASSES:
        raise DatasetFormatError(f"{labels_path}: label {labels.max()} outside 0..{NUM_CLASSES - 1}")
    return images, labels


def _split(images: np.ndarray, labels: np.ndarray) -> Split:
    x = torch.from_numpy(images.astype(np.float32)).unsqueeze(1)
    x = (x / 255.0 - MEAN) / STD
    return Split(x=x, y=torch.from_numpy(labels.astype(np.int64)))


@functools.cache
def _bundled() -> tuple[Split, Split]:
    """The bundled split, read once per process (a sweep's workers run many trials)."""
    images, labels = _load_part(BUNDLED_DIR, "t10k")
    order = np.random.RandomState(SPLIT_SEED).permutation(images.shape[0])
    # Sorted so that each part keeps the file's order: a subset, not a reshuffle.
    train_idx = np.sort(order[:BUNDLED_TRAIN_SIZE])
    test_idx = np.sort(order[BUNDLED_TRAIN_SIZE:])
    return _split(images[train_idx], labels[train_idx]), _split(images[test_idx], labels[test_idx])


def load_mnist(data_dir: Path | None, seed: int) -> DatasetPair:
    """MNIST as a DatasetPair; ``seed`` does not change the data (see the module docstring)."""
    if data_dir is None:
        # Copies: a model may change its inputs in place, and the next trial in this process gets them too.
        train, test = (Split(x=part.x.clone(), y=part.y.clone()) for part in _bundled())
    else:
        train_images, train_labels = _load_part(data_dir, "train")
        test_images, test_labels = _load_part(data_dir, "t10k")
        if train_images.shape[1:] != test_images.shape[1:]:
            raise DatasetFormatError(
                f"MNIST in {data_dir}: train images are {train_images.shape[1:]} "
                f"but test images are {test_images.shape[1:]}"
            )
        train = _split(train_images, train_labels)
        test = _split(test_images, test_labels)
    return DatasetPair(
        train=train, test=test, input_shape=tuple(train.x.shape[1:]), num_classes=NUM_CLASSES
    )
