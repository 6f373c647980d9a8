"""Natural compression (Horvath, Ho, Horvath, Sahu, Canini, Richtarik, "Natural Compression for
Distributed Deep Learning", MSML 2022 / arXiv:1905.10988, C_nat; GRACE's
``grace_dl/torch/compressor/natural.py``).

Each entry ``t`` with ``2**a <= |t| < 2**(a+1)`` becomes ``sign(t) * 2**a`` with probability
``(2**(a+1) - |t|) / 2**a`` and ``sign(t) * 2**(a+1)`` otherwise: unbiased, and a power of two
needs only the sign and the 8 exponent bits of a float32 (the paper's 9 bits). With
``m`` the 23 mantissa bits of ``t``, the probability of rounding up is ``m / 2**23``, so the
exponent field ``E`` becomes ``E + (U < 2 m)`` with ``U`` the 24-bit counter-hash draw
(compressors/core/rng.py): integers only, exact on every implementation. The same rule takes a
denormal (``E = 0``) to 0 or ``2**-126`` with the probabilities that keep it unbiased.

Where this departs from the paper, and why: the top binade ``[2**127, 2**128)`` rounds down
to ``2**127`` (``2**128`` is no float32, so a huge finite entry stays finite; biased there
only); a zero's sign is dropped (-0 decodes to +0) so that the code of -0 can carry NaN;
infinities keep their sign.

Body: one exponent byte per entry, then ``ceil(n / 8)`` bytes of sign bits (1: negative),
little-endian: ``n + ceil(n / 8)`` bytes, ``ceil(9 n / 8)``.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import rng, wire
from ..core.base import Compressor, kernel_module, numel

_TOP_FINITE = 254  # the exponent field of 2**127
_NAN = 0x7FC00000


class Natural(Compressor):
    name = "natural"
    wire_id = 26
    has_numba = True
    cuda_program = "natural"

    def _body_nbytes(self, shape):
        n = numel(shape)
        return n + bitpack.packed_nbytes(n, 1)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        n = flat.numel()
        word = flat.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        exponent = (word >> 23) & 0xFF
        mantissa = word & 0x7FFFFF
        draw = (rng.uniform(rng.stream_key(self.seed, step, rank, stream), n, flat.device) * 2.0**24).to(torch.int64)
        up = (draw < 2 * mantissa) & (exponent < 255)
        code = torch.where(exponent < 255, (exponent + up).clamp(max=_TOP_FINITE), exponent)
        nan = flat.isnan()
        negative = ((word >> 31) == 1) & (code != 0) | nan
        code = torch.where(nan, 0, code)
        return [code.to(torch.uint8), bitpack.pack_signs(negative)]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        code = wire.section(payload, start, n, torch.uint8).to(torch.int32)
        negative = bitpack.unpack_signs(wire.section(payload, start + n, bitpack.packed_nbytes(n, 1), torch.uint8), n)
        word = (code << 23) | (negative.to(torch.int32) << 31)
        word = torch.where(negative & (code == 0), _NAN, word)
        return word.view(torch.float32)

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        kernels = kernel_module("natural")

        n = flat.size
        kernels.encode(flat.view(np.uint32), rng.stream_key(self.seed, step, rank, stream), body[:n], body[n:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        kernels = kernel_module("natural")

        n = out.size
        kernels.decode(body[:n], body[n:], out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        # compressors/cuda/natural.cu: eight entries a thread; vector loads/stores where aligned.
        n = flat.size
        if n == 0:
            return
        k("natural_encode", k.grid(-(-n // 8)), flat.view(np.uint32), np.int64(n),
          np.uint32(rng.stream_key(self.seed, step, rank, stream)), body[:n], body[n:],
          np.int32(k.address(flat) % 16 == 0), np.int32(k.address(body) % 8 == 0))

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        if n == 0:
            return
        k("natural_decode", k.grid(-(-n // 8)), body[:n], body[n:], np.int64(n), np.int32(add),
          np.int32(k.address(body) % 8 == 0), np.int32(k.address(out) % 16 == 0), out)
