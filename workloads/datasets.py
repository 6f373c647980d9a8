"""The built-in datasets by name: ``build_builtin_dataset(name, ...)`` for the names of ``DATASETS``
(``catalog.build_dataset`` also takes the user's own factories).

Image classification: mnist, cifar10, synthetic, held in memory as ``Split``s;
image_folder (torchvision's ImageFolder layout, decoded per sample: streamed).
Language modelling: python_source (the interpreter's standard library as bytes,
in memory) and tokens (nanoGPT's uint16 token files, memory-mapped), whose
splits are ``tokens.TokenWindows``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compressors.core.params import SHAPE, Param

from .cifar10 import load_cifar10
from .dataset_types import CLASSIFICATION, LANGUAGE_MODEL, DatasetPair
from .image_folder import load_image_folder, torchvision_missing
from .mnist import load_mnist
from .options import Builder, call_builder, distinct_options
from .synthetic import load_synthetic
from .tokens import load_python_source, load_tokens

_SYNTHETIC = (
    Param("input_shape", None, SHAPE, nullable=True, doc="synthetic: shape of one sample (null: [1, 28, 28])"),
    Param("num_classes", None, int, low=2, nullable=True, doc="synthetic: number of classes (null: 10)"),
    Param("num_samples", None, int, low=1, nullable=True, doc="synthetic: training samples (null: 1024)"),
    Param("test_samples", None, int, low=1, nullable=True,
          doc="synthetic: test samples (null: max(256, num_samples // 4))"),
)
# Declared once: a name means the same option for every dataset that takes it.
SEQ_LEN = Param("seq_len", None, int, low=1, nullable=True,
                doc="python_source, tokens: tokens per training sequence (null: 64)")
VOCAB_SIZE = Param("vocab_size", None, int, low=1, nullable=True,
                   doc="tokens: vocabulary size (null: the largest token id + 1)")
DATASETS: dict[str, Builder] = {
    "mnist": Builder(load_mnist),
    "cifar10": Builder(load_cifar10),
    "synthetic": Builder(load_synthetic, _SYNTHETIC),
    "python_source": Builder(load_python_source, (SEQ_LEN,)),
    "tokens": Builder(load_tokens, (SEQ_LEN, VOCAB_SIZE)),
    "image_folder": Builder(load_image_folder, (
        Param("image_size", None, int, low=1, nullable=True,
              doc="image_folder: side of the square crop fed to the model (null: 224)"),),
        requires=torchvision_missing),
}
DATASET_NAMES = tuple(DATASETS)
# The task each built-in dataset serves.
DATASET_TASKS = {name: LANGUAGE_MODEL if name in ("python_source", "tokens") else CLASSIFICATION for name in DATASETS}
DATASET_OPTIONS = distinct_options(DATASETS)
# What each dataset does with data_dir: None = reads no files, else "optional" or "required".
DATA_DIR = {"mnist": "optional", "cifar10": "required", "synthetic": None, "python_source": None,
            "tokens": "required", "image_folder": "required"}


def dataset_options(name: str) -> tuple[Param, ...]:
    """The options dataset ``name`` takes (ValueError for an unknown dataset)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(DATASETS)}")
    return DATASETS[name].options


def build_builtin_dataset(
    name: str, *, data_dir: str | os.PathLike[str] | None = None, seed: int = 0, **options: Any
) -> DatasetPair:
    """Load dataset ``name``: mnist, cifar10, synthetic and python_source into memory, tokens memory-mapped,
    image_folder decoded per sample.

    ``data_dir``: the user's files (mnist: IDX files, optional, default the
    bundled split; cifar10: required; tokens: train.bin and val.bin, required;
    image_folder: train/ and val/ of class folders, required;
    synthetic, python_source: must be unset). ``seed`` only changes synthetic
    data; the others have fixed splits. ``options`` are the dataset's own
    keywords (``DATASET_OPTIONS``; synthetic: input_shape, num_classes,
    num_samples, test_samples; python_source: seq_len; tokens: seq_len,
    vocab_size; image_folder: image_size); unknown names raise ValueError listing the valid ones.
    """
    directory = None if data_dir is None else Path(data_dir).expanduser()
    return call_builder("dataset", name, DATASETS, (directory, seed), options)
