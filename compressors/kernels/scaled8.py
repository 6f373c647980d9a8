"""Dettmers' dynamic tree and linear 8-bit types, scaled by the absolute maximum (compressors.scaled8).

Body: the block maxima (float32), then one code per element. ``block = 0``
is one block. Decode checks the codes in a first pass (linear8 never emits
255), so that a refused payload leaves ``out`` untouched.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, absmax, f32_bits


@njit(**INLINE)
def _block_of(n, block):
    return block if block > 0 else max(n, 1)


@njit(**JIT)
def dynamic8_encode(x, block, maxima, codes, bin_bound, lo_code, hi_code):
    """codes[i] = sign << 7 | the table's code of a = clamp(|x| / max, 0, 1) (0 where max is not > 0
    or a is NaN): the bin of a's bits >> 15 holds at most one bound, so one compare picks the
    bin's code below it or above it."""
    n = x.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = absmax(x, lo, hi)
        maxima[b] = m
        xs, cs = x[lo:hi], codes[lo:hi]  # indexed from range(): no negative-index fix-up
        for i in range(hi - lo):
            v = xs[i]
            a = abs(v) / m if m > F32(0.0) else F32(0.0)
            a = F32(0.0) if a != a else min(a, F32(1.0))
            j = f32_bits(a) >> np.uint32(15)
            cs[i] = (lo_code[j] if a < bin_bound[j] else hi_code[j]) | (np.uint8(128) if v < F32(0.0) else np.uint8(0))


@njit(**JIT)
def linear8_encode(x, block, maxima, codes):
    """codes[i] = clamp(rint(x / max * 127), -127, 127) + 127 (0 + 127 where max is not > 0 or NaN)."""
    n = x.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = absmax(x, lo, hi)
        maxima[b] = m
        xs, cs = x[lo:hi], codes[lo:hi]  # indexed from range(): no negative-index fix-up
        for i in range(hi - lo):
            q = np.rint(xs[i] / m * F32(127.0)) if m > F32(0.0) else F32(0.0)
            q = F32(0.0) if q != q else min(max(q, F32(-127.0)), F32(127.0))
            cs[i] = np.uint8(np.int32(q) + 127)


@njit(**JIT)
def has_code(codes, code):
    for i in range(codes.size):
        if codes[i] == code:
            return True
    return False


@njit(**JIT)
def decode(codes, maxima, block, value_of_code, out, add):
    """out[i] (+)= value_of_code[codes[i]] * its block's maximum, in float32."""
    n = codes.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = maxima[b]
        cs, os = codes[lo:hi], out[lo:hi]  # indexed from range(): no negative-index fix-up
        if add:
            for i in range(hi - lo):
                os[i] += value_of_code[cs[i]] * m
        else:
            for i in range(hi - lo):
                os[i] = value_of_code[cs[i]] * m
