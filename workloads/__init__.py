"""Workloads of the study: datasets and models by name, gradient-size summaries, data sharding.

Knows nothing of compression or Ray; everything here is plain torch on CPU or GPU.
"""

from .dataset_types import DatasetFormatError, DatasetPair, Split
from .datasets import DATASET_NAMES, build_dataset
from .models import MODEL_NAMES, build_model
from .sharding import shard_indices
from .summary import model_summary

__all__ = [
    "DATASET_NAMES",
    "MODEL_NAMES",
    "DatasetFormatError",
    "DatasetPair",
    "Split",
    "build_dataset",
    "build_model",
    "model_summary",
    "shard_indices",
]
