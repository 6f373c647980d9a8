"""DDP's gradient buckets: which parameters it averages together, and in what order.

DistributedDataParallel assigns its parameters to buckets as the C++ reducer's
``compute_bucket_assignment_by_size`` does, over the parameters in reverse order of
``model.parameters()`` (about the order backward makes their gradients): each dtype and device fills
buckets of its own, and a bucket closes once it holds at least its limit in bytes: without
``bucket_cap_mb`` the first ``FIRST_BUCKET_BYTES`` (1 MiB, so that the last layers' gradients go out
early) and the others 25 MiB; with it, every one ``bucket_cap_mb``, the first too (torch 2.13's
``_BucketCapacityConfig``). The buckets are reduced in the order of their least index.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

DEFAULT_BUCKET_CAP_MB = 25
FIRST_BUCKET_BYTES = 1024 * 1024
_MIB = 1024 * 1024


def assign(tensors: Sequence[torch.Tensor], limits: Sequence[int]) -> list[list[int]]:
    """The buckets of ``tensors`` as indices into it, sorted by their least index. The tensors of one
    dtype and device fill buckets of their own, in the given order; the k-th bucket of a kind closes once
    it holds at least ``limits[k]`` bytes (the last limit for every later one); the open ones end the list."""
    closed: list[list[int]] = []
    filling: dict[tuple[torch.dtype, torch.device], tuple[list[int], int]] = {}
    done: dict[tuple[torch.dtype, torch.device], int] = {}
    for index, tensor in enumerate(tensors):
        kind = (tensor.dtype, tensor.device)
        members, size = filling.pop(kind, ([], 0))
        members.append(index)
        size += tensor.numel() * tensor.element_size()
        if size >= limits[min(done.get(kind, 0), len(limits) - 1)]:
            closed.append(members)
            done[kind] = done.get(kind, 0) + 1
        else:
            filling[kind] = (members, size)
    return sorted([*closed, *(members for members, _ in filling.values())], key=min)


def buckets_of(shapes: Sequence[tuple[int, ...]], bucket_cap_mb: float | None) -> list[list[int]]:
    """DDP's buckets of fp32 parameters of ``shapes`` (in ``model.parameters()`` order) as parameter
    indices, in the order they are reduced: the parameters in reverse, 1 MiB for the first bucket and
    25 MiB for the others, or ``bucket_cap_mb`` for each."""
    limits = [FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_MB * _MIB] if bucket_cap_mb is None else \
        [int(bucket_cap_mb * _MIB)]
    last = len(shapes) - 1
    grads = [torch.empty(shapes[last - j], device="meta") for j in range(len(shapes))]
    return [[last - j for j in bucket] for bucket in assign(grads, limits)]
