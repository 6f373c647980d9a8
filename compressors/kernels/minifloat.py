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

from .common import F32, INLINE, JIT, absmax, bits_f32, f32_bits, shr32, uniform

U32, I32 = np.uint32, np.int32


@njit(**INLINE)
def rounding(mbits, bias):
    """The constants of rne_code for a type (computed once, outside the loops): the mantissa bits to
    drop, the code of 2**0's offset, the scale to subnormal steps and the smallest normal's bits."""
    return (np.uint32(23 - mbits), np.int32((127 - bias) << mbits), F32(2.0 ** (bias - 1 + mbits)),
            np.uint32((128 - bias) << 23))


@njit(**INLINE)
def rne_code(a_bits, constants, max_code):
    """The code of the magnitude whose float32 bits are ``a_bits`` (finite, sign clear); ``constants``
    from ``rounding``. Both paths are computed and one selected, and every step is cast back to 32 bits
    (Numba widens to 64), so that loops over it vectorise over 8 lanes."""
    shift, offset, sub_scale, min_normal = constants
    a_bits = U32(a_bits)
    # normal: add just under half an ulp of the type, plus the kept bits' lowest (ties to even)
    half = U32(U32(U32(1) << U32(shift - U32(1))) - U32(1))
    rounded = U32(U32(a_bits + half) + U32(shr32(a_bits, shift) & U32(1)))
    normal = I32(I32(shr32(rounded, shift)) - I32(offset))
    # subnormal steps, rounded half to even by the float32 addition of 2**23 (exact below 2**22;
    # a normal input, whose steps may be larger, takes the other path)
    steps = min(bits_f32(a_bits) * sub_scale, F32(2.0**22)) + F32(2.0**23)
    subnormal = I32(f32_bits(steps) - U32(0x4B000000))
    code = subnormal if a_bits < min_normal else normal
    return code if code < I32(max_code) else I32(max_code)


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
    if stochastic:
        for b in range(scales.size):
            lo, hi = b * row, min((b + 1) * row, n)
            scales[b] = _fp8_scale(x[lo:hi], max_normal)
            _fp8_stochastic(x, lo, hi, scales[b], codes, max_normal, constants, max_code, nan_code, key, magnitudes)
        return
    mc, nc = I32(max_code), I32(nan_code)
    for b in range(scales.size):
        # The block's slices, indexed from 0: so LLVM vectorises both inner loops (as a loop over lo..hi
        # it does not); the block is in cache for the second.
        xs, cs = x[b * row:(b + 1) * row], codes[b * row:(b + 1) * row]
        scale = _fp8_scale(xs, max_normal)
        scales[b] = scale
        for i in range(xs.size):
            cs[i] = _fp8_nearest(xs[i], scale, constants, mc, nc)


@njit(**INLINE)
def _fp8_scale(xs, max_normal):
    """amax / max_normal; 1 for amax 0, 2**-149 where it underflows."""
    amax = absmax(xs, 0, xs.size)
    scale = amax / F32(max_normal)
    if amax == 0:
        return F32(1.0)
    return bits_f32(np.uint32(1)) if scale == 0 else scale


@njit(**INLINE)
def _fp8_nearest(x, scale, constants, max_code, nan_code):
    """The nearest code of x / scale, its sign bit set; ``nan_code`` for NaN (a non-finite block's)."""
    bits = f32_bits(x / scale)
    a_bits = U32(bits & U32(0x7FFFFFFF))
    code = rne_code(a_bits, constants, max_code)
    code = nan_code if a_bits > U32(0x7F800000) else code
    return np.uint8(I32(code | I32(U32(bits >> U32(24)) & U32(0x80))))


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
    """out[i] (+)= values[code] * the block's scale (over the block's slices, as fp8_encode)."""
    row = block if block > 0 else max(out.size, 1)
    for b in range(scales.size):
        cs, os = codes[b * row:(b + 1) * row], out[b * row:(b + 1) * row]
        scale = scales[b]
        if add:
            for i in range(cs.size):
                os[i] += values[cs[i]] * scale
        else:
            for i in range(cs.size):
                os[i] = values[cs[i]] * scale


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


