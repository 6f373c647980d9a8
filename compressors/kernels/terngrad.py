"""TernGrad's clipping on the CPU (compressors.codecs.terngrad): entries clamped to [-c sigma, c sigma],
sigma the tensor's standard deviation, before QSGD's kernels encode them.

The mean and the variance are pairwise tree sums in float64 (compressors.core.pairwise), aligned groups
of eight leaves summed in registers and pushed as one level-3 node, as the sign kernels' scale is; the
clamp is torch's ``minimum(maximum(x, -bound), bound)``: NaN where x or the bound is NaN, and where x
equals a bound, x's own zero sign.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, TREE_DEPTH, tree_push, tree_total


@njit(**INLINE)
def _leaf(v, mean, squared):
    d = np.float64(v) - mean
    return d * d if squared else d


@njit(**INLINE)
def _tree(x, mean, squared):
    """The tree sum of x - mean (``squared``: of its squares) in float64."""
    sums = np.empty(TREE_DEPTH, np.float64)
    levels = np.empty(TREE_DEPTH, np.int64)
    n = x.size
    depth = 0
    i = 0
    while i + 8 <= n:
        left = (_leaf(x[i], mean, squared) + _leaf(x[i + 1], mean, squared)) + \
            (_leaf(x[i + 2], mean, squared) + _leaf(x[i + 3], mean, squared))
        right = (_leaf(x[i + 4], mean, squared) + _leaf(x[i + 5], mean, squared)) + \
            (_leaf(x[i + 6], mean, squared) + _leaf(x[i + 7], mean, squared))
        depth = tree_push(sums, levels, depth, left + right, 3)
        i += 8
    for j in range(i, n):
        depth = tree_push(sums, levels, depth, _leaf(x[j], mean, squared), 0)
    return tree_total(sums, levels, depth, n)


@njit(**JIT)
def clip(x, c, out):
    """``out`` = float32 ``x`` clamped to [-c sigma, c sigma] (x non-empty)."""
    n = x.size
    mean = _tree(x, 0.0, False) / np.float64(n)
    bound = F32(c * np.sqrt(_tree(x, mean, True) / np.float64(n)))
    low = -bound
    for i in range(n):
        v = x[i]
        # torch.maximum then torch.minimum: the first operand where they compare equal, NaN from either
        m = v if (v >= low or v != v) else low
        m = m if (m <= bound or m != m) else bound
        out[i] = bound if bound != bound else m
