"""fp8: the tensor scaled into an 8-bit float type's range, as torchao's float8 all-gather does.

Per block (``block = 0``: the whole tensor), ``scale = amax / max_normal`` as a float32
division (max normal 448 for E4M3, 57344 for E5M2), and each entry is the float8 cast of
``x / scale``: torch's own cast (``torch.float8_e4m3fn``, ``torch.float8_e5m2``), round to
nearest even, or with ``rounding: stochastic`` one of the two neighbouring float8 values,
the upper with probability (|v| - lower) / (upper - lower) from the counter hash of
(seed, step, rank, stream, index): unbiased. Decode: ``float(code) * scale``.
An all-zero block has scale 1; a block holding NaN or Inf decodes to NaN.

Body: ``ceil(n / block)`` float32 scales, then one byte per entry.
"""
from __future__ import annotations

import torch

from ..core import minifloat, rng, wire
from ..core.base import Compressor, numel
from ..core.params import Param

FORMATS = ("e4m3", "e5m2")


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

    @property
    def fmt(self) -> minifloat.Format:
        return minifloat.FORMATS[self.format]

    def _nblocks(self, n: int) -> int:
        return -(-n // (self.block or max(n, 1)))

    def _header_params(self, shape):
        return (self.block, FORMATS.index(self.format), minifloat.ROUNDINGS.index(self.rounding), 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 4 * self._nblocks(n) + n

    def _blocks(self, flat: torch.Tensor) -> torch.Tensor:
        """(nblocks, block) view of ``flat``, the last block padded with zeros."""
        n = flat.numel()
        row = self.block or max(n, 1)
        nb = self._nblocks(n)
        return torch.nn.functional.pad(flat, (0, nb * row - n)).view(nb, row)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        blocks = self._blocks(flat)
        amax = blocks.abs().amax(dim=1)
        scale = torch.where(amax == 0, 1.0, amax / self.fmt.max_normal)
        v = (blocks / scale[:, None]).reshape(-1)[:n]
        dtype = minifloat.TORCH_DTYPES[self.format]
        if self.rounding == "nearest":
            codes = v.to(dtype).view(torch.uint8)
        else:
            # Saturated first: the division's rounding can put amax's entry a little past max_normal.
            finite = torch.isfinite(v)
            u = rng.uniform(rng.stream_key(self.seed, step, rank, stream), n, flat.device)
            v = torch.where(finite, v.clamp(-self.fmt.max_normal, self.fmt.max_normal), 0.0)
            codes = minifloat.round_to(self.fmt, v.double(), "stochastic", u).to(torch.uint8)
            codes = torch.where(finite, codes, v.new_full((), float("nan")).to(dtype).view(torch.uint8))
        return [scale, codes]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nblocks(n)
        scale = wire.section(payload, start, nb, torch.float32)
        codes = wire.section(payload, start + 4 * nb, n, torch.uint8)
        values = codes.view(minifloat.TORCH_DTYPES[self.format]).to(torch.float32)
        row = self.block or max(n, 1)
        padded = torch.nn.functional.pad(values, (0, nb * row - n)).view(nb, row)
        return (padded * scale[:, None]).reshape(-1)[:n]
