"""QSGD (Alistarh et al. 2017), the quantizer of Grubic et al. (2018).

Buckets of ``bucket`` values share one norm (``max`` or ``l2``).  Each entry
becomes ``bits`` bits, sign included: ``s = 2**(bits-1) - 1`` levels, and the
level of ``r = |x| / norm * s`` is ``floor(r) + (u < r - floor(r))`` with
``u`` from the counter hash of (seed, step, rank, stream, index): unbiased,
``E[decode] = x``.  Code = ``sign << (bits-1) | level``, packed little-endian.
The l2 norm is summed in one fixed order, a pairwise tree over the squares in
float64 (compressors/core/pairwise.py), so that the torch and the Numba
implementations give the same bits.

Body: ``ceil(n / bucket)`` float32 norms, then ``ceil(n * bits / 8)`` bytes.
Cost grows with n, not with ``bucket`` (any bucket in [1, 2**31 - 1]: a bucket
longer than the tensor is the whole tensor).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import chunks, pairwise, rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param

NORMS = ("max", "l2")
_CUDA_TILE = 2048  # compressors/cuda/qsgd.cu's QSGD_TILE: entries a block codes at a time


class QSGD(Compressor):
    name = "qsgd"
    wire_id = 6
    params = (
        Param("bits", 4, int, low=2, high=8, doc="bits per entry, sign included: 2**(bits-1) - 1 levels a side"),
        Param("bucket", 512, int, low=1, high=2**31 - 1, doc="entries that share one norm"),
        Param("norm", "max", str, choices=NORMS, doc="what scales a bucket: its absolute maximum or its l2 norm"),
    )
    examples = ({}, *({"bits": b} for b in (2, 3, 5, 6, 7, 8)), {"bits": 3, "bucket": 7, "norm": "l2"},
                {"bits": 2, "bucket": 5}, {"bits": 8, "norm": "l2"}, {"bucket": 1})
    has_numba = True
    cuda_program = "qsgd"

    @property
    def levels(self) -> int:
        return 2 ** (self.bits - 1) - 1

    def _nbuckets(self, n: int) -> int:
        return -(-n // self.bucket)

    def _header_params(self, shape):
        return (self.bits, self.bucket, NORMS.index(self.norm), 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 4 * self._nbuckets(n) + bitpack.packed_nbytes(n, self.bits)

    def _pieces(self, n: int) -> list[tuple[int, int]]:
        """Element ranges of whole buckets (the last may end in a short one),
        each but the last a multiple of 8 buckets, so its bits start on a byte."""
        nb = self._nbuckets(n)
        return [(a * self.bucket, min(b * self.bucket, n)) for a, b in chunks.spans(nb, self.bucket, multiple=8)]

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        key = rng.stream_key(self.seed, step, rank, stream)
        norms = torch.empty(self._nbuckets(n), dtype=torch.float32, device=flat.device)
        packed = torch.empty(bitpack.packed_nbytes(n, self.bits), dtype=torch.uint8, device=flat.device)
        for a, b in self._pieces(n):
            first = a // self.bucket
            piece_norms, piece_bytes = self._encode_piece(flat[a:b], key, a)
            norms[first:first + piece_norms.numel()] = piece_norms
            at = a * self.bits // 8
            packed[at:at + piece_bytes.numel()] = piece_bytes
        return [norms, packed]

    def _width(self, n: int) -> int:
        """Row length of a piece's bucket matrix: a lone bucket is as long as its entries, so the
        cost follows the tensor, never ``bucket`` (padding is then shorter than the piece)."""
        return self.bucket if n > self.bucket else max(n, 1)

    def _encode_piece(self, x: torch.Tensor, key: int, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.numel()
        nb = self._nbuckets(n)
        width = self._width(n)
        pad = nb * width - n
        buckets = torch.nn.functional.pad(x, (0, pad)).view(nb, width)
        mag = buckets.abs()
        if self.norm == "max":
            norms = mag.amax(dim=1)
        else:
            # float64: squares of large float32 values overflow. The fixed-order sum makes the bits
            # the same on every implementation.
            norms = torch.sqrt(pairwise.pairwise_sum(buckets.double() ** 2)).to(torch.float32)
        s = self.levels
        # Divide (not multiply by s / norm): s / norm overflows for denormal norms.
        r = torch.nan_to_num_(mag / norms[:, None] * s, nan=0.0).clamp_(0, s)
        floor = torch.floor(r)
        u = rng.uniform(key, n, x.device, start=start)
        u = torch.nn.functional.pad(u, (0, pad), value=1.0).view(nb, width)
        level = (floor + (u < r - floor)).clamp_(max=s).to(torch.uint8)
        codes = level | ((buckets < 0).to(torch.uint8) << (self.bits - 1))
        return norms, bitpack.pack(codes.reshape(-1)[:n], self.bits)

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nbuckets(n)
        norms = wire.section(payload, start, nb, torch.float32)
        data = wire.section(payload, start + 4 * nb, bitpack.packed_nbytes(n, self.bits), torch.uint8)
        scales = norms / self.levels
        sign_bit = 1 << (self.bits - 1)
        out = torch.empty(n, dtype=torch.float32, device=payload.device)
        for a, b in self._pieces(n):
            at = a * self.bits // 8
            codes = bitpack.unpack(data[at:at + bitpack.packed_nbytes(b - a, self.bits)], self.bits, b - a)
            level = (codes & (sign_bit - 1)).to(torch.float32)
            value = torch.where(codes >= sign_bit, -level, level)
            first, count, width = a // self.bucket, -(-(b - a) // self.bucket), self._width(b - a)
            pad = count * width - (b - a)
            value = torch.nn.functional.pad(value, (0, pad)).view(count, width)
            out[a:b] = (value * scales[first:first + count, None]).reshape(-1)[:b - a]
        return out

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        kernels = kernel_module("qsgd")
        f32_section = kernel_module("common").f32_section

        nb = self._nbuckets(flat.size)
        kernels.encode(flat, rng.stream_key(self.seed, step, rank, stream), self.bits, self.bucket,
                       self.norm == "l2", f32_section(body, 0, nb, writable=True), body[4 * nb:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        kernels = kernel_module("qsgd")
        f32_section = kernel_module("common").f32_section

        nb = self._nbuckets(out.size)
        kernels.decode(f32_section(body, 0, nb), body[4 * nb:], self.bits, self.bucket, out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        n = flat.size
        if n == 0:
            return
        nb = self._nbuckets(n)
        norms = k.section(body, 0, nb, np.float32, writable=True)
        packed = body[4 * nb:]
        key = np.uint32(rng.stream_key(self.seed, step, rank, stream))
        # A bucket longer than the tensor is the tensor: the same norms, and the path follows n.
        bucket = min(self.bucket, n)
        l2 = np.int32(self.norm == "l2")
        x_al16 = np.int32(k.address(flat) % 16 == 0)
        pk_align = np.int32(k.address(packed) % 4)
        if bucket <= _CUDA_TILE:
            # One pass: a block per tile of whole buckets (norms and codes), then the groups of 8
            # across the tiles' boundaries.
            logq = (bucket - 1).bit_length()
            per_tile = (_CUDA_TILE >> logq) * bucket
            tiles = -(-n // per_tile)
            k("qsgd_encode_tiles", k.grid(tiles, 1), flat, np.int64(n), np.int64(bucket), np.int32(logq),
              np.int32(self.bits), l2, key, norms, packed, pk_align, x_al16)
            k("qsgd_encode_edges", k.grid(tiles), flat, np.int64(n), np.int64(bucket), np.int64(per_tile),
              np.int64(tiles), np.int32(self.bits), key, norms, packed, np.int64(packed.size))
            return
        # Long buckets: aligned subtrees of _CUDA_TILE leaves, summed up to the norms; then the codes.
        per = -(-bucket // _CUDA_TILE)
        partial = k.empty(nb * per, np.float64)
        k("qsgd_partials", k.grid(nb * per, 1), flat, np.int64(n), np.int64(bucket), np.int64(per), l2, x_al16,
          partial)
        while per > 1:
            nxt = -(-per // _CUDA_TILE)
            out = k.empty(nb * nxt, np.float64) if nxt > 1 else partial
            k("qsgd_reduce", k.grid(nb * nxt, 1), partial, np.int64(nb), np.int64(per), l2, np.int32(nxt == 1),
              out, norms)
            partial, per = out, nxt
        k("qsgd_encode_big", k.grid(-(-n // _CUDA_TILE), 1), flat, np.int64(n), np.int64(bucket),
          np.int32(self.bits), key, norms, packed, np.int64(packed.size), pk_align, x_al16)

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        if n == 0:
            return
        nb = self._nbuckets(n)
        norms = k.section(body, 0, nb, np.float32)
        packed = body[4 * nb:]
        k("qsgd_decode", k.grid(-(-n // _CUDA_TILE), 1), norms, packed, np.int64(n), np.int64(min(self.bucket, n)),
          np.int32(self.bits), np.int64(packed.size), out, np.int32(add), np.int32(k.address(out) % 16 == 0))
