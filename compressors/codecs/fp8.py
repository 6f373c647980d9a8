"""fp8: the tensor scaled into an 8-bit float type's range, as torchao's float8 all-gather does.

Per block (``block = 0``: the whole tensor), ``scale = amax / max_normal`` as a float32
division (max normal 448 for E4M3, 57344 for E5M2), and each entry is the float8 cast of
``x / scale`` clamped to +-max_normal (torchao's saturated cast): torch's own cast (``torch.float8_e4m3fn``, ``torch.float8_e5m2``), round to
nearest even, or with ``rounding: stochastic`` one of the two neighbouring float8 values,
the upper with probability (|v| - lower) / (upper - lower) from the counter hash of
(seed, step, rank, stream, index): unbiased. Decode: ``float(code) * scale``.
An all-zero block has scale 1, a block whose scale would underflow to 0 the smallest float32;
a block holding NaN or Inf decodes to NaN.

Body: ``ceil(n / block)`` float32 scales, then one byte per entry. The last block may be short
(its scale is its own entries' amax), and a block longer than the tensor is the whole tensor:
cost follows n, never ``block``.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..core import minifloat, rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param

FORMATS = ("e4m3", "e5m2")
TINY = 2.0**-149  # the smallest float32 (a subnormal)


class FP8(Compressor):
    name = "fp8"
    wire_id = 27
    params = (
        Param("format", "e4m3", str, choices=FORMATS,
              doc="the float8 type: e4m3 (max 448, 3 mantissa bits) or e5m2 (max 57344, 2 mantissa bits)"),
        Param("block", 0, int, low=0, high=2**31 - 1, doc="entries that share one scale (0: the whole tensor)"),
        Param("rounding", "nearest", str, choices=minifloat.ROUNDINGS,
              doc="to the nearest float8 value (ties to even), or stochastically between the two neighbours"),
    )
    examples = ({}, {"block": 7, "format": "e5m2"}, {"rounding": "stochastic", "block": 32})
    has_numba = True
    cuda_program = "minifloat"

    @property
    def fmt(self) -> minifloat.Format:
        return minifloat.FORMATS[self.format]

    def _row(self, n: int) -> int:
        """Entries per row of the blocks' matrix: ``block``, or the tensor's length where the block is
        longer (or 0, the whole tensor), so that the zero padding is shorter than the tensor and cost
        follows n, never ``block``. The amax of a row padded with zeros is its entries' amax, so the
        scales and the codes are those of blocks of ``block`` entries."""
        return max(min(self.block, n) if self.block else n, 1)

    def _nblocks(self, n: int) -> int:
        return -(-n // self._row(n))

    def _header_params(self, shape):
        return (self.block, FORMATS.index(self.format), minifloat.ROUNDINGS.index(self.rounding), 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 4 * self._nblocks(n) + n

    def _blocks(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` as the (nblocks, ``_row``) matrix, the last row padded with zeros."""
        n = flat.numel()
        row = self._row(n)
        nb = self._nblocks(n)
        return torch.nn.functional.pad(flat, (0, nb * row - n)).view(nb, row)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        blocks = self._blocks(flat)
        amax = blocks.abs().amax(dim=1)
        scale = amax / self.fmt.max_normal
        # An all-zero block: scale 1. A scale that underflows (amax below max_normal * 2**-149): the
        # smallest float32, so that x / scale stays finite (torchao floors amax for the same reason).
        scale = torch.where(amax == 0, 1.0, torch.where(scale == 0, TINY, scale))
        # Saturated, as torchao's cast is: the division's rounding can put amax's entry past max_normal
        # (far past it where the scale is a subnormal of few significant bits), and E5M2 has an infinity.
        top = self.fmt.max_normal
        v = (blocks / scale[:, None]).reshape(-1)[:n].clamp(-top, top)
        dtype = minifloat.TORCH_DTYPES[self.format]
        if self.rounding == "nearest":
            codes = v.to(dtype).view(torch.uint8)
        else:
            finite = torch.isfinite(v)
            u = rng.uniform(rng.stream_key(self.seed, step, rank, stream), n, flat.device)
            v = torch.where(finite, v, 0.0)
            codes = minifloat.round_to(self.fmt, v.double(), "stochastic", u).to(torch.uint8)
            codes = torch.where(finite, codes, v.new_full((), float("nan")).to(dtype).view(torch.uint8))
        return [scale, codes]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nblocks(n)
        scale = wire.section(payload, start, nb, torch.float32)
        codes = wire.section(payload, start + 4 * nb, n, torch.uint8)
        values = codes.view(minifloat.TORCH_DTYPES[self.format]).to(torch.float32)
        row = self._row(n)
        padded = torch.nn.functional.pad(values, (0, nb * row - n)).view(nb, row)
        return (padded * scale[:, None]).reshape(-1)[:n]

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        f32_section = kernel_module("common").f32_section
        fp8_encode = kernel_module("minifloat").fp8_encode

        nb = self._nblocks(flat.size)
        fmt = self.fmt
        key = rng.stream_key(self.seed, step, rank, stream) if self.rounding == "stochastic" else 0
        fp8_encode(flat, self.block, f32_section(body, 0, nb, writable=True), body[4 * nb:], np.float32(fmt.max_normal),
                   fmt.mbits, fmt.bias, fmt.finite - 1, _NAN_CODE, self.rounding == "stochastic", np.uint32(key))

    def _decode_numba(self, body, shape, out, add):
        f32_section = kernel_module("common").f32_section
        fp8_decode = kernel_module("minifloat").fp8_decode

        nb = self._nblocks(out.size)
        fp8_decode(body[4 * nb:], f32_section(body, 0, nb), self.block, _code_values(self.format), out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream):
        n = flat.size
        nb = self._nblocks(n)
        if n == 0:
            return
        fmt = self.fmt
        row = np.int64(self.block or n)
        maxima = k.zeros(nb, np.uint32)
        k("mf_block_max", k.grid(n), flat, np.int64(n), row, maxima)
        key = rng.stream_key(self.seed, step, rank, stream) if self.rounding == "stochastic" else 0
        k("fp8_encode", k.grid(n), flat, np.int64(n), row, maxima, np.float32(fmt.max_normal), np.int32(fmt.mbits),
          np.int32(fmt.bias), np.int32(fmt.finite - 1), np.int32(_NAN_CODE), np.int32(self.rounding == "stochastic"),
          np.uint32(key), k.table(("magnitudes", self.format), lambda: minifloat.magnitudes(fmt)), k.section(body, 0, nb, np.float32, writable=True),
          body[4 * nb:])

    def _decode_cuda(self, k, body, shape, out, add):
        n = out.size
        nb = self._nblocks(n)
        if n == 0:
            return
        k("fp8_decode", k.grid(n), body[4 * nb:], k.section(body, 0, nb, np.float32),
          k.table(("values", self.format), lambda: _code_values(self.format)), np.int64(n), np.int64(self.block or n), np.int32(add), out)


_NAN_CODE = 0x7F  # torch's cast of a NaN of clear sign, in both types


@functools.cache
def _code_values(fmt: str) -> np.ndarray:
    """float32[256]: torch's float32 of each code (its NaNs' bits too), what the Numba decode multiplies."""
    return torch.arange(256, dtype=torch.uint8).view(minifloat.TORCH_DTYPES[fmt]).to(torch.float32).numpy()
