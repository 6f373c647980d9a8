"""Datasets by name: ``build_dataset("mnist" | "cifar10" | "synthetic", ...)``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cifar10 import load_cifar10
from .dataset_types import DatasetPair
from .mnist import load_mnist
from .options import call_builder
from .synthetic import load_synthetic

DATASETS: dict[str, Callable[..., DatasetPair]] = {
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "synthetic": load_synthetic,
}
DATASET_NAMES = tuple(DATASETS)


def build_dataset(
    name: str, *, data_dir: str | os.PathLike[str] | None = None, seed: int = 0, **options: Any
) -> DatasetPair:
    """Load dataset ``name`` fully into memory.

    ``data_dir``: the user's files (mnist: IDX files, optional, default the
    bundled split; cifar10: required; synthetic: must be unset). ``seed`` only
    changes synthetic data; real datasets have fixed splits. ``options`` are the
    dataset's own keywords (synthetic: input_shape, num_classes, num_samples,
    test_samples); unknown names raise ValueError listing the valid ones.
    """
    directory = None if data_dir is None else Path(data_dir).expanduser()
    return call_builder("dataset", name, DATASETS, (directory, seed), options)
