"""1-bit SGD (compressors.onebit): per row of the 2-D view, the means of the entries >= 0 and < 0.

The sums behind the means follow compressors.pairwise (a pairwise tree in
float64, zero-padded to a power of two): aligned groups of 8 entries are
summed as ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) and pushed as one level-3 node,
the rest leaf by leaf. Bits: 1 for an entry >= 0, little-endian over the
flat index.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, JIT, tree_push, tree_total

_STACK = 64  # levels of the tree: rows are shorter than 2**63


@njit(**JIT)
def encode(x, rows, cols, mean_pos, mean_neg, packed):
    sums_p = np.empty(_STACK, np.float64)
    sums_n = np.empty(_STACK, np.float64)
    levels_p = np.empty(_STACK, np.int64)
    levels_n = np.empty(_STACK, np.int64)
    pos = np.empty(8, np.float64)
    neg = np.empty(8, np.float64)
    acc = np.uint32(0)
    for r in range(rows):
        base = r * cols
        depth_p = 0
        depth_n = 0
        count = 0
        j = 0
        while j < cols:
            i = base + j
            if j + 8 <= cols:
                for t in range(8):
                    v = x[i + t]
                    ok = v >= F32(0.0)
                    count += ok
                    pos[t] = np.float64(v) if ok else 0.0
                    neg[t] = 0.0 if ok else np.float64(v)
                    acc |= np.uint32(ok) << np.uint32((i + t) & 7)
                    if (i + t) & 7 == 7:
                        packed[(i + t) >> 3] = np.uint8(acc)
                        acc = np.uint32(0)
                sp = ((pos[0] + pos[1]) + (pos[2] + pos[3])) + ((pos[4] + pos[5]) + (pos[6] + pos[7]))
                sn = ((neg[0] + neg[1]) + (neg[2] + neg[3])) + ((neg[4] + neg[5]) + (neg[6] + neg[7]))
                depth_p = tree_push(sums_p, levels_p, depth_p, sp, 3)
                depth_n = tree_push(sums_n, levels_n, depth_n, sn, 3)
                j += 8
            else:
                v = x[i]
                ok = v >= F32(0.0)
                count += ok
                depth_p = tree_push(sums_p, levels_p, depth_p, np.float64(v) if ok else 0.0, 0)
                depth_n = tree_push(sums_n, levels_n, depth_n, 0.0 if ok else np.float64(v), 0)
                acc |= np.uint32(ok) << np.uint32(i & 7)
                if i & 7 == 7:
                    packed[i >> 3] = np.uint8(acc)
                    acc = np.uint32(0)
                j += 1
        total_p = tree_total(sums_p, levels_p, depth_p, cols)
        total_n = tree_total(sums_n, levels_n, depth_n, cols)
        mean_pos[r] = F32(total_p / count) if count > 0 else F32(0.0)
        mean_neg[r] = F32(total_n / (cols - count)) if cols - count > 0 else F32(0.0)
    n = rows * cols
    if n & 7:
        packed[n >> 3] = np.uint8(acc)


@njit(**JIT)
def decode(packed, rows, cols, mean_pos, mean_neg, out, add):
    """out[i] (+)= its row's positive mean where its bit is 1, else the negative mean."""
    for r in range(rows):
        p = mean_pos[r]
        q = mean_neg[r]
        for i in range(r * cols, r * cols + cols):
            v = p if (packed[i >> 3] >> np.uint8(i & 7)) & np.uint8(1) else q
            if add:
                out[i] += v
            else:
                out[i] = v
