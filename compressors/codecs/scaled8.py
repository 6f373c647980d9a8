"""8-bit types scaled by the absolute maximum: Dettmers' dynamic tree and linear.

Body: ``nblocks`` float32 maxima, then one code byte per element
(``4 * ceil(n / block) + n`` bytes; ``block = 0`` means one block, the paper's
per-tensor scaling).  A block whose maximum is zero decodes to zeros; a block
holding NaN or Inf decodes to NaN/Inf through its maximum.
"""
from __future__ import annotations

import functools
from typing import ClassVar

import numpy as np
import torch

from ..core import chunks, dynamic_tree, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param

BLOCK = Param("block", 0, int, low=0, high=2**31 - 1, doc="entries that share one absolute maximum (0: the whole tensor)")
# sra encodes each rank's chunk of a tensor on its own, so block 0's maximum is the chunk's (finer steps
# than the paper's per-tensor maximum, never coarser). ``tensor`` takes the paper's: a worker has its whole
# tensor; the servers agree on the mean's maximum with one small all_reduce per step.
SCOPES = ("chunk", "tensor")
SCOPE = Param("scope", "chunk", str, choices=SCOPES,
              doc="with block 0 under sra, what the maximum is taken over: each rank's chunk, or the whole "
                  "tensor as in the paper (one more small all_reduce per step)")


