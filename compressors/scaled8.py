"""8-bit types scaled by the absolute maximum: Dettmers' dynamic tree and linear.

Body: ``nblocks`` float32 maxima, then one code byte per element
(``4 * ceil(n / block) + n`` bytes; ``block = 0`` means one block, the paper's
per-tensor scaling).  A block whose maximum is zero decodes to zeros; a block
holding NaN or Inf decodes to NaN/Inf through its maximum.
"""
from __future__ import annotations

import torch

from . import dynamic_tree, wire
from .base import Compressor, numel
from .params import Param

BLOCK = Param("block", 0, int, low=0, high=2**31 - 1)


class _AbsmaxScaled(Compressor):
    params = (BLOCK,)

    def _block_len(self, n: int) -> int:
        return self.block if self.block else max(n, 1)

    def _nblocks(self, n: int) -> int:
        return -(-n // self._block_len(n))

    def _header_params(self, shape):
        return (self.block, 0, 0, 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 4 * self._nblocks(n) + n

    def _blocks(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` zero-padded to whole blocks, shape (nblocks, block)."""
        n = flat.numel()
        b = self._block_len(n)
        nb = self._nblocks(n)
        if nb * b != n:
            flat = torch.nn.functional.pad(flat, (0, nb * b - n))
        return flat.view(nb, b)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        blocks = self._blocks(flat)
        absmax = blocks.abs().amax(dim=1) if n else blocks.new_zeros(0)
        codes = self._quantize(blocks, absmax).reshape(-1)[:n]
        return [absmax, codes]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nblocks(n)
        absmax = wire.section(payload, start, nb, torch.float32)
        codes = wire.section(payload, start + 4 * nb, n, torch.uint8)
        values = self._dequantize(codes)
        b = self._block_len(n)
        if nb * b != n:
            values = torch.nn.functional.pad(values, (0, nb * b - n))
        return (values.view(nb, b) * absmax[:, None]).reshape(-1)[:n]


class Dynamic8(_AbsmaxScaled):
    """Dettmers' 8-bit dynamic tree type (see ``dynamic_tree``)."""
    name = "dynamic8"

    def _quantize(self, blocks, absmax):
        table = dynamic_tree.tables(blocks.device)
        # Divide, not multiply by 1 / max: that reciprocal overflows for tiny maxima.
        m = absmax[:, None]
        scaled = torch.nan_to_num_(torch.where(m > 0, blocks.abs() / m, 0.0), nan=0.0).clamp_(max=1.0)
        pos = dynamic_tree.position(table, scaled)
        return table.code_of_position[pos] | ((blocks < 0).to(torch.uint8) << 7)

    def _dequantize(self, codes):
        return dynamic_tree.tables(codes.device).value_of_code[codes.long()]


class Linear8(_AbsmaxScaled):
    """255 uniform levels over [-max, max]: code = rint(x / max * 127) + 127."""
    name = "linear8"

    def _quantize(self, blocks, absmax):
        m = absmax[:, None]
        q = torch.nan_to_num_(torch.round(torch.where(m > 0, blocks / m * 127.0, 0.0)), nan=0.0).clamp_(-127, 127)
        return (q + 127).to(torch.uint8)

    def _dequantize(self, codes):
        return (codes.to(torch.float32) - 127.0) * (1.0 / 127.0)
