"""Narrow floating-point element types (fp8, fp6, fp4) and rounding to them.

A type of ``ebits`` exponent and ``mbits`` mantissa bits, sign-magnitude, bias
``2**(ebits-1) - 1``: a code's magnitude bits ``c`` are the exponent ``e = c >> mbits``
and mantissa ``m``; the value is ``m * 2**(1 - bias - mbits)`` for ``e = 0``
(subnormals) and ``(1 + m / 2**mbits) * 2**(e - bias)`` otherwise. Magnitudes grow with
the code, so rounding to the type is a search in its sorted table of magnitudes.
E4M3 (OCP's "fn" variant: no infinities, ``S.1111.111`` is NaN) and E5M2 (IEEE-like:
``S.11111.00`` is infinity, ``S.11111.xx`` NaN) are OCP 8-bit floating point (OFP8)
and torch's ``float8_e4m3fn`` / ``float8_e5m2``; E3M2, E2M3 and E2M1 have no special
codes (OCP MX v1.0's FP6 and FP4 element types).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch

ROUNDINGS = ("nearest", "stochastic")


class Format(NamedTuple):
    name: str
    ebits: int
    mbits: int
    # Codes of magnitude (sign bit clear) that are numbers: 0 .. finite - 1; above them, Inf or NaN.
    finite: int
    # The type's largest power of two (OCP MX: emax_elem, the exponent of its largest normal).
    emax: int

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return 2 ** (self.ebits - 1) - 1

    @property
    def max_normal(self) -> float:
        return float(magnitudes(self)[-1])


FORMATS = {
    "e4m3": Format("e4m3", 4, 3, 127, 8),
    "e5m2": Format("e5m2", 5, 2, 124, 15),
    "e3m2": Format("e3m2", 3, 2, 32, 4),
    "e2m3": Format("e2m3", 2, 3, 32, 2),
    "e2m1": Format("e2m1", 2, 1, 8, 2),
}
# torch's own types for the 8-bit ones: the fp8 codec's cast, and a check of the tables.
TORCH_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@functools.cache
def magnitudes(fmt: Format) -> np.ndarray:
    """float64[finite]: the value of each magnitude code, increasing (exact)."""
    c = np.arange(fmt.finite)
    e, m = c >> fmt.mbits, c & ((1 << fmt.mbits) - 1)
    sub = m * 2.0 ** (1 - fmt.bias - fmt.mbits)
    normal = (1 + m / 2.0**fmt.mbits) * 2.0 ** (e - fmt.bias)
    return np.where(e == 0, sub, normal)


@functools.cache
def code_values(fmt: Format) -> np.ndarray:
    """float32[2**bits]: the value of every code, sign bit included (NaN and Inf codes too)."""
    half = 1 << (fmt.bits - 1)
    mags = np.full(half, np.nan)
    mags[:fmt.finite] = magnitudes(fmt)
    if fmt.name == "e5m2":
        mags[fmt.finite] = np.inf
    return np.concatenate([mags, -mags]).astype(np.float32)


def round_to(fmt: Format, v: torch.Tensor, rounding: str = "nearest", u: torch.Tensor | None = None) -> torch.Tensor:
    """Codes (int64, sign bit at ``bits - 1``) of float64 ``v``, finite: to the nearest magnitude with
    ties to the even code (round to nearest even), or with ``rounding="stochastic"`` up with probability
    (|v| - lower) / (upper - lower) for ``u`` uniform in [0, 1) (unbiased); magnitudes beyond the largest
    normal saturate to it."""
    table = torch.from_numpy(magnitudes(fmt)).to(v.device)
    a = v.abs().clamp(max=float(table[-1]))
    hi = torch.searchsorted(table, a).clamp_(max=fmt.finite - 1)  # first magnitude >= a
    lo = (hi - 1).clamp_(min=0)
    below, above = table[lo], table[hi]
    exact = above == a
    # float64 differences of these values are exact, and so the tie test
    d_lo, d_hi = a - below, above - a
    if rounding == "nearest":
        up = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    else:
        up = u.to(torch.float64) < d_lo / (above - below)
    code = torch.where(exact | up, hi, lo)
    return code | (torch.signbit(v).to(torch.int64) << (fmt.bits - 1))
