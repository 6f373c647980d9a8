"""The dataset containers shared by every loader, the tasks they serve, and the malformed-file error."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

# What a dataset's samples are for. classification: x -> one label in [0, num_classes), cross-entropy and
# accuracy. language_model: a sequence of token ids -> the next token at every position, cross-entropy in
# nats per token, perplexity and next-token accuracy.
CLASSIFICATION = "classification"
LANGUAGE_MODEL = "language_model"
TASKS = (CLASSIFICATION, LANGUAGE_MODEL)


class DatasetFormatError(ValueError):
    """A dataset file exists but does not hold what its format promises."""


@dataclass(frozen=True)
class Split:
    """One split held in memory: inputs ``x`` [N, ...] and targets ``y`` int64.

    Classification: x float32, y [N] labels. Language model: x int64 [N, T] token ids, y int64 [N, T]
    the next token at each position.
    """

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        # Checked once here so that training code can index x and y without re-checking.
        if self.x.dtype not in (torch.float32, torch.int64) or self.y.dtype != torch.int64:
            raise TypeError(f"Split needs float32 (or int64 token) x and int64 y, got {self.x.dtype} and "
                            f"{self.y.dtype}")
        if self.y.dim() == 0 or self.x.dim() == 0 or self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"Split x {tuple(self.x.shape)} and y {tuple(self.y.shape)} disagree on N")

    def __len__(self) -> int:
        return self.y.shape[0]


@dataclass(frozen=True)
class DatasetPair:
    """Train and test splits with the per-sample input shape, the number of classes and the task.

    A split is a ``Split`` held in memory (the small built-ins: indexed directly) or any map-style
    torch ``Dataset`` of ``(x, y)`` samples (streamed: read through a DataLoader whose
    DistributedSampler gives each rank its own shard). A language model's input_shape is
    ``(sequence length,)`` and its num_classes the vocabulary size.
    """

    train: Split | Dataset
    test: Split | Dataset
    input_shape: tuple[int, ...]
    num_classes: int
    task: str = CLASSIFICATION

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {self.num_classes!r}")
