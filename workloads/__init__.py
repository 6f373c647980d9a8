"""Workloads of the study: datasets and models by name, gradient-size summaries, data sharding.

Knows nothing of compression or Ray; everything here is plain torch on CPU or GPU.
"""

from .dataset_types import CLASSIFICATION, LANGUAGE_MODEL, TASKS, DatasetFormatError, DatasetPair, Split
from .datasets import DATA_DIR, DATASET_NAMES, DATASET_OPTIONS, build_dataset, dataset_options
from .models import MODEL_NAMES, MODEL_OPTIONS, build_model, model_options
from .sharding import shard_indices
from .model_summary import model_summary

__all__ = [
    "CLASSIFICATION",
    "LANGUAGE_MODEL",
    "TASKS",
    "DATASET_NAMES",
    "DATASET_OPTIONS",
    "DATA_DIR",
    "MODEL_NAMES",
    "MODEL_OPTIONS",
    "DatasetFormatError",
    "DatasetPair",
    "Split",
    "build_dataset",
    "build_model",
    "dataset_options",
    "model_options",
    "model_summary",
    "shard_indices",
]
