"""The sign methods (compressors.codecs.signs) on the CPU: one scale per tensor, one bit per entry.

The l1 and l2 scales follow compressors.core.pairwise (a tree over the row, float64:
common.tree_sum). Bits: 1 for an entry >= 0,
eight entries to a byte, little-endian.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, LEAF_ABS, LEAF_SQUARE, tree_sum

SIGN_MAX, L1_MEAN, L2_RMS = 0, 1, 2  # compressors.codecs.signs numbers them alike


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
        scale[0] = F32(tree_sum(x, 0.0, LEAF_ABS) / np.float64(n))
    else:
        scale[0] = F32(np.sqrt(tree_sum(x, 0.0, LEAF_SQUARE)) / np.sqrt(np.float64(n)))
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