class _AbsmaxScaled(Compressor):
    params = (BLOCK, SCOPE)
    # A code the encoder never emits: decode rejects a payload holding it (None: every code is valid).
    invalid_code: ClassVar[int | None] = None
    has_numba = True
    cuda_program = "scaled8"

    @classmethod
    def relations(cls, params):
        if params["scope"] == "tensor" and params["block"]:
            return f"scope 'tensor' is block 0's (one maximum per tensor); with block {params['block']} use scope 'chunk'"
        return None

    @property
    def scales_by_tensor(self) -> bool:
        return self.scope == "tensor"

    def _nblocks(self, n: int) -> int:
        return -(-n // (self.block or max(n, 1)))

    def _pieces(self, n: int) -> list[tuple[int, int, int]]:
        """``(start, stop, row_len)`` element ranges, each a (rows, row_len) view.

        Rows are blocks (the last may be short); with one scale for the whole
        tensor, rows of ``chunks.CHUNK_ELEMS`` elements.
        """
        row = self.block or chunks.CHUNK_ELEMS
        full = n // row
        pieces = [(a * row, b * row, row) for a, b in chunks.spans(full, row)]
        if full * row < n:
            pieces.append((full * row, n, n - full * row))
        return pieces

    def _scales(self, absmax: torch.Tensor, start: int, row_len: int, rows: int) -> torch.Tensor:
        if not self.block:
            return absmax.view(1, 1)
        first = start // self.block
        return absmax[first:first + rows, None]

    def _header_params(self, shape):
        return (self.block, 0, 0, 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 4 * self._nblocks(n) + n

    def _encode_body(self, flat, shape, *, step, rank, stream, absmax=None):
        floor = absmax
        n = flat.numel()
        pieces = self._pieces(n)
        maxima = [flat[a:b].view(-1, row).abs().amax(dim=1) for a, b, row in pieces]
        absmax = torch.cat(maxima) if maxima else flat.new_zeros(0)
        if not self.block and n:
            absmax = absmax.amax().view(1)
            if floor is not None:  # the kernels' compare: a NaN floor changes nothing
                f = torch.tensor(floor, dtype=torch.float32, device=flat.device)
                absmax = torch.where(f > absmax, f, absmax)
        codes = torch.empty(n, dtype=torch.uint8, device=flat.device)
        for a, b, row in pieces:
            rows = flat[a:b].view(-1, row)
            codes[a:b] = self._quantize(rows, self._scales(absmax, a, row, rows.shape[0])).view(-1)
        return [absmax, codes]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nblocks(n)
        absmax = wire.section(payload, start, nb, torch.float32)
        codes = wire.section(payload, start + 4 * nb, n, torch.uint8)
        # One check over the whole section (one pass, one device sync), not one per piece.
        if self.invalid_code is not None and bool((codes == self.invalid_code).any()):
            raise wire.PayloadError(f"{self.name}: code {self.invalid_code} in payload, which its encoder never emits")
        out = torch.empty(n, dtype=torch.float32, device=payload.device)
        for a, b, row in self._pieces(n):
            values = self._dequantize(codes[a:b]).view(-1, row)
            out[a:b] = (values * self._scales(absmax, a, row, values.shape[0])).view(-1)
        return out

    def _encode_numba(self, flat, body, shape, *, step, rank, stream, absmax=None):
        f32_section = kernel_module("common").f32_section

        nb = self._nblocks(flat.size)
        floor = np.float32(0.0 if absmax is None else absmax)
        self._numba_encode(flat, f32_section(body, 0, nb, writable=True), body[4 * nb:], floor)

    def _decode_numba(self, body, shape, out, add):
        kernels = kernel_module("scaled8")
        f32_section = kernel_module("common").f32_section

        nb = self._nblocks(out.size)
        codes = body[4 * nb:]
        if self.invalid_code is not None and kernels.has_code(codes, self.invalid_code):
            raise wire.PayloadError(f"{self.name}: code {self.invalid_code} in payload, which its encoder never emits")
        if self.name == "linear8":  # its table, computed: no gather
            kernels.linear8_decode(codes, f32_section(body, 0, nb), self.block, out, add)
        else:
            kernels.decode(codes, f32_section(body, 0, nb), self.block, self._code_values, out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream, absmax=None):
        # compressors/cuda/scaled8.cu; the bucket's length picks its kernels (see there).
        from ..cuda.launch import BUCKETS_MIN, CHUNK, GROUP_MAX, lanes

        n = flat.size
        nb = self._nblocks(n)
        if nb == 0:
            return
        floor = np.float32(0.0 if absmax is None else absmax)
        maxima = k.section(body, 0, nb, np.float32, writable=True)
        codes = body[4 * nb:]
        row = self.block or n
        vec = np.int32(k.address(flat) % 16 == 0 and k.address(codes) % 4 == 0)
        kernel = f"scaled8_{self.name}_encode_"
        table = (k.table("dynamic8 bins", _bin_table),) if self.name == "dynamic8" else ()
        if row <= GROUP_MAX:
            group = lanes(row, 8)
            k(kernel + "groups", k.grid(nb, 256 // int(group)), flat, np.int64(n), np.int64(row), np.int64(nb),
              group, floor, maxima, codes, vec, *table)
        elif nb >= BUCKETS_MIN:
            k(kernel + "buckets", k.grid(nb, 1), flat, np.int64(n), np.int64(row), np.int64(nb), floor, maxima, codes,
              vec, *table)
        else:  # few long buckets (block 0: one): chunks of each, their maxima first
            per_bucket = -(-min(row, n) // CHUNK)  # a block past the end is n long
            scratch = k.zeros(nb, np.uint32)
            args = (np.int64(n), np.int64(row), np.int64(CHUNK), np.int64(per_bucket), np.int64(nb * per_bucket))
            blocks = k.grid(nb * per_bucket, 1)
            k("scaled8_chunk_max", blocks, flat, *args, vec, scratch)
            k(kernel + "chunks", blocks, flat, *args, scratch, floor, maxima, codes, vec, *table)

    def _decode_cuda(self, k, body, shape, out, add):
        n = out.size
        nb = self._nblocks(n)
        if n == 0:
            return
        codes = body[4 * nb:]
        if self.invalid_code is not None:  # checked before anything is written
            status = k.zeros(1, np.int32)
            k("scaled8_has_code", k.grid(n, 1024), codes, np.int64(n), np.int32(self.invalid_code), status)
            if int(status[0]):
                raise wire.PayloadError(f"{self.name}: code {self.invalid_code} in payload, "
                                        "which its encoder never emits")
        vec = np.int32(k.address(codes) % 4 == 0 and k.address(out) % 16 == 0)
        k("scaled8_decode", k.grid(n, 1024), codes, k.section(body, 0, nb, np.float32), k.table((self.name, "values"), self._decode_values),
          np.int64(n), np.int64(self.block or n), np.int32(add), vec, out)

    def _decode_values(self) -> np.ndarray:
        """float32[256]: what the Numba decode multiplies a code's block maximum by."""
        return self._code_values

    @functools.cached_property
    def _code_values(self) -> np.ndarray:
        """The float32 value of each code before scaling, as the reference's _dequantize gives it."""
        return self._dequantize(torch.arange(256, dtype=torch.uint8)).numpy()


def _bin_table() -> np.ndarray:
    """dynamic8's bin table (kernels.scaled8._bin_table of its bins), what its CUDA encode reads."""
    bin_table = kernel_module("scaled8")._bin_table
    return bin_table(*_bin_codes())


@functools.cache
def _bin_codes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin of dynamic_tree: its bound, and the codes below and at/above it (the kernel's tables)."""
    t = dynamic_tree.tables("cpu")
    below = t.code_of_position[t.bin_position.long()]
    above = t.code_of_position[(t.bin_position.long() + 1).clamp(max=127)]
    return t.bin_bound.numpy(), below.numpy(), above.numpy()


class Dynamic8(_AbsmaxScaled):
    """Dettmers' 8-bit dynamic tree type (see ``dynamic_tree``)."""
    name = "dynamic8"
    wire_id = 4
    examples = ({}, {"block": 1}, {"block": 7}, {"block": 64}, {"scope": "tensor"})

    def _quantize(self, blocks, m):
        table = dynamic_tree.tables(blocks.device)
        # Divide, not multiply by 1 / max: that reciprocal overflows for tiny maxima.
        scaled = torch.nan_to_num_(torch.where(m > 0, blocks.abs() / m, 0.0), nan=0.0).clamp_(max=1.0)
        pos = dynamic_tree.position(table, scaled)
        return table.code_of_position[pos] | ((blocks < 0).to(torch.uint8) << 7)

    def _dequantize(self, codes):
        return dynamic_tree.tables(codes.device).value_of_code[codes.long()]

    def _numba_encode(self, flat, maxima, codes, floor):
        kernels = kernel_module("scaled8")

        kernels.dynamic8_encode(flat, self.block, maxima, codes, floor, *_bin_codes())


class Linear8(_AbsmaxScaled):
    """255 uniform levels over [-max, max]: code = rint(x / max * 127) + 127."""
    name = "linear8"
    invalid_code = 255  # codes are 0..254
    wire_id = 5
    examples = ({}, {"block": 4}, {"block": 5}, {"block": 256}, {"scope": "tensor"})

    def _quantize(self, blocks, m):
        q = torch.nan_to_num_(torch.round(torch.where(m > 0, blocks / m * 127.0, 0.0)), nan=0.0).clamp_(-127, 127)
        return (q + 127).to(torch.uint8)

    def _dequantize(self, codes):
        return (codes.to(torch.float32) - 127.0) * (1.0 / 127.0)

    def _numba_encode(self, flat, maxima, codes, floor):
        kernels = kernel_module("scaled8")

        kernels.linear8_encode(flat, self.block, maxima, codes, floor)

    def _decode_values(self):
        # kernels.scaled8.linear8_decode's computed table, (code - 127) * f32(1 / 127) in float32
        return (np.arange(256, dtype=np.float32) - np.float32(127.0)) * np.float32(1.0 / 127.0)
