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
def rounding(mbits, bias):
    """The constants of rne_code for a type (computed once, outside the loops): the mantissa bits to
    drop, the code of 2**0's offset, the scale to subnormal steps and the smallest normal's bits."""
    return (np.uint32(23 - mbits), np.int32((127 - bias) << mbits), F32(2.0 ** (bias - 1 + mbits)),
            np.uint32((128 - bias) << 23))


@njit(**INLINE)
def rne_code(a_bits, constants, max_code):
    """The code of the magnitude whose float32 bits are ``a_bits`` (finite, sign clear); ``constants``
    from ``rounding``. Both paths are computed and one selected, so that loops over it vectorise."""
    shift, offset, sub_scale, min_normal = constants
    a_bits = np.uint32(a_bits)
    # normal: add just under half an ulp of the type, plus the kept bits' lowest (ties to even)
    rounded = a_bits + ((np.uint32(1) << (shift - np.uint32(1))) - np.uint32(1)) + ((a_bits >> shift) & np.uint32(1))
    normal = np.int32(rounded >> shift) - offset
    subnormal = np.int32(np.rint(bits_f32(a_bits) * sub_scale))
    code = subnormal if a_bits < min_normal else normal
    return code if code < max_code else np.int32(max_code)


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
    constants = rounding(mbits, bias)
    for b in range(scales.size):
        lo, hi = b * row, min((b + 1) * row, n)
        amax = absmax(x, lo, hi)
        scale = amax / F32(max_normal)
        if amax == 0:
            scale = F32(1.0)
        elif scale == 0:
            scale = bits_f32(np.uint32(1))
        scales[b] = scale
        if stochastic:
            _fp8_stochastic(x, lo, hi, scale, codes, max_normal, constants, max_code, nan_code, key, magnitudes)
        else:
            _fp8_nearest(x[lo:hi], scale, codes[lo:hi], constants, max_code, nan_code)


# Functions of their own (not inlined): LLVM vectorises this loop alone, not inside the block loop.
@njit(**JIT)
def _fp8_nearest(x, scale, codes, constants, max_code, nan_code):
    for i in range(x.size):
        bits = f32_bits(x[i] / scale)
        a_bits = np.uint32(bits & np.uint32(0x7FFFFFFF))
        code = rne_code(a_bits, constants, max_code)
        code = np.int32(nan_code) if a_bits > np.uint32(0x7F800000) else code  # a non-finite block's NaN
        codes[i] = np.uint8(code | np.int32((bits >> np.uint32(24)) & np.uint32(0x80)))


@njit(**JIT)
def _fp8_stochastic(x, lo, hi, scale, codes, max_normal, constants, max_code, nan_code, key, magnitudes):
    for i in range(lo, hi):
        bits = f32_bits(x[i] / scale)
        a_bits = np.uint32(bits & np.uint32(0x7FFFFFFF))
        if a_bits > np.uint32(0x7F800000):  # a NaN of clear sign, as the reference's
            codes[i] = np.uint8(nan_code)
            continue
        a = min(bits_f32(a_bits), F32(max_normal))
        code = stochastic_code(a, rne_code(f32_bits(a), constants, max_code), uniform(key, i), magnitudes)
        codes[i] = np.uint8(code | np.int32((bits >> np.uint32(24)) & np.uint32(0x80)))


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
# Blocks of 32 codes fill whole bytes (32, 24 or 16 of them at 8, 6 or 4 bits), so each block packs
# and unpacks on its own: 8 bits one byte per code, 6 bits four codes in three bytes, 4 bits two in one.


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


@njit(**JIT)
def _block_scales(x, scales, v_scales, emax):
    """Each block's E8M0 byte and the float32 2**-s its entries are multiplied by (NaN where the block
    holds NaN or Inf: its entries' codes are then computed from NaN and replaced by 0)."""
    n = x.size
    for b in range(scales.size):
        amax_bits = f32_bits(absmax(x, b * 32, min((b + 1) * 32, n)))
        if amax_bits >= np.uint32(0x7F800000):
            scales[b] = np.uint8(0xFF)
            v_scales[b] = np.nan
        else:
            s = -127 if amax_bits == 0 else min(max(floor_log2(amax_bits) - emax, -127), 127)
            scales[b] = np.uint8(s + 127)
            v_scales[b] = F32(2.0 ** -s)


@njit(**JIT)
def _fp_codes(x, v_scales, codes, bits, constants, max_code):
    """Nearest codes of x * 2**-s (exact where it matters: what underflows rounds to 0 in every type)."""
    n = x.size
    for b in range(v_scales.size):
        scale = v_scales[b]
        for i in range(b * 32, min(b * 32 + 32, n)):
            v_bits = f32_bits(x[i] * scale)
            a_bits = np.uint32(v_bits & np.uint32(0x7FFFFFFF))
            code = rne_code(a_bits, constants, max_code) | np.int32((v_bits >> np.uint32(31)) << (bits - 1))
            codes[i] = np.uint8(0 if a_bits > np.uint32(0x7F800000) else code)


