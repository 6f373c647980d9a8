"""QSGD (Alistarh et al. 2017), the quantizer of Grubic et al. (2018).

Buckets of ``bucket`` values share one norm (``max`` or ``l2``).  Each entry
becomes ``bits`` bits, sign included: ``s = 2**(bits-1) - 1`` levels, and the
level of ``r = |x| / norm * s`` is ``floor(r) + (u < r - floor(r))`` with
``u`` from the counter hash of (seed, step, rank, stream, index): unbiased,
``E[decode] = x``.  Code = ``sign << (bits-1) | level``, packed little-endian.

Body: ``ceil(n / bucket)`` float32 norms, then ``ceil(n * bits / 8)`` bytes.
"""
from __future__ import annotations

import torch

from . import bits as bitpack
from . import rng, wire
from .base import Compressor, numel
from .params import Param

NORMS = ("max", "l2")


class QSGD(Compressor):
    name = "qsgd"
    params = (
        Param("bits", 4, int, low=2, high=8),
        Param("bucket", 512, int, low=1, high=2**31 - 1),
        Param("norm", "max", str, choices=NORMS),
    )

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

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        nb = self._nbuckets(n)
        pad = nb * self.bucket - n
        buckets = torch.nn.functional.pad(flat, (0, pad)).view(nb, self.bucket)
        mag = buckets.abs()
        if self.norm == "max":
            norms = mag.amax(dim=1) if n else mag.new_zeros(0)
        else:
            # float64: squares of large float32 values overflow.
            norms = torch.linalg.vector_norm(buckets, dim=1, dtype=torch.float64).to(torch.float32)
        s = self.levels
        # Divide (not multiply by s / norm): s / norm overflows for denormal norms.
        r = torch.nan_to_num_(mag / norms[:, None] * s, nan=0.0).clamp_(0, s)
        floor = torch.floor(r)
        u = rng.uniform(rng.stream_key(self.seed, step, rank, stream), n, flat.device)
        u = torch.nn.functional.pad(u, (0, pad), value=1.0).view(nb, self.bucket)
        level = (floor + (u < r - floor)).clamp_(max=s).to(torch.uint8)
        codes = level | ((buckets < 0).to(torch.uint8) << (self.bits - 1))
        return [norms, bitpack.pack(codes.reshape(-1)[:n], self.bits)]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        nb = self._nbuckets(n)
        norms = wire.section(payload, start, nb, torch.float32)
        data = wire.section(payload, start + 4 * nb, bitpack.packed_nbytes(n, self.bits), torch.uint8)
        codes = bitpack.unpack(data, self.bits, n)
        sign_bit = 1 << (self.bits - 1)
        level = (codes & (sign_bit - 1)).to(torch.float32)
        value = torch.where(codes >= sign_bit, -level, level)
        pad = nb * self.bucket - n
        value = torch.nn.functional.pad(value, (0, pad)).view(nb, self.bucket)
        return (value * (norms / self.levels)[:, None]).reshape(-1)[:n]
