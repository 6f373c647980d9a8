"""Workloads of the study: datasets and models by name (built in, torchvision's, or the user's own by
import reference: ``catalog``), gradient-size summaries, data sharding.

Knows nothing of compression or Ray; everything here is plain torch on CPU or GPU.
"""

from .dataset_types import CLASSIFICATION, LANGUAGE_MODEL, TASKS, DatasetFormatError, DatasetPair, Split
from .catalog import (
    BUILTIN, REFERENCE, TORCHVISION, build_dataset, build_model, dataset_kind, dataset_problem, model_kind,
    model_problem, sources,
)
from .datasets import DATA_DIR, DATASET_NAMES, DATASET_OPTIONS, DATASET_TASKS, dataset_options
from .models import MODEL_NAMES, MODEL_OPTIONS, MODEL_TASKS, model_options
from .references import ReferenceProblem, import_module
from .torchvision_models import TORCHVISION_PREFIX
from .sharding import shard_indices
from .tokens import TokenWindows, python_source_info
from .model_summary import model_summary

__all__ = [
    "BUILTIN",
    "REFERENCE",
    "TORCHVISION",
    "TORCHVISION_PREFIX",
    "ReferenceProblem",
    "build_dataset",
    "build_model",
    "dataset_kind",
    "dataset_problem",
    "import_module",
    "model_kind",
    "model_problem",
    "sources",
    "CLASSIFICATION",
    "LANGUAGE_MODEL",
    "TASKS",
    "DATASET_NAMES",
    "DATASET_OPTIONS",
    "DATASET_TASKS",
    "DATA_DIR",
    "MODEL_NAMES",
    "MODEL_OPTIONS",
    "MODEL_TASKS",
    "DatasetFormatError",
    "DatasetPair",
    "Split",
    "TokenWindows",
    "dataset_options",
    "model_options",
    "model_summary",
    "python_source_info",
    "shard_indices",
]
