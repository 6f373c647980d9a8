"""Random-k (compressors.codecs.randomk) on the CPU: the counter-hash draws, the k largest of them.

The draws ``u_i`` (common.uniform, as compressors.core.rng makes them) are non-negative float32,
so their bits order as their values and select.select_largest (the radix select of top-k)
chooses the same k entries as the reference: the largest, ties by ascending index.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, JIT, uniform
from .select import select_largest


@njit(**JIT)
def _chosen(key, n, k):
    u = np.empty(n, np.float32)
    for i in range(n):
        u[i] = uniform(key, i)
    idx = np.empty(k, np.int32)
    select_largest(u.view(np.uint32), k, idx)
    return idx


@njit(**JIT)
def encode(x, key, values):
    """Write the values of float32 ``x`` at the ``values.size`` entries ``key`` chooses, ascending."""
    idx = _chosen(key, x.size, values.size)
    for j in range(idx.size):
        values[j] = x[idx[j]]


@njit(**JIT)
def decode(key, values, out, add):
    """Write (``add``: add, in float32) the values at the chosen entries, 0 elsewhere. Adding adds
    +0.0 to the others too, as the reference's dense add does (a -0.0 there becomes +0.0)."""
    n = out.size
    idx = _chosen(key, n, values.size)
    j = 0
    for i in range(n):
        v = F32(0.0)
        if j < idx.size and idx[j] == i:
            v = values[j]
            j += 1
        if add:
            out[i] += v
        else:
            out[i] = v
