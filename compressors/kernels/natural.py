"""Natural compression (compressors.codecs.natural) on the CPU: integer steps on the float32 bits.

Exponent field ``E``, mantissa ``m``: the code is ``E + (U < 2 m)`` for a finite entry (at most
254), ``E`` for an infinity, and a NaN is sent as the code of -0; ``U`` is the counter hash's
24-bit draw (common.uniform times 2**24, exact).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, bits_f32, uniform

_NAN = np.uint32(0x7FC00000)


@njit(**INLINE)
def _code(w, key, i):
    """(exponent code, sign bit) of the float32 bits ``w`` of entry ``i``."""
    e = np.int64((w >> np.uint32(23)) & np.uint32(0xFF))
    m = np.int64(w & np.uint32(0x7FFFFF))
    draw = np.int64(uniform(key, i) * F32(2.0 ** 24))
    code = min(e + (1 if draw < 2 * m else 0), 254)
    negative = np.int64(w >> np.uint32(31)) if code != 0 else 0
    if e == 255:  # an infinity keeps its code; a NaN goes as the code of -0
        code = 255 if m == 0 else 0
        negative = np.int64(w >> np.uint32(31)) if m == 0 else 1
    return code, negative


@njit(**JIT)
def encode(words, key, codes, signs):
    """Write the exponent codes and sign bits of float32 bit patterns ``words`` under ``key``,
    eight entries (one byte of signs) at a time."""
    n = words.size
    for j in range((n + 7) // 8):
        byte = 0
        for t in range(min(8, n - 8 * j)):
            i = 8 * j + t
            code, negative = _code(words[i], key, i)
            codes[i] = np.uint8(code)
            byte |= negative << t
        signs[j] = np.uint8(byte)


@njit(**JIT)
def decode(codes, signs, out, add):
    """Write (``add``: add, in float32) ``(-1)**sign * 2**(code - 127)``: a table of the 512 values
    of (sign, code), as float32 bits, then one lookup an entry."""
    table = np.empty(512, np.float32)
    for code in range(256):
        table[code] = bits_f32(np.uint32(code << 23))
        table[256 + code] = bits_f32(np.uint32((code << 23) | (1 << 31)))
    table[256] = bits_f32(_NAN)
    n = out.size
    if add:
        for i in range(n):
            out[i] += table[(((signs[i >> 3] >> (i & 7)) & 1) << 8) | codes[i]]
    else:
        for i in range(n):
            out[i] = table[(((signs[i >> 3] >> (i & 7)) & 1) << 8) | codes[i]]
