"""Synthetic classification data of any input shape and class count, deterministic per seed.

Each sample has a hidden latent ``z`` (standard normal, LATENT_DIM = 32
entries). Its label comes from a fixed random linear teacher on the latent,
``y = argmax_c <a_c, z>`` with ``a_c`` random unit vectors (unit length keeps
the classes near balanced: within about ±35% of 1/C even for 1000 classes).
Its input is a fixed random linear image of the latent plus noise,
``x = (z P + 0.5 e) / sqrt(1.25)`` with ``P`` a random [32, D] map (entries of
variance 1/32) and ``e`` standard normal, so every input entry has unit
variance, 80% of it signal. Labels are thus a noisy linear function of the
inputs, and the task is learnable from few samples: a linear model trained on
the default 1,024 MNIST-shaped samples reaches about 80% test accuracy, so
training curves mean something. The teacher and ``P`` are small (a few MB even
for 3x224x224 inputs and 1000 classes).

Everything (teacher, ``P``, train and test samples) is drawn from one
``torch.Generator`` seeded with ``seed``: equal seeds and options give equal
data, different seeds different data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from .dataset_types import DatasetPair, Split

LATENT_DIM = 32
NOISE_STD = 0.5


def _samples(
    count: int, shape: tuple[int, ...], image: torch.Tensor, teacher: torch.Tensor, gen: torch.Generator
) -> Split:
    latent = torch.randn(count, LATENT_DIM, generator=gen)
    x = latent @ image
    x += NOISE_STD * torch.randn(x.shape, generator=gen)
    x /= math.sqrt(1.0 + NOISE_STD**2)
    return Split(x=x.reshape(count, *shape), y=(latent @ teacher.T).argmax(dim=1))


def load_synthetic(
    data_dir: Path | None,
    seed: int,
    *,
    input_shape: Sequence[int] = (1, 28, 28),
    num_classes: int = 10,
    num_samples: int = 1024,
    test_samples: int | None = None,
) -> DatasetPair:
    """``num_samples`` training and ``test_samples`` (default max(256, num_samples // 4)) test samples."""
    if data_dir is not None:
        raise ValueError(f"the synthetic dataset reads no files; leave data_dir unset (got {data_dir})")
    shape = tuple(input_shape)
    if test_samples is None:
        test_samples = max(256, num_samples // 4)
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(num_classes, LATENT_DIM, generator=gen)
    teacher /= teacher.norm(dim=1, keepdim=True)
    image = torch.randn(LATENT_DIM, math.prod(shape), generator=gen) / math.sqrt(LATENT_DIM)
    train = _samples(num_samples, shape, image, teacher, gen)
    test = _samples(test_samples, shape, image, teacher, gen)
    return DatasetPair(train=train, test=test, input_shape=shape, num_classes=num_classes)
