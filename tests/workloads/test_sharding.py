"""Data sharding (workloads/sharding.py): the shards of torch's DistributedSampler (CPU, fast)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from workloads import shard_indices


# ---------------------------------------------------------------- shard_indices


@pytest.mark.parametrize("num_samples,world_size", [(10, 1), (10, 2), (10, 3), (7, 4), (3, 5), (1000, 8)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_match_distributed_sampler(num_samples, world_size, shuffle):
    data = range(num_samples)
    for epoch in (0, 3):
        for rank in range(world_size):
            sampler = DistributedSampler(data, world_size, rank, shuffle=shuffle, seed=11)
            sampler.set_epoch(epoch)
            shard = shard_indices(num_samples, rank, world_size, epoch, seed=11, shuffle=shuffle)
            assert shard.dtype == torch.int64
            assert shard.tolist() == list(sampler)


@pytest.mark.parametrize("num_samples,world_size", [(12, 4), (10, 3), (3, 5)])
def test_shards_cover_and_are_disjoint_up_to_padding(num_samples, world_size):
    shards = [shard_indices(num_samples, r, world_size, epoch=2, seed=0) for r in range(world_size)]
    per_rank = math.ceil(num_samples / world_size)
    assert all(len(s) == per_rank for s in shards)
    everything = torch.cat(shards)
    assert set(everything.tolist()) == set(range(num_samples))
    assert len(everything) - len(set(everything.tolist())) == per_rank * world_size - num_samples


def test_shards_deterministic_and_differ_by_epoch_and_seed():
    a = shard_indices(100, 1, 4, epoch=0, seed=5)
    assert torch.equal(a, shard_indices(100, 1, 4, epoch=0, seed=5))
    assert not torch.equal(a, shard_indices(100, 1, 4, epoch=1, seed=5))
    assert not torch.equal(a, shard_indices(100, 1, 4, epoch=0, seed=6))
    # 0..9 padded by wrapping to 0..9, 0, 1; rank 1 of 3 takes every third from position 1.
    assert shard_indices(10, 1, 3, epoch=0, seed=0, shuffle=False).tolist() == [1, 4, 7, 0]


@pytest.mark.parametrize("rank,world_size", [(2, 2), (-1, 2), (0, 0)])
def test_shards_reject_bad_rank(rank, world_size):
    with pytest.raises(ValueError):
        shard_indices(10, rank, world_size, epoch=0, seed=0)
