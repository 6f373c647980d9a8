"""The asymmetric max-min quantizer of CGX (Markov, Ramezanikebrya, Alistarh, "CGX: Adaptive
System Support for Communication-Efficient Deep Learning", Middleware 2022; IST-DASLab/torch_cgx,
``src/common/compression/cuda_compression_operations.cu``: ``find_meta_parallel``,
``MaxMinEncodeValue``, ``MaxMinDecodeValue``).

Buckets of ``bucket`` entries; in each, ``unit = (max - min) / (2**bits - 1)`` and an entry
becomes the level ``floor((x - min) / unit + u)``, ``u`` uniform in [0, 1): stochastic
rounding to one of the two neighbouring of the ``2**bits`` levels ``min + unit * level``,
unbiased. ``u`` comes from the counter hash of (seed, step, rank, stream, index)
(compressors/core/rng.py) instead of CGX's per-thread xorshift, so payloads are reproducible.

Where this differs from torch_cgx, and why: the bucket's float32 min and max are sent
(CGX sends unit and min), and unit, the levels and the decoded values are computed from
them in float64 and rounded once, so that a bucket spanning more than float32's range
(-3e38 .. 3e38) stays finite and every implementation gets the same bits; a bucket whose
unit is 0 (constant) sends level 0 and decodes to its min exactly, where CGX also does so
for a unit below its EPS. A NaN or an infinity in a bucket makes that bucket decode to NaN.

Body: ``ceil(n / bucket)`` float32 minima, as many maxima, then ``ceil(n * bits / 8)`` bytes
of codes, little-endian (``8 ceil(n / bucket) + ceil(n bits / 8)``).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import chunks, rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param


class MaxMin(Compressor):
    name = "maxmin"
    wire_id = 25
    params = (
        Param("bits", 4, int, low=1, high=8, doc="bits per entry: 2**bits levels from the bucket's min to its max"),
        Param("bucket", 1024, int, low=1, high=2**31 - 1, doc="entries that share one min and max"),
    )
    examples = ({}, *({"bits": b} for b in (1, 2, 3, 5, 8)), {"bits": 3, "bucket": 7}, {"bits": 2, "bucket": 5},
                {"bucket": 1}, {"bits": 8, "bucket": 100})
    has_numba = True
    cuda_program = "maxmin"

    @property
    def levels(self) -> int:
        return 2 ** self.bits - 1

    def _nbuckets(self, n: int) -> int:
        return -(-n // self.bucket)

    def _header_params(self, shape):
        return (self.bits, self.bucket, 0, 0.0)

    def _body_nbytes(self, shape):
        n = numel(shape)
        return 8 * self._nbuckets(n) + bitpack.packed_nbytes(n, self.bits)

    def _pieces(self, n: int) -> list[tuple[int, int]]:
        """Element ranges of whole buckets, each but the last a multiple of 8 buckets (its codes
        start on a byte)."""
        nb = self._nbuckets(n)
        return [(a * self.bucket, min(b * self.bucket, n)) for a, b in chunks.spans(nb, self.bucket, multiple=8)]

    def _buckets(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as a (buckets, width) matrix; the last bucket is padded with its own last entry,
        which changes neither its min nor its max."""
        n = x.numel()
        nb = self._nbuckets(n)
        width = min(n, self.bucket)
        pad = nb * width - n
        return torch.cat([x, x[-1:].expand(pad)]).view(nb, width)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        key = rng.stream_key(self.seed, step, rank, stream)
        nb = self._nbuckets(n)
        mins = torch.empty(nb, dtype=torch.float32, device=flat.device)
        maxs = torch.empty(nb, dtype=torch.float32, device=flat.device)
        packed = torch.empty(bitpack.packed_nbytes(n, self.bits), dtype=torch.uint8, device=flat.device)
        for a, b in self._pieces(n):
            first = a // self.bucket
            buckets = self._buckets(flat[a:b])
            # + 0.0: -0.0 becomes +0.0, so a bucket of signed zeros sends the same bits whichever
            # zero the reduction happened to return.
            lo, hi = buckets.amin(dim=1) + 0.0, buckets.amax(dim=1) + 0.0
            mins[first:first + lo.numel()] = lo
            maxs[first:first + hi.numel()] = hi
            unit = (hi.double() - lo.double()) / self.levels
            u = rng.uniform(key, b - a, flat.device, start=a).double()
            u = torch.cat([u, u.new_zeros(buckets.numel() - (b - a))]).view_as(buckets)
            d = torch.floor((buckets.double() - lo.double()[:, None]) / unit[:, None] + u)
            level = torch.where(unit[:, None] > 0, torch.nan_to_num(d, nan=0.0), 0.0).clamp_(0, self.levels)
            piece = bitpack.pack(level.to(torch.uint8).reshape(-1)[:b - a], self.bits)
            at = a * self.bits // 8
            packed[at:at + piece.numel()] = piece
        return [mins, maxs, packed]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nbuckets(n)
        mins = wire.section(payload, start, nb, torch.float32).double()
        maxs = wire.section(payload, start + 4 * nb, nb, torch.float32).double()
        data = wire.section(payload, start + 8 * nb, bitpack.packed_nbytes(n, self.bits), torch.uint8)
        unit = (maxs - mins) / self.levels
        out = torch.empty(n, dtype=torch.float32, device=payload.device)
        for a, b in self._pieces(n):
            at = a * self.bits // 8
            level = bitpack.unpack(data[at:at + bitpack.packed_nbytes(b - a, self.bits)], self.bits, b - a)
            bucket_of = torch.arange(a, b, device=payload.device) // self.bucket
            out[a:b] = (mins[bucket_of] + unit[bucket_of] * level.double()).to(torch.float32)
        return out

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        kernels = kernel_module("maxmin")
        f32_section = kernel_module("common").f32_section

        nb = self._nbuckets(flat.size)
        kernels.encode(flat, rng.stream_key(self.seed, step, rank, stream), self.bits, self.bucket,
                       f32_section(body, 0, nb, writable=True), f32_section(body, 4 * nb, nb, writable=True),
                       body[8 * nb:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        kernels = kernel_module("maxmin")
        f32_section = kernel_module("common").f32_section

        nb = self._nbuckets(out.size)
        kernels.decode(f32_section(body, 0, nb), f32_section(body, 4 * nb, nb), body[8 * nb:], self.bits,
                       self.bucket, out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        # compressors/cuda/maxmin.cu; the bucket picks its kernels (see there).
        from ..cuda.launch import BUCKETS_MIN, CHUNK, GROUP_MAX, lanes

        n = flat.size
        nb = self._nbuckets(n)
        if nb == 0:
            return
        key = np.uint32(rng.stream_key(self.seed, step, rank, stream))
        mins = k.section(body, 0, nb, np.float32, writable=True)
        maxs = k.section(body, 4 * nb, nb, np.float32, writable=True)
        packed = body[8 * nb:]
        nbytes = np.int64(packed.size)
        vec = np.int32(k.address(flat) % 16 == 0)
        aligned = np.int32(k.address(packed) % 8 == 0)
        bits, bucket = np.int32(self.bits), np.int64(self.bucket)
        if self.bucket % 8 == 0 and (self.bucket <= GROUP_MAX or nb >= BUCKETS_MIN):  # fused: one read
            if self.bucket <= GROUP_MAX:
                group = lanes(self.bucket, 32)
                k("maxmin_fused_groups", k.grid(nb, 256 // int(group)), flat, np.int64(n), key, bits, bucket,
                  np.int64(nb), group, mins, maxs, packed, nbytes, vec, aligned)
            else:
                k("maxmin_fused_buckets", k.grid(nb, 1), flat, np.int64(n), key, bits, bucket, np.int64(nb),
                  mins, maxs, packed, nbytes, vec, aligned)
            return
        if self.bucket <= GROUP_MAX:
            group = lanes(self.bucket, 8)
            k("maxmin_range_groups", k.grid(nb, 256 // int(group)), flat, np.int64(n), bucket, np.int64(nb), group,
              mins, maxs)
        elif nb >= BUCKETS_MIN:
            k("maxmin_range_buckets", k.grid(nb, 1), flat, np.int64(n), bucket, np.int64(nb), mins, maxs)
        else:  # few long buckets: chunks of them, combined by atomics into scratch
            per_bucket = -(-min(self.bucket, n) // CHUNK)  # a bucket past the end is n long
            scratch = k.zeros(3 * nb, np.uint32)
            k("maxmin_range_chunks", k.grid(nb * per_bucket, 1), flat, np.int64(n), bucket, np.int64(CHUNK),
              np.int64(per_bucket), np.int64(nb * per_bucket), vec, scratch)
            k("maxmin_range_finish", k.grid(nb), scratch, np.int64(nb), mins, maxs)
        k("maxmin_pack", k.grid(-(-n // 8)), flat, np.int64(n), key, bits, bucket, mins, maxs, packed, nbytes,
          vec, aligned)

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        nb = self._nbuckets(n)
        if nb == 0:
            return
        packed = body[8 * nb:]
        k("maxmin_decode", k.grid(-(-n // 8)), k.section(body, 0, nb, np.float32),
          k.section(body, 4 * nb, nb, np.float32), packed, np.int64(n), np.int32(self.bits), np.int64(self.bucket),
          np.int64(packed.size), np.int32(add), np.int32(k.address(out) % 16 == 0), out)

