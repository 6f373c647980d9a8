"""Rounding a float32 to a narrow float type (compressors.core.minifloat) on its bits, and the fp8
codec's kernels (compressors.codecs.fp8).

``rne_code`` is the round-to-nearest-even code of a magnitude: in the type's normal range the float32
mantissa's low ``23 - mbits`` bits decide (above half: up; exactly half: up where the kept bits are
odd), a carry moving into the next binade as the code's exponent field; below the smallest normal,
``rint(a * 2**(bias - 1 + mbits))`` counts subnormal steps (exact: a power-of-two scaling), its
rounding half to even. Codes beyond ``max_code`` saturate to it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, absmax, bits_f32, f32_bits, uniform


@njit(**INLINE)
def rne_code(a_bits, mbits, bias, max_code):
    """The code of the magnitude whose float32 bits are ``a_bits`` (finite, sign clear)."""
    a_bits = np.uint32(a_bits)
    if a_bits < np.uint32((128 - bias) << 23):  # below 2**(1 - bias): a subnormal of the type
        steps = np.rint(bits_f32(a_bits) * F32(2.0 ** (bias - 1 + mbits)))
        code = np.int64(steps)
    else:
        shift = 23 - mbits
        keep = np.int64((a_bits & np.uint32(0x7FFFFF)) >> np.uint32(shift))
        rem = a_bits & np.uint32((1 << shift) - 1)
        half = np.uint32(1 << (shift - 1))
        code = ((np.int64(a_bits >> np.uint32(23)) - 127 + bias) << mbits) + keep
        if rem > half or (rem == half and (keep & 1) == 1):
            code += 1
    return code if code < max_code else np.int64(max_code)


@njit(**INLINE)
def stochastic_code(a, nearest, u, magnitudes):
    """Between the two magnitudes around ``a`` (float32, at most the largest), the upper with
    probability (a - lower) / (upper - lower) in float64 (compressors.core.minifloat.round_to's)."""
    value = magnitudes[nearest]
    a64 = np.float64(a)
    if value == a64:
        return nearest
    lo, hi = (nearest - 1, nearest) if value > a64 else (nearest, nearest + 1)
    p = (a64 - magnitudes[lo]) / (magnitudes[hi] - magnitudes[lo])
    return hi if np.float64(u) < p else lo


@njit(**JIT)
def fp8_encode(x, block, scales, codes, max_normal, mbits, bias, max_code, nan_code, stochastic, key, magnitudes):
    """Per block: scale = amax / max_normal (1 for amax 0, 2**-149 where it underflows), then each
    code of x / scale (see fp8.py)."""
    n = x.size
    row = block if block > 0 else max(n, 1)
    for b in range(scales.size):
        lo, hi = b * row, min((b + 1) * row, n)
        amax = absmax(x, lo, hi)
        scale = amax / F32(max_normal)
        if amax == 0:
            scale = F32(1.0)
        elif scale == 0:
            scale = bits_f32(np.uint32(1))
        scales[b] = scale
        for i in range(lo, hi):
            v = x[i] / scale
            bits = f32_bits(v)
            sign = np.uint8((bits >> np.uint32(24)) & np.uint32(0x80))
            a_bits = np.uint32(bits & np.uint32(0x7FFFFFFF))
            if a_bits > np.uint32(0x7F800000):  # NaN (a non-finite block's)
                codes[i] = np.uint8(nan_code) if stochastic else np.uint8(nan_code) | sign
                continue
            code = rne_code(a_bits, mbits, bias, max_code)
            if stochastic:
                a = bits_f32(a_bits)
                a = a if a < F32(max_normal) else F32(max_normal)
                code = stochastic_code(a, rne_code(f32_bits(a), mbits, bias, max_code), uniform(key, i), magnitudes)
            codes[i] = np.uint8(code) | sign


@njit(**JIT)
def fp8_decode(codes, scales, block, values, out, add):
    """out[i] (+)= values[code] * the block's scale."""
    n = out.size
    row = block if block > 0 else max(n, 1)
    for b in range(scales.size):
        lo, hi = b * row, min((b + 1) * row, n)
        scale = scales[b]
        if add:
            for i in range(lo, hi):
                out[i] += values[codes[i]] * scale
        else:
            for i in range(lo, hi):
                out[i] = values[codes[i]] * scale


# ---------------------------------------------------------------- mx (compressors.codecs.mx)


@njit(**INLINE)
def floor_log2(bits):
    """floor(log2(a)) of a positive finite float32 from its bits (subnormals too)."""
    exponent = np.int64(bits >> np.uint32(23))
    if exponent > 0:
        return exponent - 127
    top = 0  # a subnormal: its highest set bit, times 2**-149
    m = np.uint32(bits)
    while m > np.uint32(1):
        m >>= np.uint32(1)
        top += 1
    return np.int64(top) - 149


@njit(**INLINE)
def _put(packed, i, bits, code):
    at = i * bits
    byte, shift = at >> 3, at & 7
    packed[byte] |= np.uint8((code << shift) & 0xFF)
    if shift + bits > 8:
        packed[byte + 1] |= np.uint8(code >> (8 - shift))


@njit(**INLINE)
def _get(packed, i, bits):
    at = i * bits
    byte, shift = at >> 3, at & 7
    code = np.int64(packed[byte]) >> shift
    if shift + bits > 8:
        code |= np.int64(packed[byte + 1]) << (8 - shift)
    return code & ((1 << bits) - 1)


@njit(**JIT)
def mx_encode(x, scales, packed, bits, emax, is_int, mbits, bias, max_code, stochastic, key, magnitudes):
    """Per block of 32: the E8M0 byte of 2**s, s = floor(log2 amax) - emax clamped to +-127 (0xFF for a
    block holding NaN or Inf, whose codes are 0), then each element's code of x * 2**-s, packed."""
    n = x.size
    packed[:] = 0
    sign_bit = np.int64(1) << (bits - 1)
    for b in range(scales.size):
        lo, hi = b * 32, min((b + 1) * 32, n)
        amax_bits = f32_bits(absmax(x, lo, hi))
        if amax_bits >= np.uint32(0x7F800000):
            scales[b] = np.uint8(0xFF)
            continue
        s = -127 if amax_bits == 0 else min(max(floor_log2(amax_bits) - emax, -127), 127)
        scales[b] = np.uint8(s + 127)
        for i in range(lo, hi):
            if is_int:
                q = np.float64(x[i]) * 2.0 ** (6 - s)  # exact in float64
                if stochastic:
                    low = np.floor(q)
                    q = low + (1.0 if np.float64(uniform(key, i)) < q - low else 0.0)
                else:
                    q = np.rint(q)
                q = min(max(q, -127.0), 127.0)
                code = np.int64(q) & 0xFF
            else:
                v = x[i] * F32(2.0 ** -s)  # exact where it matters: what underflows rounds to 0 anyway
                v_bits = f32_bits(v)
                a_bits = np.uint32(v_bits & np.uint32(0x7FFFFFFF))
                code = rne_code(a_bits, mbits, bias, max_code)
                if stochastic:
                    a = min(bits_f32(a_bits), F32(magnitudes[max_code]))
                    code = stochastic_code(a, rne_code(f32_bits(a), mbits, bias, max_code), uniform(key, i),
                                           magnitudes)
                if v_bits >> np.uint32(31):
                    code |= sign_bit
            _put(packed, i, bits, code)


@njit(**JIT)
def mx_decode(packed, scales, bits, values, scale_values, out, add):
    """out[i] (+)= values[code] * the block's 2**s (NaN for the byte 0xFF)."""
    n = out.size
    for b in range(scales.size):
        lo, hi = b * 32, min((b + 1) * 32, n)
        scale = scale_values[scales[b]]
        for i in range(lo, hi):
            value = values[_get(packed, i, bits)] * scale
            if add:
                out[i] += value
            else:
                out[i] = value
