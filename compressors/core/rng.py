"""Counter-based uniform random numbers for stochastic rounding.

``u = hash(key(seed, step, rank, stream), index)``: no global RNG state, so a
payload depends only on its inputs and every backend (this torch/numpy code,
the CUDA kernels) draws the same numbers.  The element hash is
``fmix32(index * 0x9E3779B1 ^ key)`` (MurmurHash3's finaliser) and the
uniform is its top 24 bits times 2**-24, exact in float32, in [0, 1).

A sample of k distinct indices of n (random-k's choice) is the first k of a
keyed permutation of 0..n-1 (``permuted``): a 4-round Feistel network on
2h-bit integers (the smallest h >= 1 with 4**h >= n), whose round function is
the element hash above under a key per round, walked in cycles until it lands
below n (Black and Rogaway's cycle walking). A permutation, so the k indices
are distinct without a check, each computed on its own (k hashes, not n); the
network's domain is at most 4n, so a walk takes at most four rounds of it on average.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

_M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B1
FMIX1 = 0x85EBCA6B
FMIX2 = 0xC2B2AE35


def fmix32(x: int) -> int:
    x &= _M32
    x ^= x >> 16
    x = (x * FMIX1) & _M32
    x ^= x >> 13
    x = (x * FMIX2) & _M32
    x ^= x >> 16
    return x


def stream_key(seed: int, step: int, rank: int, stream: int) -> int:
    """Fold the four counters into one 32-bit key (chained fmix32)."""
    return fmix32(_prefix(seed, step, rank) ^ _mixed(stream))


# A step encodes many streams (tensors, chunks) under one (seed, step, rank), the same streams every step:
# both halves kept, the eight fmix32 of a key in pure Python cost more than a small tensor's kernels.
@functools.lru_cache(maxsize=64)
def _prefix(seed: int, step: int, rank: int) -> int:
    key = 0
    for part in (seed, step, rank):
        key = fmix32(key ^ _mixed(part))
    return key


@functools.lru_cache(maxsize=4096)
def _mixed(part: int) -> int:
    return fmix32((part & _M32) + GOLDEN)


PERMUTATION_ROUNDS = 4


def permutation_half_bits(n: int) -> int:
    """h of ``permuted``'s network: the smallest h >= 1 with 4**h >= n."""
    return max(1, -(-(max(n, 1) - 1).bit_length() // 2))


def round_keys(key: int) -> list[int]:
    """The network's key of each round: fmix32(key + (round + 1) * GOLDEN)."""
    return [fmix32((key + (r + 1) * GOLDEN) & _M32) for r in range(PERMUTATION_ROUNDS)]


def permuted(key: int, n: int, count: int) -> np.ndarray:
    """The first ``count`` of the keyed permutation of ``0..n-1`` (int64): ``permute(j)`` for
    ``j < count``, each walked until below ``n``."""
    if count == 0:
        return np.zeros(0, np.int64)
    half = permutation_half_bits(n)
    keys = [np.uint32(k) for k in round_keys(key)]
    x = _feistel(np.arange(count, dtype=np.uint32), half, keys)
    out = x >= n
    while out.any():
        x[out] = _feistel(x[out], half, keys)
        out = x >= n
    return x.astype(np.int64)


def _feistel(x: np.ndarray, half: int, keys: list[np.uint32]) -> np.ndarray:
    mask = np.uint32((1 << half) - 1)
    left, right = x >> np.uint32(half), x & mask
    for k in keys:
        left, right = right, left ^ (_hash_numpy(right, k) & mask)
    return (left << np.uint32(half)) | right


def _hash_numpy(index: np.ndarray, key: np.uint32) -> np.ndarray:
    """fmix32(index * GOLDEN ^ key) of each uint32 index (uint32 arithmetic wraps in numpy)."""
    x = index * np.uint32(GOLDEN)
    x ^= key
    x ^= x >> np.uint32(16)
    x *= np.uint32(FMIX1)
    x ^= x >> np.uint32(13)
    x *= np.uint32(FMIX2)
    x ^= x >> np.uint32(16)
    return x


def uniform(key: int, n: int, device: torch.device, start: int = 0) -> torch.Tensor:
    """``n`` float32 uniforms for element indices ``start..start+n-1`` under ``key``."""
    if torch.device(device).type == "cpu":
        return torch.from_numpy(_uniform_numpy(key, n, start))
    return _uniform_torch(key, n, device, start)


def _uniform_numpy(key: int, n: int, start: int = 0) -> np.ndarray:
    # numpy's uint32 arithmetic wraps by definition and is ~4x faster than
    # emulating it with torch int32 on the CPU.
    x = _hash_numpy(np.arange(start, start + n, dtype=np.uint32), np.uint32(key))
    x >>= np.uint32(8)
    return x.astype(np.float32) * np.float32(2.0**-24)


def _signed32(c: int) -> int:
    return c - (1 << 32) if c >= 1 << 31 else c


def _uniform_torch(key: int, n: int, device: torch.device, start: int = 0) -> torch.Tensor:
    # int32 multiplication wraps modulo 2**32 on every torch backend; right
    # shifts are arithmetic, so mask the sign-extended bits away.
    # Indices stay below 2**31 (wire.MAX_NUMEL), so int32 holds them.
    x = torch.arange(start, start + n, dtype=torch.int32, device=device)
    x = x * _signed32(GOLDEN)
    x = x ^ _signed32(key)
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _signed32(FMIX1)
    x = x ^ ((x >> 13) & 0x7FFFF)
    x = x * _signed32(FMIX2)
    x = x ^ ((x >> 16) & 0xFFFF)
    return ((x >> 8) & 0xFFFFFF).to(torch.float32) * (2.0**-24)
