"""1-bit SGD (compressors.onebit): per row of the 2-D view, the means of the entries >= 0 and < 0.

The sums behind the means follow compressors.pairwise (a pairwise tree in
float64, zero-padded to a power of two): aligned groups of 8 entries are
summed as ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) and pushed as one level-3 node,
the rest leaf by leaf. Bits: 1 for an entry >= 0, little-endian over the
flat index; a row starting on a byte boundary packs whole bytes directly.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, TREE_DEPTH, tree_push, tree_total


@njit(**INLINE)
def _sides(v):
    """(the entry as a positive-side leaf, as a negative-side leaf, whether it is >= 0)."""
    ok = v >= F32(0.0)
    return (np.float64(v) if ok else 0.0), (0.0 if ok else np.float64(v)), ok


@njit(**INLINE)
def _group(x, i):
    """The tree sums of 8 entries from x[i] on (both sides), and their bits as one byte."""
    p0, n0, b0 = _sides(x[i])
    p1, n1, b1 = _sides(x[i + 1])
    p2, n2, b2 = _sides(x[i + 2])
    p3, n3, b3 = _sides(x[i + 3])
    p4, n4, b4 = _sides(x[i + 4])
    p5, n5, b5 = _sides(x[i + 5])
    p6, n6, b6 = _sides(x[i + 6])
    p7, n7, b7 = _sides(x[i + 7])
    sp = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    sn = ((n0 + n1) + (n2 + n3)) + ((n4 + n5) + (n6 + n7))
    byte = (b0 | (b1 << 1) | (b2 << 2) | (b3 << 3) | (b4 << 4) | (b5 << 5) | (b6 << 6) | (b7 << 7))
    count = b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7
    return sp, sn, np.uint8(byte), count


@njit(**JIT)
def encode(x, rows, cols, mean_pos, mean_neg, packed):
    sums_p = np.empty(TREE_DEPTH, np.float64)
    sums_n = np.empty(TREE_DEPTH, np.float64)
    levels_p = np.empty(TREE_DEPTH, np.int64)
    levels_n = np.empty(TREE_DEPTH, np.int64)
    if cols & 7:  # rows then do not all start on a byte, and their bits are OR-ed in
        packed[:] = 0
    for r in range(rows):
        base = r * cols
        aligned = base % 8 == 0
        depth_p = 0
        depth_n = 0
        count = 0
        groups = cols // 8
        # Row slices indexed from range() values: provably >= 0, so no negative-index fix-up.
        row = x[base:base + cols]
        pk = packed[base >> 3:(base >> 3) + groups + 1]
        for g in range(groups):
            sp, sn, byte, c = _group(row, 8 * g)
            count += c
            if aligned:
                pk[g] = byte
            else:
                shift = base & 7
                pk[g] |= np.uint8((np.int64(byte) << shift) & 255)
                pk[g + 1] |= np.uint8(np.int64(byte) >> (8 - shift))
            depth_p = tree_push(sums_p, levels_p, depth_p, sp, 3)
            depth_n = tree_push(sums_n, levels_n, depth_n, sn, 3)
        for j in range(8 * groups, cols):
            i = base + j
            p, q, ok = _sides(row[j])
            count += ok
            if ok:
                packed[i >> 3] |= np.uint8(1 << (i & 7))
            depth_p = tree_push(sums_p, levels_p, depth_p, p, 0)
            depth_n = tree_push(sums_n, levels_n, depth_n, q, 0)
        total_p = tree_total(sums_p, levels_p, depth_p, cols)
        total_n = tree_total(sums_n, levels_n, depth_n, cols)
        mean_pos[r] = F32(total_p / count) if count > 0 else F32(0.0)
        mean_neg[r] = F32(total_n / (cols - count)) if cols - count > 0 else F32(0.0)


@njit(**INLINE)
def _put(out, i, v, add):
    if add:
        out[i] += v
    else:
        out[i] = v


@njit(**JIT)
def decode(packed, rows, cols, mean_pos, mean_neg, out, add):
    """out[i] (+)= its row's positive mean where its bit is 1, else the negative mean."""
    for r in range(rows):
        p = mean_pos[r]
        q = mean_neg[r]
        i = r * cols
        end = i + cols
        while i < end and i & 7:
            _put(out, i, p if (packed[i >> 3] >> np.uint8(i & 7)) & np.uint8(1) else q, add)
            i += 1
        groups = (end - i) >> 3
        # Whole bytes, a loop for each mode, uint8 shifts, and slices indexed from range() values
        # (provably >= 0, so no negative-index fix-up): LLVM then vectorises them.
        pk = packed[i >> 3:(i >> 3) + groups]
        o = out[i:i + 8 * groups]
        if add:
            for g in range(groups):
                byte = pk[g]
                for t in range(8):
                    o[8 * g + t] += p if (byte >> np.uint8(t)) & np.uint8(1) else q
        else:
            for g in range(groups):
                byte = pk[g]
                for t in range(8):
                    o[8 * g + t] = p if (byte >> np.uint8(t)) & np.uint8(1) else q
        i += 8 * groups
        while i < end:
            _put(out, i, p if (packed[i >> 3] >> np.uint8(i & 7)) & np.uint8(1) else q, add)
            i += 1
