"""Dettmers (2016)'s 8-bit dynamic tree data type, built from its rule.

A code is ``sign << 7 | m``.  In the 7 bits ``m`` the number ``k`` of leading
zeros before the first 1-bit gives the decimal exponent ``10**-k`` (k = 0..5)
and the ``6 - k`` bits after that indicator are a linear fraction: decade k
holds ``2**(6-k)`` magnitudes (64, 32, 16, 8, 4, 2; 126 in all).  Within a
decade the fraction range [0.1, 1.0] is split at 0.45 into two halves, each
cut into equal bins, and each magnitude is its bin's midpoint (largest
0.99140625, smallest 2.75e-6).  The two codes left, ``m = 0`` and ``m = 1``,
are zero (``|x| / max < 1.5e-6``) and max (``|x| / max > 0.995703``).

With this layout the magnitudes ascend with ``m`` from 2 to 127, so encoding
finds the position of ``a = |x| / max`` among the 127 midpoints between
neighbours (``bounds``).  Instead of a binary search per element, the float32
bits of ``a`` shifted right by 15 (exponent and top 8 mantissa bits) index a
table of bins, each of relative width 2**-8; no bin holds more than one bound
(neighbouring bounds are at least 1.3% apart), so the position is the bin's
lowest position plus one comparison with the bin's bound.  The result is that
of the binary search, bit for bit.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

ZERO_BELOW = 1.5e-6
MAX_ABOVE = 0.995703
SPLIT = 0.45


def magnitudes() -> list[float]:
    """The 126 table magnitudes in ascending order (float64)."""
    values = []
    for k in range(5, -1, -1):  # smallest decade first
        half = 2 ** (6 - k) // 2
        for lo, hi in ((0.1, SPLIT), (SPLIT, 1.0)):
            width = (hi - lo) / half
            values += [(lo + (i + 0.5) * width) * 10.0**-k for i in range(half)]
    return values


@dataclass(frozen=True)
class Tables:
    bounds: torch.Tensor            # 127 float32 thresholds, ascending
    code_of_position: torch.Tensor  # uint8[128]: searchsorted position -> m
    value_of_code: torch.Tensor     # float32[256]: code -> signed value in [-1, 1]
    bin_position: torch.Tensor      # int32[BINS]: bounds <= the bin's lowest value
    bin_bound: torch.Tensor         # float32[BINS]: the next bound (may lie in the bin)


BIN_SHIFT = 15
BINS = (0x3F800000 >> BIN_SHIFT) + 1  # bins of the float32 patterns of [0, 1]


def position(tables: Tables, a: torch.Tensor) -> torch.Tensor:
    """Number of bounds <= ``a`` (0..127) for float32 ``a`` in [0, 1], as int32."""
    idx = a.view(torch.int32) >> BIN_SHIFT
    return tables.bin_position[idx] + (a >= tables.bin_bound[idx])


@functools.lru_cache(maxsize=None)
def _tables(device: torch.device) -> Tables:
    mags = magnitudes()
    mids = [(a + b) / 2 for a, b in zip(mags, mags[1:])]
    bounds = torch.tensor([ZERO_BELOW] + mids + [MAX_ABOVE], dtype=torch.float32)
    # Position 0 is below every bound (zero), 127 above every bound (max).
    code_of_position = torch.tensor([0] + list(range(2, 128)) + [1], dtype=torch.uint8)
    unsigned = torch.tensor([0.0, 1.0] + mags, dtype=torch.float32)
    value_of_code = torch.cat([unsigned, -unsigned])
    lowest = (torch.arange(BINS, dtype=torch.int32) << BIN_SHIFT).view(torch.float32)
    bin_position = torch.searchsorted(bounds, lowest, right=True)
    bin_bound = torch.cat([bounds, torch.tensor([2.0])])[bin_position]  # 2.0: above any a
    tables = (bounds, code_of_position, value_of_code, bin_position.to(torch.int32), bin_bound)
    return Tables(*(t.to(device) for t in tables))


def tables(device: torch.device) -> Tables:
    return _tables(torch.device(device))
