"""What the kernels share: jit options, float bits, the counter hash, absmax, the fixed-order sum,
a transpose."""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# nogil: callers may run kernels in threads; error_model="numpy": x / 0 gives inf/nan as in torch
# instead of raising.
JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
INLINE = {**JIT, "inline": "always"}

F32 = np.float32
U32 = np.uint32
_GOLDEN, _FMIX1, _FMIX2 = U32(0x9E3779B1), U32(0x85EBCA6B), U32(0xC2B2AE35)


@intrinsic
def f32_bits(typingctx, x):
    """The uint32 bit pattern of a float32 (a bitcast)."""
    if x == types.float32:
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(32))
        return types.uint32(types.float32), codegen
    return None


@intrinsic
def bits_f32(typingctx, x):
    """The float32 of a uint32 bit pattern (a bitcast)."""
    if x == types.uint32:
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.FloatType())
        return types.float32(types.uint32), codegen
    return None


@intrinsic
def shr32(typingctx, a, s):
    """a >> s in 32 bits (uint32, s < 32). Numba widens a shift to 64 bits, and LLVM keeps a
    variable shift there (it cannot tell s < 32): two 64-bit shifts and shuffles per 8 lanes."""
    if a == types.uint32 and s == types.uint32:
        def codegen(context, builder, signature, args):
            return builder.lshr(args[0], args[1])
        return types.uint32(types.uint32, types.uint32), codegen
    return None


@intrinsic
def mul32(typingctx, a, b):
    """a * b mod 2**32 (uint32) in one 32-bit multiply. Numba widens it to 64 bits, which LLVM
    vectorises as 64-bit lanes (4, not 8)."""
    if a == types.uint32 and b == types.uint32:
        def codegen(context, builder, signature, args):
            return builder.mul(args[0], args[1])
        return types.uint32(types.uint32, types.uint32), codegen
    return None


@njit(**INLINE)
def hash32(key, index):
    """The counter hash of compressors.core.rng: fmix32(index * GOLDEN ^ key), uint32.

    In 32-bit steps throughout (mul32, shr32), so that the loops calling it vectorise over 8 lanes."""
    x = U32(mul32(U32(index), _GOLDEN) ^ U32(key))
    x = U32(x ^ shr32(x, U32(16)))
    x = mul32(x, _FMIX1)
    x = U32(x ^ shr32(x, U32(13)))
    x = mul32(x, _FMIX2)
    return U32(x ^ shr32(x, U32(16)))


@njit(**INLINE)
def uniform(key, index):
    """compressors.core.rng.uniform of one element: hash32(key, index) >> 8, times 2**-24."""
    x = hash32(key, index)
    # through int32: exact below 2**24, and one vector instruction (uint32 to float has none on AVX2)
    return F32(np.int32(shr32(x, U32(8)))) * F32(2.0 ** -24)


@njit(**INLINE)
def absmax(x, lo, hi):
    """torch.amax(|x[lo:hi]|), 0 for an empty range: an integer max over the bits without the sign,
    so that a NaN (whose bits exceed inf's) wins as in torch."""
    m = np.uint32(0)
    for i in range(lo, hi):
        b = np.uint32(f32_bits(x[i]) & np.uint32(0x7FFFFFFF))
        m = b if b > m else m
    return bits_f32(np.uint32(m))


# ---------------------------------------------------------------- the fixed-order sum
# compressors.core.pairwise defines it: a pairwise tree over the row padded with zeros to a
# power of two, left + right, in float64. These build it in one pass with a stack of
# partial sums (a binary counter): a node of level k sums 2**k leaves.


TREE_DEPTH = 64  # stack slots: one per level, and a row is shorter than 2**63


@njit(**INLINE)
def tree_push(sums, levels, depth, value, level):
    """Push a node (the sum of 2**level leaves, in order); returns the new depth."""
    while depth > 0 and levels[depth - 1] == level:
        depth -= 1
        value = sums[depth] + value
        level += 1
    sums[depth] = value
    levels[depth] = level
    return depth + 1


