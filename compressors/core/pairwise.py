"""Sums in one fixed order, so that every implementation (torch, Numba, CUDA) gets the same bits.

A floating-point sum depends on the order of its additions, and torch's
reductions choose theirs by vector width and thread count. Where a payload
holds a sum (onebit's means, qsgd's l2 norms), it is instead defined as a
pairwise tree, in float64: the row is padded with zeros to the next power of
two P, then level 1 adds neighbours, ``s[i] = x[2i] + x[2i+1]``, level 2 adds
neighbouring level-1 sums, and so on up to one value (left + right each
time; the zeros are added too, so ``-0.0`` alone sums to ``+0.0``). A row of
one element is that element; an empty row sums to 0.
"""
from __future__ import annotations

import torch


def pairwise_sum(x: torch.Tensor) -> torch.Tensor:
    """The tree sum of each row of a 2-D float64 tensor."""
    rows, length = x.shape
    if length == 0:
        return x.new_zeros(rows)
    size = 1 << (length - 1).bit_length()
    if size != length:
        x = torch.nn.functional.pad(x, (0, size - length))
    while x.shape[1] > 1:
        x = x[:, 0::2] + x[:, 1::2]
    return x[:, 0]
