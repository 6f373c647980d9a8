"""mx: the OCP Microscaling (MX) v1.0 block formats (MXFP8, MXFP6, MXFP4, MXINT8).

Blocks of 32 consecutive entries of the flattened tensor (the last may be short) share one
E8M0 scale, a power of two ``X = 2**s`` stored as the byte ``s + 127``. Conversion follows
the spec's section 6.3 (and Algorithm 1 of Rouhani et al. 2023, which implements it):

- ``s = floor(log2(amax)) - emax_elem``, with ``emax_elem`` the exponent of the element type's
  largest normal (E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2, INT8 0), clamped to the scale's
  range 2**-127 .. 2**127; an all-zero block takes the smallest scale and decodes to zeros.
- each element ``P = V / X`` rounded to the element type, round to nearest with ties to even
  (the spec's required rounding; ``rounding: stochastic`` rounds up with probability
  (|P| - lower) / (upper - lower) instead, unbiased, from the counter hash of
  (seed, step, rank, stream, index)), and a value beyond the type's largest normal clamped to
  it, sign kept (the spec's saturation of normal numbers).
- INT8 is two's complement with an implicit scale of 2**-6 (1.984375 at most), clamped
  symmetrically to +-127; FP elements are sign-magnitude (compressors/core/minifloat.py).
- a block holding NaN or Inf gets the scale byte 0xFF, E8M0's NaN, and decodes to NaN (the spec
  leaves the conversion of Inf and NaN to implementations; a NaN scale makes every element NaN).

float32 subnormal inputs are scaled like any other (Algorithm 1 flushes them to zero; the spec
does not ask it). Body: one scale byte per block, then the elements' codes packed little-endian
at 8, 6 or 4 bits each (8.25, 6.25 and 4.25 bits per entry).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import minifloat, rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param

ELEMENTS = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8")
BLOCK = 32  # the spec's k for every concrete MX format
NAN_SCALE = 0xFF  # E8M0's NaN
SCALE_BIAS = 127
INT8_EMAX = 0
INT8_FRACTION_BITS = 6


class MX(Compressor):
    name = "mx"
    wire_id = 28
    params = (
        Param("element", "e4m3", str, choices=ELEMENTS,
              doc="the element type: fp8 e4m3 or e5m2 (MXFP8), fp6 e3m2 or e2m3 (MXFP6), fp4 e2m1 (MXFP4), int8 (MXINT8)"),
        Param("rounding", "nearest", str, choices=minifloat.ROUNDINGS,
              doc="to the nearest element value (ties to even, the spec's), or stochastically between the two neighbours"),
    )
    examples = ({}, {"element": "e5m2"}, {"element": "e3m2"}, {"element": "e2m3"}, {"element": "e2m1"},
                {"element": "e2m1", "rounding": "stochastic"}, {"element": "int8"},
                {"element": "int8", "rounding": "stochastic"})
    has_numba = True
    cuda_program = "minifloat"

    @property
    def element_bits(self) -> int:
        return 8 if self.element == "int8" else minifloat.FORMATS[self.element].bits

    @property
    def emax(self) -> int:
        return INT8_EMAX if self.element == "int8" else minifloat.FORMATS[self.element].emax

    def _header_params(self, shape):
        return (BLOCK, ELEMENTS.index(self.element), minifloat.ROUNDINGS.index(self.rounding), 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return -(-n // BLOCK) + bitpack.packed_nbytes(n, self.element_bits)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        nb = -(-n // BLOCK)
        blocks = torch.nn.functional.pad(flat, (0, nb * BLOCK - n)).view(nb, BLOCK)
        amax = blocks.abs().amax(dim=1)
        finite = torch.isfinite(amax)
        # floor(log2(amax)) exactly: frexp gives amax = m * 2**e with m in [0.5, 1)
        exponent = torch.frexp(torch.where(finite & (amax > 0), amax, 1.0)).exponent - 1
        s = torch.where(amax > 0, exponent - self.emax, -SCALE_BIAS).clamp_(-SCALE_BIAS, SCALE_BIAS)
        scales = torch.where(finite, s + SCALE_BIAS, NAN_SCALE).to(torch.uint8)
        # V / X in float64: exact for every float32 V and power of two X
        v = (blocks.double() * torch.pow(2.0, -s.double())[:, None]).reshape(-1)[:n]
        v = torch.where(finite.repeat_interleave(BLOCK)[:n], v, 0.0)
        u = None
        if self.rounding == "stochastic":
            u = rng.uniform(rng.stream_key(self.seed, step, rank, stream), n, flat.device)
        if self.element == "int8":
            codes = _round_int8(v, self.rounding, u).to(torch.uint8)
        else:
            codes = minifloat.round_to(minifloat.FORMATS[self.element], v, self.rounding, u)
        return [scales, bitpack.pack(codes, self.element_bits)]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = -(-n // BLOCK)
        scales = wire.section(payload, start, nb, torch.uint8)
        data = wire.section(payload, start + nb, bitpack.packed_nbytes(n, self.element_bits), torch.uint8)
        codes = bitpack.unpack(data, self.element_bits, n)
        values = self._values(payload.device)[codes]
        # 2**s is exact in float32 for s in -127..127 (2**-127 a subnormal); the NaN byte makes NaN
        x = torch.pow(2.0, (scales.to(torch.float64) - SCALE_BIAS)).to(torch.float32)
        x = torch.where(scales == NAN_SCALE, float("nan"), x)
        padded = torch.nn.functional.pad(values, (0, nb * BLOCK - n)).view(nb, BLOCK)
        return (padded * x[:, None]).reshape(-1)[:n]

    def _rounding(self) -> tuple[int, int, int]:
        """The element type's mantissa bits, bias and largest finite magnitude code (zeros for int8, which
        the kernels round as integers)."""
        if self.element == "int8":
            return 0, 0, 0
        fmt = minifloat.FORMATS[self.element]
        return fmt.mbits, fmt.bias, fmt.finite - 1

    def _magnitudes(self) -> np.ndarray:
        """float64: the element type's magnitudes, for stochastic rounding (int8: one unused entry)."""
        return np.zeros(1) if self.element == "int8" else minifloat.magnitudes(minifloat.FORMATS[self.element])

    def _values(self, device: torch.device) -> torch.Tensor:
        return torch.from_numpy(_element_values(self.element)).to(device)

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        mx_encode = kernel_module("minifloat").mx_encode

        nb = -(-flat.size // BLOCK)
        stochastic = self.rounding == "stochastic"
        key = rng.stream_key(self.seed, step, rank, stream) if stochastic else 0
        mbits, bias, max_code = self._rounding()
        mx_encode(flat, body[:nb], body[nb:], self.element_bits, self.emax, self.element == "int8", mbits, bias,
                  max_code, stochastic, np.uint32(key), np.float32(self._magnitudes()[-1]))

    def _decode_numba(self, body, shape, out, add):
        mx_decode = kernel_module("minifloat").mx_decode

        nb = -(-out.size // BLOCK)
        mx_decode(body[nb:], body[:nb], self.element_bits, _element_values(self.element), _scale_values(), out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream):
        n = flat.size
        nb = -(-n // BLOCK)
        if n == 0:
            return
        maxima = k.zeros(nb, np.uint32)
        k("mf_block_max", k.grid(n), flat, np.int64(n), np.int64(BLOCK), maxima)
        scales = body[:nb]
        v_scales = k.empty(nb, np.float32)
        k("mx_scales", k.grid(nb), maxima, np.int64(nb), np.int32(self.emax), scales, v_scales)
        packed = body[nb:]
        codes = packed if self.element_bits == 8 else k.empty(n, np.uint8)
        stochastic = self.rounding == "stochastic"
        key = rng.stream_key(self.seed, step, rank, stream) if stochastic else 0
        mbits, bias, max_code = self._rounding()
        k("mx_codes", k.grid(n), flat, np.int64(n), v_scales, np.int32(self.element_bits),
          np.int32(self.element == "int8"), np.int32(mbits), np.int32(bias), np.int32(max_code), np.int32(stochastic),
          np.uint32(key), k.table(("magnitudes", self.element), self._magnitudes), codes)
        if self.element_bits != 8:
            k("mx_pack", k.grid(-(-n // 2)), codes, np.int64(n), np.int32(self.element_bits), packed)

    def _decode_cuda(self, k, body, shape, out, add):
        n = out.size
        nb = -(-n // BLOCK)
        if n == 0:
            return
        k("mx_decode", k.grid(n), body[nb:], body[:nb], k.table(("values", self.element), lambda: _element_values(self.element)),
          k.table("scales", _scale_values), np.int64(n), np.int32(self.element_bits), np.int32(add), out)


@functools.cache
def _element_values(element: str) -> np.ndarray:
    """float32 value of each element code (int8: two's complement in units of 2**-6)."""
    if element == "int8":
        return (np.arange(256, dtype=np.int32).astype(np.uint8).view(np.int8).astype(np.float32)
                * np.float32(2.0**-INT8_FRACTION_BITS))
    return minifloat.code_values(minifloat.FORMATS[element])


@functools.cache
def _scale_values() -> np.ndarray:
    """float32[256]: 2**(byte - 127), NaN for 0xFF (what decode multiplies by)."""
    return np.append(np.power(2.0, np.arange(NAN_SCALE) - SCALE_BIAS), np.nan).astype(np.float32)


def _round_int8(v: torch.Tensor, rounding: str, u: torch.Tensor | None) -> torch.Tensor:
    """Two's complement codes (int64 in 0..255) of float64 ``v`` in units of 2**-6, clamped to +-127."""
    q = v * 2.0**INT8_FRACTION_BITS
    if rounding == "nearest":
        q = torch.round(q)  # half to even
    else:
        low = torch.floor(q)
        q = low + (u.to(torch.float64) < q - low).to(torch.float64)
    return q.clamp_(-127, 127).to(torch.int64) & 0xFF