@njit(**INLINE)
def tree_total(sums, levels, depth, count):
    """The tree's sum after ``count`` leaves were pushed: the zero padding up to the next power of
    two is pushed as whole zero subtrees (their sum is +0.0, as the reference's additions give)."""
    if count == 0:
        return 0.0
    size = 1
    while size < count:
        size *= 2
    position = count
    while position < size:
        level = 0
        while (position >> level) & 1 == 0:
            level += 1
        depth = tree_push(sums, levels, depth, 0.0, level)
        position += 1 << level
    return sums[0]


# The leaves of ``tree_sum``: x - shift itself, its magnitude or its square, in float64.
LEAF_PLAIN, LEAF_ABS, LEAF_SQUARE = 0, 1, 2


@njit(**INLINE)
def _leaf(v, shift, kind):
    d = np.float64(v) - shift
    return abs(d) if kind == LEAF_ABS else d * d if kind == LEAF_SQUARE else d


@njit(**INLINE)
def tree_sum(x, shift, kind):
    """compressors.core.pairwise's tree sum of the leaves of ``x`` (``kind``, of x - ``shift``) in float64:
    aligned groups of eight leaves summed in registers as ((a+b)+(c+d))+((e+f)+(g+h)) and pushed as one
    level-3 node, the rest leaf by leaf."""
    sums = np.empty(TREE_DEPTH, np.float64)
    levels = np.empty(TREE_DEPTH, np.int64)
    n = x.size
    depth = 0
    i = 0
    while i + 8 <= n:
        left = (_leaf(x[i], shift, kind) + _leaf(x[i + 1], shift, kind)) + \
            (_leaf(x[i + 2], shift, kind) + _leaf(x[i + 3], shift, kind))
        right = (_leaf(x[i + 4], shift, kind) + _leaf(x[i + 5], shift, kind)) + \
            (_leaf(x[i + 6], shift, kind) + _leaf(x[i + 7], shift, kind))
        depth = tree_push(sums, levels, depth, left + right, 3)
        i += 8
    for j in range(i, n):
        depth = tree_push(sums, levels, depth, _leaf(x[j], shift, kind), 0)
    return tree_total(sums, levels, depth, n)


_TILE = 64  # a 64 x 64 float32 tile (16 KiB) stays in L1


@njit(**JIT)
def transpose(x, rows, cols, out):
    """out = the transpose of the C-order (rows, cols) matrix ``x``, both flat float32. Tile by
    tile through a buffer, so that both the reads and the writes run along memory: 3-5x faster
    than numpy's strided copy of ``x.T``, 2-3x faster than torch's ``.t().contiguous()``."""
    tile = np.empty((_TILE, _TILE), np.float32)
    for i0 in range(0, rows, _TILE):
        h = min(_TILE, rows - i0)
        for j0 in range(0, cols, _TILE):
            w = min(_TILE, cols - j0)
            for a in range(h):
                src = x[(i0 + a) * cols + j0:(i0 + a) * cols + j0 + w]
                for b in range(w):
                    tile[b, a] = src[b]
            for b in range(w):
                dst = out[(j0 + b) * rows + i0:(j0 + b) * rows + i0 + h]
                t = tile[b]
                for a in range(h):
                    dst[a] = t[a]


def f32_section(body: np.ndarray, start: int, count: int, *, writable: bool = False) -> np.ndarray:
    """``count`` float32 at byte ``start`` of a uint8 body. A section to read is copied when unaligned
    (a payload cut out of a gathered buffer), so that every kernel sees one array type; one to write
    must be aligned (a payload's body is: its header is a multiple of 8 bytes)."""
    section = body[start:start + 4 * count].view(np.float32)
    if not section.flags.aligned:  # numpy's own flag: cheaper than asking ctypes for the address
        if writable:
            raise ValueError("an encode's out buffer must be 4-byte aligned")
        section = section.copy()
    return section
