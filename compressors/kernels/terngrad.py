"""TernGrad's clipping on the CPU (compressors.codecs.terngrad): entries clamped to [-c sigma, c sigma],
sigma the tensor's standard deviation, before QSGD's kernels encode them.

The mean and the variance are pairwise tree sums in float64 (common.tree_sum), as the sign kernels'
scale is; the clamp is torch's ``minimum(maximum(x, -bound), bound)``: NaN where x or the bound is NaN, and where x
equals a bound, x's own zero sign.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, JIT, LEAF_PLAIN, LEAF_SQUARE, tree_sum


@njit(**JIT)
def clip(x, c, out):
    """``out`` = float32 ``x`` clamped to [-c sigma, c sigma] (x non-empty)."""
    n = x.size
    mean = tree_sum(x, 0.0, LEAF_PLAIN) / np.float64(n)
    bound = F32(c * np.sqrt(tree_sum(x, mean, LEAF_SQUARE) / np.float64(n)))
    low = -bound
    for i in range(n):
        v = x[i]
        # torch.maximum then torch.minimum: the first operand where they compare equal, NaN from either
        m = v if (v >= low or v != v) else low
        m = m if (m <= bound or m != m) else bound
        out[i] = bound if bound != bound else m
