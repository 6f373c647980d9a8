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
    """The constants of rne_code and sr_code for a type (computed once, outside the loops): the mantissa bits to
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
def sr_code(a_bits, u, constants):
    """The code of the magnitude whose float32 bits are ``a_bits`` (at most the largest; the code of
    a NaN is meaningless, and callers replace it) rounded stochastically: the lower neighbour's code,
    plus 1 where the draw ``u`` < (a - lower) / (upper - lower), compressors.core.minifloat.round_to's
    rule. That fraction is exact in float32: two neighbours differ by a power of two, so in the normal
    range it is the dropped mantissa bits times 2**-shift, and below it the fraction of a's subnormal
    steps. At the largest magnitude nothing is dropped, so the code is at most the largest code.
    Branch-free, as rne_code."""
    shift, offset, sub_scale, min_normal = constants
    a_bits = U32(a_bits)
    dropped = U32(a_bits & U32(U32(U32(1) << shift) - U32(1)))
    normal_low = I32(I32(shr32(a_bits, shift)) - I32(offset))
    normal_frac = F32(I32(dropped)) * bits_f32(U32(U32(U32(127) - shift) << U32(23)))
    # steps of a normal input, discarded, may exceed int32: the bound keeps the cast defined
    steps = min(bits_f32(a_bits) * sub_scale, F32(2.0**22))
    low = np.floor(steps)
    subnormal = a_bits < min_normal
    return I32((I32(low) if subnormal else normal_low) + I32(u < ((steps - low) if subnormal else normal_frac)))


@njit(**JIT)
def fp8_encode(x, block, scales, codes, max_normal, mbits, bias, max_code, nan_code, stochastic, key):
    """Per block: scale = amax / max_normal (1 for amax 0, 2**-149 where it underflows), then each
    code of x / scale (see fp8.py)."""
    n = x.size
    row = block if block > 0 else max(n, 1)
    constants = rounding(mbits, bias)
    mc, nc, top = I32(max_code), I32(nan_code), F32(max_normal)
    for b in range(scales.size):
        # The block's slices, indexed from 0: so LLVM vectorises both inner loops (as a loop over lo..hi
        # it does not); the block is in cache for the second.
        xs, cs = x[b * row:(b + 1) * row], codes[b * row:(b + 1) * row]
        scale = _fp8_scale(xs, max_normal)
        scales[b] = scale
        if stochastic:
            for i in range(xs.size):
                cs[i] = _fp8_stochastic(xs[i], scale, uniform(key, b * row + i), constants, nc, top)
        else:
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


@njit(**INLINE)
def _fp8_stochastic(x, scale, u, constants, nan_code, top):
    """The stochastically rounded code of x / scale (saturated at ``top``), its sign bit set;
    ``nan_code`` with a clear sign for NaN, as the reference's."""
    bits = f32_bits(x / scale)
    a_bits = U32(bits & U32(0x7FFFFFFF))
    a = min(bits_f32(a_bits), top)
    code = I32(sr_code(f32_bits(a), u, constants) | I32(U32(bits >> U32(24)) & U32(0x80)))
    return np.uint8(nan_code if a_bits > U32(0x7F800000) else code)


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


def mx_encode(x, scales, packed, bits, emax, is_int, mbits, bias, max_code, stochastic, key, top):
    """Per block of 32: the E8M0 byte of 2**s, s = floor(log2 amax) - emax clamped to +-127 (0xFF for a
    block holding NaN or Inf, whose codes are 0), then each element's code of x * 2**-s, packed. ``top``:
    the element type's largest magnitude (float32; unused for int8)."""
    constants = rounding.py_func(mbits, bias)  # NumPy scalars: the types the kernels are compiled for
    key = key if stochastic else None
    if is_int:
        _mx_int8(x, scales, packed, emax, key)
    else:
        _MX_FLOAT[bits](x, scales, packed, emax, constants, max_code, key, top)


# mx_encode's float element types, one kernel per element width (the width's shifts and packing are
# constants, which made each faster than one kernel for all three): a block at a time, its scale, then
# its codes computed and packed in one loop over the block's slices indexed from 0 (so LLVM vectorises
# it). ``key`` None rounds to nearest: Numba compiles that case on its own, without the stochastic
# branch (with a flag tested inside the loop, the nearest path ran slower).


@njit(**JIT)
def _mx_float8(x, scales, packed, emax, constants, max_code, key, top):
    sign_shift, mc = U32(7), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 32:b * 32 + 32]
        scales[b], scale = _block_scale(xs, emax)
        for i in range(xs.size):
            out[i] = _mx_code(xs[i], scale, constants, mc, sign_shift, key, b * 32 + i, top)


