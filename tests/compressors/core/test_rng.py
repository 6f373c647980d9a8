"""The counter hash (compressors/core/rng.py): the NumPy and torch paths agree bit for bit and follow
the documented hash, MurmurHash3's finaliser written out here.
"""
from __future__ import annotations

import pytest
import torch

from compressors.core import rng


@pytest.mark.parametrize("key", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x12345678, rng.stream_key(3, 9, 1, 4)])
def test_rng_numpy_and_torch_paths_agree_bit_for_bit(key):
    n = 70001
    a = torch.from_numpy(rng._uniform_numpy(key, n))
    b = rng._uniform_torch(key, n, torch.device("cpu"))
    assert a.dtype == b.dtype == torch.float32
    assert torch.equal(a, b)
    assert torch.equal(rng.uniform(key, n, "cpu"), a)
    assert float(a.min()) >= 0.0 and float(a.max()) < 1.0
    assert 0.49 < float(a.double().mean()) < 0.51
    # the documented hash: top 24 bits of fmix32(index * 0x9E3779B1 ^ key), times 2^-24
    for i in (0, 1, 2, 12345, n - 1):
        h = murmur_fmix32(((i * 0x9E3779B1) % 2**32) ^ key)
        assert float(a[i]) == (h >> 8) * 2.0**-24


def murmur_fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser, written out from the reference C code."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    return h ^ (h >> 16)


def test_fmix32_is_murmur3_finaliser():
    for h in [0, 1, 2, 0xDEADBEEF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF] + list(range(3, 3000, 97)):
        assert rng.fmix32(h) == murmur_fmix32(h)
