"""QSGD on the CPU: the body of compressors.qsgd.QSGD, bits 2..8, max or l2 norms.

Encode walks the tensor in chunks of ``CHUNK`` codes (a multiple of 8, so that
every chunk's bits start on a byte): a bucket's norm is taken when the walk
enters it (the bucket is then in cache for its codes), the chunk's codes go to
a small scratch and are packed eight at a time (eight codes of b bits fill b
bytes exactly, whatever b). Decode unpacks a chunk the same way and scales it
bucket by bucket. The packing helpers are inlined with ``bits`` a constant,
one copy per width, so that their loops unroll and vectorise.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, TREE_DEPTH, absmax, tree_push, tree_total, uniform

CHUNK = 4096  # codes per scratch: a multiple of 8; the chunk's input stays in L1
_BYTE = np.uint64(0xFF)


@njit(**INLINE)
def _square(v):
    # float64: squares of large float32 values overflow float32; they are exact in float64.
    d = np.float64(v)
    return d * d


@njit(**INLINE)
def _l2(x, lo, hi, sums, levels):
    """The bucket's l2 norm as compressors.pairwise sums it: a tree over the squares, float64.

    Whole aligned groups of eight leaves are summed in registers and pushed as one level-3 node.
    ``tree_total`` pads with zeros to the power of two above ``hi - lo``; the reference pads
    a short last bucket further (to its row length, then that length's power of two), but every
    node here is >= +0.0, so those larger zero subtrees add +0.0 and change nothing.
    """
    depth = 0
    i = lo
    while i + 8 <= hi:
        left = (_square(x[i]) + _square(x[i + 1])) + (_square(x[i + 2]) + _square(x[i + 3]))
        right = (_square(x[i + 4]) + _square(x[i + 5])) + (_square(x[i + 6]) + _square(x[i + 7]))
        depth = tree_push(sums, levels, depth, left + right, 3)
        i += 8
    for j in range(i, hi):
        depth = tree_push(sums, levels, depth, _square(x[j]), 0)
    return F32(np.sqrt(tree_total(sums, levels, depth, hi - lo)))


@njit(**INLINE)
def _value(code, sign):
    level = F32(code & (sign - np.uint8(1)))
    return -level if code >= sign else level


# The element loops are functions of their own, over views from 0 (no index can be negative):
# LLVM vectorises them so, but not inlined into the walk's loop nest or indexed from lo.
@njit(**JIT)
def _encode_range(x, first, norm, s, key, sign, codes):
    """QSGD._encode_piece for ``x``, whose entries have global indices ``first...``, into ``codes``:
    the stochastic level of |x| / norm * s, then the sign bit."""
    for j in range(x.size):
        v = x[j]
        # Divide (not multiply by s / norm) as the reference does: s / norm overflows for denormal norms.
        r = abs(v) / norm * s
        r = F32(0.0) if np.isnan(r) else r
        r = min(max(r, F32(0.0)), s)  # nan_to_num maps +inf to FLT_MAX, which the clamp takes to s
        floor = np.floor(r)
        level = min(floor + F32(uniform(key, first + j) < r - floor), s)
        codes[j] = np.uint8(level) | (sign if v < F32(0.0) else np.uint8(0))


@njit(**JIT)
def _decode_range(codes, scale, sign, out, add):
    """out = (``add``: +=) the signed levels of ``codes`` times the bucket's scale."""
    if add:
        for j in range(out.size):
            out[j] += _value(codes[j], sign) * scale
    else:
        for j in range(out.size):
            out[j] = _value(codes[j], sign) * scale


@njit(**INLINE)
def _pack(codes, count, bits, packed, at):
    """``codes[:count]`` into ``packed`` from byte ``at`` (little-endian, code i at bit i * bits)."""
    groups = count // 8
    for g in range(groups):
        word = np.uint64(0)
        for j in range(8):
            word |= np.uint64(codes[8 * g + j]) << np.uint64(j * bits)
        for k in range(bits):
            packed[at + g * bits + k] = np.uint8((word >> np.uint64(8 * k)) & _BYTE)
    tail = count - 8 * groups
    if tail:
        word = np.uint64(0)
        for j in range(tail):
            word |= np.uint64(codes[8 * groups + j]) << np.uint64(j * bits)
        for k in range((tail * bits + 7) // 8):
            packed[at + groups * bits + k] = np.uint8((word >> np.uint64(8 * k)) & _BYTE)


@njit(**INLINE)
def _unpack(packed, at, count, bits, codes):
    """Inverse of _pack; the padding bits after the last code are ignored, as the reference does."""
    mask = np.uint64((1 << bits) - 1)
    groups = count // 8
    for g in range(groups):
        word = np.uint64(0)
        for k in range(bits):
            word |= np.uint64(packed[at + g * bits + k]) << np.uint64(8 * k)
        for j in range(8):
            codes[8 * g + j] = np.uint8((word >> np.uint64(j * bits)) & mask)
    tail = count - 8 * groups
    if tail:
        word = np.uint64(0)
        for k in range((tail * bits + 7) // 8):
            word |= np.uint64(packed[at + groups * bits + k]) << np.uint64(8 * k)
        for j in range(tail):
            codes[8 * groups + j] = np.uint8((word >> np.uint64(j * bits)) & mask)


@njit(**INLINE)
def _pack_bits(codes, count, bits, packed, at):
    # One inlined copy per width, with bits a constant.
    if bits == 2:
        _pack(codes, count, 2, packed, at)
    elif bits == 3:
        _pack(codes, count, 3, packed, at)
    elif bits == 4:
        _pack(codes, count, 4, packed, at)
    elif bits == 5:
        _pack(codes, count, 5, packed, at)
    elif bits == 6:
        _pack(codes, count, 6, packed, at)
    elif bits == 7:
        _pack(codes, count, 7, packed, at)
    else:
        _pack(codes, count, 8, packed, at)


@njit(**INLINE)
def _unpack_bits(packed, at, count, bits, codes):
    if bits == 2:
        _unpack(packed, at, count, 2, codes)
    elif bits == 3:
        _unpack(packed, at, count, 3, codes)
    elif bits == 4:
        _unpack(packed, at, count, 4, codes)
    elif bits == 5:
        _unpack(packed, at, count, 5, codes)
    elif bits == 6:
        _unpack(packed, at, count, 6, codes)
    elif bits == 7:
        _unpack(packed, at, count, 7, codes)
    else:
        _unpack(packed, at, count, 8, codes)


@njit(**JIT)
def encode(x, key, bits, bucket, l2, norms, packed):
    """Write the norms (one per bucket of ``bucket`` entries, the last may be short) and the packed
    codes of float32 ``x`` under the counter-hash ``key`` (rng.stream_key)."""
    n = x.size
    s = F32((1 << (bits - 1)) - 1)
    sign = np.uint8(1 << (bits - 1))
    codes = np.empty(CHUNK, np.uint8)
    sums = np.empty(TREE_DEPTH, np.float64)  # the l2 tree's stack
    levels = np.empty(TREE_DEPTH, np.int64)
    b = -1
    end = 0  # where the current bucket ends
    norm = F32(0.0)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        i = start
        while i < stop:
            if i == end:
                b += 1
                end = min(i + bucket, n)
                norm = _l2(x, i, end, sums, levels) if l2 else absmax(x, i, end)
                norms[b] = norm
            hi = min(end, stop)
            _encode_range(x[i:hi], i, norm, s, key, sign, codes[i - start:hi - start])
            i = hi
        _pack_bits(codes, stop - start, bits, packed, start // 8 * bits)


@njit(**JIT)
def decode(norms, packed, bits, bucket, out, add):
    """Write (``add``: add, in float32) the decoded values into ``out``: level * (norm / s), signed."""
    n = out.size
    s = F32((1 << (bits - 1)) - 1)
    sign = np.uint8(1 << (bits - 1))
    codes = np.empty(CHUNK, np.uint8)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        _unpack_bits(packed, start // 8 * bits, stop - start, bits, codes)
        i = start
        while i < stop:
            b = i // bucket
            hi = min((b + 1) * bucket, stop)
            # The scale first, as the reference's norms / levels: value * (norm / s), not value * norm / s.
            scale = norms[b] / s
            _decode_range(codes[i - start:hi - start], scale, sign, out[i:hi], add)
            i = hi
