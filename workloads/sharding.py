"""Which samples each data-parallel rank trains on in an epoch."""

from __future__ import annotations

import torch


def shard_indices(
    num_samples: int, rank: int, world_size: int, epoch: int, seed: int, shuffle: bool = True
) -> torch.Tensor:
    """Rank ``rank``'s sample indices for ``epoch``, as torch's DistributedSampler (drop_last=False).

    The order is a permutation seeded by ``seed + epoch`` (or 0..N-1 without
    shuffle), padded by wrapping around to a multiple of ``world_size`` so that
    every rank gets ceil(N / world_size) indices and takes the same number of
    steps (a rank with fewer would hang the others in a collective); rank r
    takes positions r, r + world_size, ... The shards are disjoint except for
    the padding, cover all samples, and are identical on every rank that calls
    this with the same arguments, so no communication is needed.
    """
    if num_samples < 0 or world_size < 1:
        raise ValueError(f"num_samples must be >= 0 and world_size >= 1, got {num_samples}, {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if shuffle:
        gen = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(num_samples, generator=gen)
    else:
        order = torch.arange(num_samples)
    total = -(-num_samples // world_size) * world_size
    padding = total - num_samples
    if padding and num_samples:
        # repeat() covers world_size > N, where the padding is longer than the data.
        order = torch.cat([order, order.repeat(-(-padding // num_samples))[:padding]])
    return order[rank:total:world_size]