@njit(**JIT)
def _mx_float6(x, scales, packed, emax, constants, max_code, key, top):
    sign_shift, mc = U32(5), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 24:b * 24 + 24]
        scales[b], scale = _block_scale(xs, emax)
        n, i0 = xs.size, b * 32
        for g in range(n // 4):
            _put6(out, g, _mx_code(xs[4 * g], scale, constants, mc, sign_shift, key, i0 + 4 * g, top),
                  _mx_code(xs[4 * g + 1], scale, constants, mc, sign_shift, key, i0 + 4 * g + 1, top),
                  _mx_code(xs[4 * g + 2], scale, constants, mc, sign_shift, key, i0 + 4 * g + 2, top),
                  _mx_code(xs[4 * g + 3], scale, constants, mc, sign_shift, key, i0 + 4 * g + 3, top))
        word = U32(0)  # the short last block's last codes
        for j in range(n // 4 * 4, n):
            code = _mx_code(xs[j], scale, constants, mc, sign_shift, key, i0 + j, top)
            word |= U32(code) << U32(6 * (j % 4))
        _put6_rest(out, n, word)


@njit(**JIT)
def _mx_float4(x, scales, packed, emax, constants, max_code, key, top):
    sign_shift, mc = U32(3), I32(max_code)
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 16:b * 16 + 16]
        scales[b], scale = _block_scale(xs, emax)
        n, i0 = xs.size, b * 32
        for j in range(n // 2):
            out[j] = _mx_code(xs[2 * j], scale, constants, mc, sign_shift, key, i0 + 2 * j, top) | (
                _mx_code(xs[2 * j + 1], scale, constants, mc, sign_shift, key, i0 + 2 * j + 1, top) << 4)
        if n % 2:
            out[n // 2] = _mx_code(xs[n - 1], scale, constants, mc, sign_shift, key, i0 + n - 1, top)


_MX_FLOAT = {8: _mx_float8, 6: _mx_float6, 4: _mx_float4}


@njit(**JIT)
def _mx_int8(x, scales, packed, emax, key):
    """MXINT8's codes, two's complement of x * 2**(6 - s) rounded and clamped to +-127: to nearest
    (``key`` None, compiled on its own as the float kernels' nearest path), or stochastically."""
    for b in range(scales.size):
        xs, out = x[b * 32:b * 32 + 32], packed[b * 32:b * 32 + 32]
        scales[b], scale = _block_scale(xs, emax)
        nonfinite = scale != scale  # the block's NaN scale: its codes are 0
        for i in range(xs.size):
            out[i] = np.uint8(I32(0 if nonfinite else _int8_code(xs[i], scale, key, b * 32 + i)) & I32(0xFF))


@njit(**INLINE)
def _int8_code(x, scale, key, index):
    """To nearest in float32, which gives the float64 reference's value: times a power of two is
    exact (a product small enough to lose bits rounds to 0 either way), and rint rounds half to even
    as np.rint; (x * 2**-s) * 64, as 2**133 (s = -127) overflows float32. Stochastically, floor(q) +
    (u < q - floor(q)) in float64, where q and q - floor(q) are the reference's (an exact product,
    the same rounding of the difference): in float32, q - floor(q) is not exact for -1 < q < 0."""
    if key is None:
        return I32(min(max(np.rint(x * scale * F32(64.0)), F32(-127.0)), F32(127.0)))
    q = np.float64(x) * (np.float64(scale) * 64.0)  # exact: 2**(6 - s) <= 2**133
    low = np.floor(q)
    return I32(min(max(low + np.float64(np.float64(uniform(key, index)) < q - low), -127.0), 127.0))


@njit(**INLINE)
def _mx_code(x, scale, constants, max_code, sign_shift, key, index, top):
    """The code of x * scale with its sign bit (0 for NaN: a non-finite block's), as a uint8: the
    nearest (``key`` None), or rounded stochastically with entry ``index``'s draw, saturated at ``top``."""
    v_bits = f32_bits(x * scale)
    a_bits = U32(v_bits & U32(0x7FFFFFFF))
    if key is not None:
        # A product that underflows to 0 (|x| at most 2**(s - 150)): the reference's exact product is
        # positive and rounds up on a draw of 0, as any positive float32 does.
        a_bits = U32(1) if a_bits == U32(0) and x != 0 else a_bits
        code = sr_code(f32_bits(min(bits_f32(a_bits), top)), uniform(key, index), constants)
    else:
        code = rne_code(a_bits, constants, max_code)
    code = I32(code | I32(U32(v_bits >> U32(31)) << sign_shift))
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