@njit(**INLINE)
def _block_scale(xs, emax):
    """A block's E8M0 byte and the float32 2**-s its entries are multiplied by (NaN where the block
    holds NaN or Inf: its entries' codes are then computed from NaN and replaced by 0)."""
    amax_bits = f32_bits(absmax(xs, 0, xs.size))
    if amax_bits >= U32(0x7F800000):
        return np.uint8(0xFF), F32(np.nan)
    s = -127 if amax_bits == 0 else min(max(floor_log2(amax_bits) - emax, -127), 127)
    # 2**-s from its bits: a normal float32, or 2**-127, the one subnormal
    scale = bits_f32(U32((127 - s) << 23)) if s < 127 else bits_f32(U32(1 << 22))
    return np.uint8(s + 127), scale


@njit(**JIT)
def _block_scales(x, scales, v_scales, emax):
    """``_block_scale`` of every block."""
    for b in range(scales.size):
        scales[b], v_scales[b] = _block_scale(x[b * 32:b * 32 + 32], emax)


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
def _int8_stochastic(x, v_scales, codes, key):
    """Two's complement of x * 2**(6 - s) rounded stochastically (exact in float64), clamped to +-127."""
    for i in range(x.size):
        scale = np.float64(v_scales[i >> 5])
        q = np.float64(x[i]) * scale * 64.0
        low = np.floor(q)
        q = low + (1.0 if np.float64(uniform(key, i)) < q - low else 0.0)
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
            _put6(packed, g, codes[4 * g], codes[4 * g + 1], codes[4 * g + 2], codes[4 * g + 3])
        word = U32(0)
        for j in range(n - n // 4 * 4):
            word |= U32(codes[n // 4 * 4 + j]) << U32(6 * j)
        _put6_rest(packed, n, word)


@njit(**INLINE)
def _put6(packed, g, c0, c1, c2, c3):
    """Four 6-bit codes, little-endian, into bytes 3g .. 3g + 2."""
    packed[3 * g] = np.uint8((c0 | (c1 << 6)) & 0xFF)
    packed[3 * g + 1] = np.uint8(((c1 >> 2) | (c2 << 4)) & 0xFF)
    packed[3 * g + 2] = np.uint8(((c2 >> 4) | (c3 << 2)) & 0xFF)


@njit(**INLINE)
def _put6_rest(packed, n, word):
    """The bytes of the last n % 4 of n 6-bit codes, held in ``word`` (6 bits each, the first lowest)."""
    for k in range(((n % 4) * 6 + 7) // 8):
        packed[3 * (n // 4) + k] = np.uint8((word >> U32(8 * k)) & U32(0xFF))


def mx_encode(x, scales, packed, bits, emax, is_int, mbits, bias, max_code, stochastic, key, magnitudes):
    """Per block of 32: the E8M0 byte of 2**s, s = floor(log2 amax) - emax clamped to +-127 (0xFF for a
    block holding NaN or Inf, whose codes are 0), then each element's code of x * 2**-s, packed."""
    constants = rounding.py_func(mbits, bias)  # NumPy scalars: the types the kernels are compiled for
    if not stochastic:
        if is_int:
            _mx_nearest_int8(x, scales, packed, emax)
        else:
            _MX_NEAREST[bits](x, scales, packed, emax, constants, max_code)
        return
    v_scales = np.empty(scales.size, np.float32)
    _block_scales(x, scales, v_scales, emax)
    codes = packed if bits == 8 else np.empty(x.size, np.uint8)
    if is_int:
        _int8_stochastic(x, v_scales, codes, key)
    else:
        _fp_codes_stochastic(x, v_scales, codes, bits, constants, max_code, key, magnitudes)
    if bits != 8:
        _pack(codes, bits, packed)


# mx_encode's nearest rounding of a float element type, one kernel per element width (the width's
# shifts and packing are constants, which made each faster than one kernel for all three): a
# block at a time, its scale, then its codes computed and packed in one loop over the block's slices
# indexed from 0 (so LLVM vectorises it).


@njit(**JIT)
def _mx_nearest8(x, scales, packed, emax, constants, max_code):
    sign_shift, mc = U32(7), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 32:b * 32 + 32]
        scales[b], scale = _block_scale(xs, emax)
        for i in range(xs.size):
            out[i] = _mx_code(xs[i], scale, constants, mc, sign_shift)


@njit(**JIT)
def _mx_nearest6(x, scales, packed, emax, constants, max_code):
    sign_shift, mc = U32(5), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 24:b * 24 + 24]
        scales[b], scale = _block_scale(xs, emax)
        n = xs.size
        for g in range(n // 4):
            _put6(out, g, _mx_code(xs[4 * g], scale, constants, mc, sign_shift),
                  _mx_code(xs[4 * g + 1], scale, constants, mc, sign_shift),
                  _mx_code(xs[4 * g + 2], scale, constants, mc, sign_shift),
                  _mx_code(xs[4 * g + 3], scale, constants, mc, sign_shift))
        word = U32(0)  # the short last block's last codes
        for j in range(n - n // 4 * 4):
            word |= U32(_mx_code(xs[n // 4 * 4 + j], scale, constants, mc, sign_shift)) << U32(6 * j)
        _put6_rest(out, n, word)


@njit(**JIT)
def _mx_nearest4(x, scales, packed, emax, constants, max_code):
    sign_shift, mc = U32(3), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 16:b * 16 + 16]
        scales[b], scale = _block_scale(xs, emax)
        n = xs.size
        for j in range(n // 2):
            out[j] = _mx_code(xs[2 * j], scale, constants, mc, sign_shift) | (
                _mx_code(xs[2 * j + 1], scale, constants, mc, sign_shift) << 4)
        if n % 2:
            out[n // 2] = _mx_code(xs[n - 1], scale, constants, mc, sign_shift)


_MX_NEAREST = {8: _mx_nearest8, 6: _mx_nearest6, 4: _mx_nearest4}


@njit(**JIT)
def _mx_nearest_int8(x, scales, packed, emax):
    """MXINT8's codes: rint(x * 2**(6 - s)) clamped to +-127. In float32 this is the float64
    reference's value: times a power of two is exact (a product small enough to lose bits rounds
    to 0 either way), and rint rounds half to even as np.rint. Not x * 2**(6 - s) in one product:
    2**133 (s = -127) overflows float32."""
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 32:b * 32 + 32]
        scales[b], scale = _block_scale(xs, emax)
        nonfinite = scale != scale  # the block's NaN scale: its codes are 0
        for i in range(xs.size):
            q = min(max(np.rint(xs[i] * scale * F32(64.0)), F32(-127.0)), F32(127.0))
            out[i] = np.uint8(I32(0 if nonfinite else I32(q)) & I32(0xFF))


@njit(**INLINE)
def _mx_code(x, scale, constants, max_code, sign_shift):
    """The nearest code of x * scale with its sign bit (0 for NaN: a non-finite block's), as a uint8."""
    v_bits = f32_bits(x * scale)
    a_bits = U32(v_bits & U32(0x7FFFFFFF))
    code = I32(rne_code(a_bits, constants, max_code) | I32(U32(v_bits >> U32(31)) << sign_shift))
    return np.uint8(0 if a_bits > U32(0x7F800000) else code)


@njit(**JIT)
def mx_decode(packed, scales, bits, values, scale_values, out, add):
    """out[i] (+)= values[code] * the block's 2**s (NaN for the byte 0xFF)."""
    if bits == 8:
        _decode8(packed, scales, values, scale_values, out, add)
    elif bits == 4:
        _decode4(packed, scales, values, scale_values, out, add)
    else:
        _decode6(packed, scales, values, scale_values, out, add)


# Each block's loop over its own slices, indexed from 0, with its scale a constant (vectorised).


@njit(**JIT)
def _decode8(packed, scales, values, scale_values, out, add):
    for b in range(scales.size):
        cs, os, scale = packed[b * 32:b * 32 + 32], out[b * 32:b * 32 + 32], scale_values[scales[b]]
        if add:
            for i in range(os.size):
                os[i] += values[cs[i]] * scale
        else:
            for i in range(os.size):
                os[i] = values[cs[i]] * scale


@njit(**JIT)
def _decode4(packed, scales, values, scale_values, out, add):
    for b in range(scales.size):
        cs, os, scale = packed[b * 16:b * 16 + 16], out[b * 32:b * 32 + 32], scale_values[scales[b]]
        if add:
            for i in range(os.size):
                os[i] += values[(cs[i >> 1] >> ((i & 1) * 4)) & 15] * scale
        else:
            for i in range(os.size):
                os[i] = values[(cs[i >> 1] >> ((i & 1) * 4)) & 15] * scale


@njit(**JIT)
def _decode6(packed, scales, values, scale_values, out, add):
    for b in range(scales.size):
        cs, os, scale = packed[b * 24:b * 24 + 24], out[b * 32:b * 32 + 32], scale_values[scales[b]]
        for i in range(os.size):
            bit = 6 * i
            k = bit >> 3
            word = np.int32(cs[k]) | ((np.int32(cs[k + 1]) << 8) if (bit & 7) > 2 else 0)
            value = values[(word >> (bit & 7)) & 63] * scale
            os[i] = os[i] + value if add else value
