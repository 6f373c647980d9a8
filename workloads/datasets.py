"""Datasets by name: ``build_dataset("mnist" | "cifar10" | "synthetic", ...)``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compressors.core.params import SHAPE, Param

from .cifar10 import load_cifar10
from .dataset_types import DatasetPair
from .mnist import load_mnist
from .options import Builder, call_builder, distinct_options
from .synthetic import load_synthetic

_SYNTHETIC = (
    Param("input_shape", None, SHAPE, nullable=True, doc="synthetic: shape of one sample (null: [1, 28, 28])"),
    Param("num_classes", None, int, low=2, nullable=True, doc="synthetic: number of classes (null: 10)"),
    Param("num_samples", None, int, low=1, nullable=True, doc="synthetic: training samples (null: 1024)"),
    Param("test_samples", None, int, low=1, nullable=True,
          doc="synthetic: test samples (null: max(256, num_samples // 4))"),
)
DATASETS: dict[str, Builder] = {
    "mnist": Builder(load_mnist),
    "cifar10": Builder(load_cifar10),
    "synthetic": Builder(load_synthetic, _SYNTHETIC),
}
DATASET_NAMES = tuple(DATASETS)
DATASET_OPTIONS = distinct_options(DATASETS)
# What each dataset does with data_dir: None = reads no files, else "optional" or "required".
DATA_DIR = {"mnist": "optional", "cifar10": "required", "synthetic": None}


def dataset_options(name: str) -> tuple[Param, ...]:
    """The options dataset ``name`` takes (ValueError for an unknown dataset)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(DATASETS)}")
    return DATASETS[name].options


def build_dataset(
    name: str, *, data_dir: str | os.PathLike[str] | None = None, seed: int = 0, **options: Any
) -> DatasetPair:
    """Load dataset ``name`` fully into memory.

    ``data_dir``: the user's files (mnist: IDX files, optional, default the
    bundled split; cifar10: required; synthetic: must be unset). ``seed`` only
    changes synthetic data; real datasets have fixed splits. ``options`` are the
    dataset's own keywords (``DATASET_OPTIONS``; synthetic: input_shape,
    num_classes, num_samples, test_samples); unknown names raise ValueError
    listing the valid ones.
    """
    directory = None if data_dir is None else Path(data_dir).expanduser()
    return call_builder("dataset", name, DATASETS, (directory, seed), options)