@njit(**JIT)
def _fp_codes_stochastic(x, v_scales, codes, bits, constants, max_code, key, magnitudes):
    sign_bit = np.int32(1) << (bits - 1)
    top = F32(magnitudes[max_code])
    for i in range(x.size):
        v_bits = f32_bits(x[i] * v_scales[i >> 5])
        a_bits = np.uint32(v_bits & np.uint32(0x7FFFFFFF))
        if a_bits > np.uint32(0x7F800000):
            codes[i] = 0
            continue
        a = min(bits_f32(a_bits), top)
        code = stochastic_code(a, rne_code(f32_bits(a), constants, max_code), uniform(key, i), magnitudes)
        codes[i] = np.uint8(code | (sign_bit if v_bits >> np.uint32(31) else 0))


@njit(**JIT)
def _int8_codes(x, v_scales, codes, stochastic, key):
    """Two's complement of x * 2**(6 - s) rounded (exact in float64), clamped to +-127."""
    for i in range(x.size):
        scale = np.float64(v_scales[i >> 5])
        q = np.float64(x[i]) * scale * 64.0
        if stochastic:
            low = np.floor(q)
            q = low + (1.0 if np.float64(uniform(key, i)) < q - low else 0.0)
        else:
            q = np.rint(q)
        codes[i] = np.uint8(0 if np.isnan(scale) else np.int32(min(max(q, -127.0), 127.0)) & 0xFF)


@njit(**JIT)
def _pack(codes, bits, packed):
    """Little-endian bit packing of 6- or 4-bit codes (8-bit codes are the bytes)."""
    n = codes.size
    if bits == 4:
        for j in range(n // 2):
            packed[j] = np.uint8(codes[2 * j] | (codes[2 * j + 1] << 4))
        if n % 2:
            packed[n // 2] = codes[n - 1]
    else:
        for g in range(n // 4):
            c0, c1, c2, c3 = codes[4 * g], codes[4 * g + 1], codes[4 * g + 2], codes[4 * g + 3]
            packed[3 * g] = np.uint8((c0 | (c1 << 6)) & 0xFF)
            packed[3 * g + 1] = np.uint8(((c1 >> 2) | (c2 << 4)) & 0xFF)
            packed[3 * g + 2] = np.uint8(((c2 >> 4) | (c3 << 2)) & 0xFF)
        rest = n - n // 4 * 4
        if rest:
            word = 0
            for j in range(rest):
                word |= np.int64(codes[n // 4 * 4 + j]) << (6 * j)
            for k in range((rest * 6 + 7) // 8):
                packed[3 * (n // 4) + k] = np.uint8((word >> (8 * k)) & 0xFF)


def mx_encode(x, scales, packed, bits, emax, is_int, mbits, bias, max_code, stochastic, key, magnitudes):
    """Per block of 32: the E8M0 byte of 2**s, s = floor(log2 amax) - emax clamped to +-127 (0xFF for a
    block holding NaN or Inf, whose codes are 0), then each element's code of x * 2**-s, packed."""
    v_scales = np.empty(scales.size, np.float32)
    _block_scales(x, scales, v_scales, emax)
    codes = packed if bits == 8 else np.empty(x.size, np.uint8)
    if is_int:
        _int8_codes(x, v_scales, codes, stochastic, key)
    else:
        constants = rounding.py_func(mbits, bias)  # NumPy scalars: the types the kernels are compiled for
        if stochastic:
            _fp_codes_stochastic(x, v_scales, codes, bits, constants, max_code, key, magnitudes)
        else:
            _fp_codes(x, v_scales, codes, bits, constants, max_code)
    if bits != 8:
        _pack(codes, bits, packed)


@njit(**JIT)
def mx_decode(packed, scales, bits, values, scale_values, out, add):
    """out[i] (+)= values[code] * the block's 2**s (NaN for the byte 0xFF)."""
    if bits == 8:
        _decode8(packed, scales, values, scale_values, out, add)
    elif bits == 4:
        _decode4(packed, scales, values, scale_values, out, add)
    else:
        _decode6(packed, scales, values, scale_values, out, add)


@njit(**JIT)
def _decode8(packed, scales, values, scale_values, out, add):
    for i in range(out.size):
        value = values[packed[i]] * scale_values[scales[i >> 5]]
        out[i] = out[i] + value if add else value


@njit(**JIT)
def _decode4(packed, scales, values, scale_values, out, add):
    for i in range(out.size):
        value = values[(packed[i >> 1] >> ((i & 1) * 4)) & 15] * scale_values[scales[i >> 5]]
        out[i] = out[i] + value if add else value


@njit(**JIT)
def _decode6(packed, scales, values, scale_values, out, add):
    for i in range(out.size):
        bit = 6 * i
        k = bit >> 3
        word = np.int32(packed[k]) | ((np.int32(packed[k + 1]) << 8) if (bit & 7) > 2 else 0)
        value = values[(word >> (bit & 7)) & 63] * scale_values[scales[i >> 5]]
        out[i] = out[i] + value if add else value
