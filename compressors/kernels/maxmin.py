"""The max-min quantizer (compressors.codecs.maxmin) on the CPU.

Bucket by bucket: its min and max (NaN if it holds one, a zero as +0.0), then its entries'
levels from the float64 unit and the counter-hash draw (common.uniform), into a scratch of
one byte an entry. The levels are then packed eight at a time: eight codes of ``bits`` bits
fill ``bits`` bytes exactly (the little-endian stream of compressors.core.bits), the last group
as many bytes as remain. Decode reads each code from its bit offset, bucket by bucket.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, uniform


@njit(**INLINE)
def _min_max(x, lo, hi):
    """(min, max) of x[lo:hi], NaN for both if one entry is NaN, zeros as +0.0."""
    a = x[lo]
    b = x[lo]
    for i in range(lo, hi):
        v = x[i]
        if np.isnan(v):
            return F32(np.nan), F32(np.nan)
        a = min(a, v)
        b = max(b, v)
    return a + F32(0.0), b + F32(0.0)


@njit(**JIT)
def encode(x, key, bits, bucket, mins, maxs, packed):
    """Write the minima, maxima and packed levels of float32 ``x`` under the counter-hash ``key``."""
    n = x.size
    top = (1 << bits) - 1
    levels = np.zeros(n, np.uint8)
    for b in range((n + bucket - 1) // bucket):
        lo = b * bucket
        hi = min(lo + bucket, n)
        mn, mx = _min_max(x, lo, hi)
        mins[b] = mn
        maxs[b] = mx
        low = np.float64(mn)
        unit = (np.float64(mx) - low) / top
        if unit > 0.0:  # else every level is 0 (a constant bucket, or a NaN in it)
            for i in range(lo, hi):
                d = math.floor((np.float64(x[i]) - low) / unit + np.float64(uniform(key, i)))
                if d > 0.0:  # a NaN is not: level 0
                    levels[i] = np.uint8(min(d, np.float64(top)))
    for g in range((n + 7) // 8):
        word = np.uint64(0)
        for t in range(min(8, n - 8 * g)):
            word |= np.uint64(levels[8 * g + t]) << np.uint64(t * bits)
        for j in range(min(bits, packed.size - g * bits)):
            packed[g * bits + j] = np.uint8((word >> np.uint64(8 * j)) & np.uint64(0xFF))


@njit(**INLINE)
def _decode_bucket(packed, bits, lo, hi, low, unit, out, add):
    mask = (1 << bits) - 1
    for i in range(lo, hi):
        at = i * bits
        word = np.int64(packed[at >> 3]) >> (at & 7)
        if (at & 7) + bits > 8:
            word |= np.int64(packed[(at >> 3) + 1]) << (8 - (at & 7))
        v = F32(low + unit * np.float64(word & mask))
        if add:
            out[i] += v
        else:
            out[i] = v


@njit(**JIT)
def decode(mins, maxs, packed, bits, bucket, out, add):
    """Write (``add``: add, in float32) ``min + unit * level``, computed in float64, bucket by bucket;
    code i is read from bits [i * bits, (i + 1) * bits) of the stream."""
    n = out.size
    top = (1 << bits) - 1
    for b in range((n + bucket - 1) // bucket):
        lo = b * bucket
        hi = min(lo + bucket, n)
        low = np.float64(mins[b])
        unit = (np.float64(maxs[b]) - low) / top
        if add:
            _decode_bucket(packed, bits, lo, hi, low, unit, out, True)
        else:
            _decode_bucket(packed, bits, lo, hi, low, unit, out, False)
