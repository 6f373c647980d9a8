"""The sign methods (compressors.codecs.signs) on the CPU: one scale per tensor, one bit per entry.

The l1 and l2 scales follow compressors.core.pairwise (a tree over the row, float64): aligned
groups of eight leaves are summed in registers as ((a+b)+(c+d))+((e+f)+(g+h)) and pushed as
one level-3 node (common.tree_push), the rest leaf by leaf. Bits: 1 for an entry >= 0,
eight entries to a byte, little-endian.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, TREE_DEPTH, tree_push, tree_total

SIGN_MAX, L1_MEAN, L2_RMS = 0, 1, 2  # compressors.codecs.signs numbers them alike


@njit(**INLINE)
def _leaf(v, kind):
    d = np.float64(v)
    return abs(d) if kind == L1_MEAN else d * d


@njit(**INLINE)
def _tree(x, kind):
    sums = np.empty(TREE_DEPTH, np.float64)
    levels = np.empty(TREE_DEPTH, np.int64)
    n = x.size
    depth = 0
    i = 0
    while i + 8 <= n:
        left = (_leaf(x[i], kind) + _leaf(x[i + 1], kind)) + (_leaf(x[i + 2], kind) + _leaf(x[i + 3], kind))
        right = (_leaf(x[i + 4], kind) + _leaf(x[i + 5], kind)) + (_leaf(x[i + 6], kind) + _leaf(x[i + 7], kind))
        depth = tree_push(sums, levels, depth, left + right, 3)
        i += 8
    for j in range(i, n):
        depth = tree_push(sums, levels, depth, _leaf(x[j], kind), 0)
    return tree_total(sums, levels, depth, n)


@njit(**INLINE)
def _sign_max(x):
    """max |sign(x_i)| with sign(+-inf) = inf: NaN if an entry is NaN, else Inf if one is +-Inf, else 1 if
    one is nonzero, else 0. From the largest magnitude's bits (sign bit cleared): an integer maximum,
    which vectorises where a branch per entry did not; NaNs' bits lie above Inf's, zeros' at 0."""
    bits = x.view(np.uint32)
    top = np.uint32(0)
    for i in range(bits.size):
        top = max(top, bits[i] & np.uint32(0x7FFFFFFF))
    if top > np.uint32(0x7F800000):
        return F32(np.nan)
    if top == np.uint32(0x7F800000):
        return F32(np.inf)
    return F32(1.0) if top else F32(0.0)


@njit(**JIT)
def encode(x, kind, scale, packed):
    """Write the scale of float32 ``x`` (``kind``: SIGN_MAX, L1_MEAN or L2_RMS) and its sign bits."""
    n = x.size
    if n == 0:
        scale[0] = F32(0.0)
    elif kind == SIGN_MAX:
        scale[0] = _sign_max(x)
    elif kind == L1_MEAN:
        scale[0] = F32(_tree(x, kind) / np.float64(n))
    else:
        scale[0] = F32(np.sqrt(_tree(x, kind)) / np.sqrt(np.float64(n)))
    full = n // 8
    for j in range(full):
        byte = 0
        for t in range(8):
            byte |= np.int64(x[8 * j + t] >= F32(0.0)) << t
        packed[j] = np.uint8(byte)
    if n & 7:
        byte = 0
        for t in range(n & 7):
            byte |= np.int64(x[8 * full + t] >= F32(0.0)) << t
        packed[full] = np.uint8(byte)


@njit(**JIT)
def decode(scale, packed, out, add):
    """Write (``add``: add, in float32) ``+scale`` where a bit is 1 and ``-scale`` where it is 0."""
    values = np.empty(2, np.float32)
    values[0] = -scale[0]
    values[1] = scale[0]
    n = out.size
    if add:
        for i in range(n):
            out[i] += values[(packed[i >> 3] >> (i & 7)) & 1]
    else:
        for i in range(n):
            out[i] = values[(packed[i >> 3] >> (i & 7)) & 1]
