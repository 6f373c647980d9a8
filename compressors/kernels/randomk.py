"""Random-k (compressors.codecs.randomk) on the CPU: the first k of compressors.core.rng's keyed
permutation, each index drawn on its own (k hashes a network round, not n).

The network's pass over every j has no branch and vectorises (32-bit steps: mul32, shr32); the
few indices that land at or above n (at most 3 in 4, for n = 1; fewer for larger n) walk on one by one after it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, U32, f32_bits, hash32, mul32, shr32


@njit(**INLINE)
def _network(k0, k1, k2, k3, half, x):
    """rng._feistel of one uint32: four rounds (rng.PERMUTATION_ROUNDS, keys k0..k3) on the halves of
    2 * half bits; the rounds written out, so that a loop over x vectorises."""
    mask = U32((1 << half) - 1)
    left = shr32(x, U32(half))
    right = U32(x & mask)
    left = U32(left ^ (hash32(k0, right) & mask))
    right = U32(right ^ (hash32(k1, left) & mask))
    left = U32(left ^ (hash32(k2, right) & mask))
    right = U32(right ^ (hash32(k3, left) & mask))
    return U32(mul32(left, U32(1 << half)) | right)


@njit(**INLINE)
def _indices(keys, half, n, idx):
    """idx[j] = rng.permuted's j-th index, for j < idx.size."""
    k0, k1, k2, k3 = keys[0], keys[1], keys[2], keys[3]
    for j in range(idx.size):
        idx[j] = _network(k0, k1, k2, k3, half, U32(j))
    for j in range(idx.size):
        x = U32(idx[j])
        while x >= n:
            x = _network(k0, k1, k2, k3, half, x)
        idx[j] = x


@njit(**JIT)
def encode(x, keys, half, values):
    """values[j] = x at the j-th index of the permutation (``keys``: rng.round_keys, as uint32)."""
    idx = np.empty(values.size, np.int64)
    _indices(keys, half, x.size, idx)
    for j in range(values.size):
        values[j] = x[idx[j]]


@njit(**JIT)
def decode(keys, half, values, out, add):
    """out[index j] = values[j], the rest of ``out`` +0.0 (the caller zeroes it first; numpy's fill
    runs at memset's speed, a loop here at 2/3 of it); with ``add``: out + value at the chosen
    entries and out + 0.0 elsewhere, as the reference's dense add (a -0.0 there becomes +0.0, a
    signalling NaN quiet; the other entries are only read)."""
    k = values.size
    idx = np.empty(k, np.int64)
    _indices(keys, half, out.size, idx)
    if not add:
        for j in range(k):
            out[idx[j]] = values[j]
        return
    old = np.empty(k, np.float32)
    for j in range(k):
        old[j] = out[idx[j]]
    for i in range(out.size):
        v = out[i]
        if f32_bits(v) == U32(0x80000000) or v != v:  # -0.0 becomes +0.0 and a signalling NaN quiet, as + 0.0 does
            out[i] = v + F32(0.0)
    for j in range(k):
        out[idx[j]] = old[j] + values[j]
