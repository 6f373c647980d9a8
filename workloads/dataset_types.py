"""In-memory dataset containers shared by every loader, and the malformed-file error."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class DatasetFormatError(ValueError):
    """A dataset file exists but does not hold what its format promises."""


@dataclass(frozen=True)
class Split:
    """One split held in memory: inputs ``x`` float32 [N, ...] and labels ``y`` int64 [N]."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        # Checked once here so that training code can index x and y without re-checking.
        if self.x.dtype != torch.float32 or self.y.dtype != torch.int64:
            raise TypeError(f"Split needs float32 x and int64 y, got {self.x.dtype} and {self.y.dtype}")
        if self.y.dim() != 1 or self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"Split x {tuple(self.x.shape)} and y {tuple(self.y.shape)} disagree on N")

    def __len__(self) -> int:
        return self.y.shape[0]


@dataclass(frozen=True)
class DatasetPair:
    """Train and test splits with the per-sample input shape and the number of classes."""

    train: Split
    test: Split
    input_shape: tuple[int, ...]
    num_classes: int
