"""Sign methods: one bit per entry and one float32 scale per tensor.

- ``signsgd``: signSGD with majority vote (Bernstein, Zhao, Azizzadenesheli, Anandkumar,
  "signSGD with Majority Vote is Communication Efficient and Fault Tolerant", ICLR 2019;
  GRACE's ``grace_dl/torch/compressor/signsgd.py``). Each worker sends ``sign(g)``; the server
  sends back ``sign(sum of the signs)``. Over ``sra`` (the default algorithm) that is exactly
  what happens: the owner of a chunk decodes the N sign payloads, averages them (the sign of a
  mean is the sign of the sum) and re-encodes the average with this codec, i.e. sends its sign:
  the majority vote. Over ``allgather`` every rank averages the N decoded signs instead (the
  mean of the signs, not their vote): the collectives have no server step there.
  The scale is the paper's, 1 (the learning rate carries the magnitude), except that a tensor
  with no nonzero entry sends 0 (one bit cannot say sign(0) = 0, and an all-zero gradient, e.g.
  a frozen or unused parameter, must stay zero), a tensor holding a NaN sends NaN and one
  holding an Inf (but no NaN) sends Inf, as every other codec's non-finite block decodes
  non-finite: the scale is ``max |sign(x_i)|`` with ``sign(+-inf) = inf``.
- ``efsignsgd``: EF-signSGD (Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD
  and other Gradient Compression Schemes", ICML 2019; epfml/error-feedback-SGD's
  ``scaled_sign``): ``(||p||_1 / d) * sign(p)``, with error feedback.
- ``scaledsign``: 1-bit Adam's compression (Tang et al., "1-bit Adam: Communication Efficient
  Large-Scale Training with Adam's Convergence Speed", ICML 2021; DeepSpeed's
  ``runtime/comm/nccl.py`` ``compressed_allreduce``: ``torch.norm(x) / np.sqrt(x.numel())``
  times the signs, error feedback on the worker and on the server, as ``sra`` does):
  ``(||x||_2 / sqrt(d)) * sign(x)``.

The bit of an entry is 1 for ``x >= 0`` (GRACE's ``tensor >= 0``, DeepSpeed's
``sign().add_(1).bool()``): 0 and -0 decode to ``+scale``, where the papers' ``sign(0) = 0``
would need a third symbol; a NaN entry gets bit 0 and its tensor's scale is NaN (signsgd's
scale is Inf for an Inf entry, the others' norms are Inf by themselves). The l1 and
l2 norms are pairwise tree sums in float64 (compressors/core/pairwise.py), divided by ``d`` or
``sqrt(d)`` in float64, then rounded to float32 once, so every implementation sends the same
scale and huge entries never overflow it. An empty tensor's scale is 0.

Body: the float32 scale, then ``ceil(n / 8)`` bytes of bits, little-endian (``4 + ceil(n / 8)``).
"""
from __future__ import annotations

import math
from abc import abstractmethod

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import wire
from ..core.base import Compressor, kernel_module, numel
from ..core.pairwise import pairwise_sum

# What sets the scale, as the kernels number it.
SIGN_MAX, L1_MEAN, L2_RMS = 0, 1, 2


class _ScaledSign(Compressor):
    """One scale per tensor (``_scale``) times the signs; no ``name``, so it does not register."""

    has_numba = True
    cuda_program = "signs"
    scale_kind: int

    def _body_nbytes(self, shape):
        return 4 + bitpack.packed_nbytes(numel(shape), 1)

    @abstractmethod
    def _scale(self, flat: torch.Tensor) -> torch.Tensor:
        """The float32 scale of a non-empty ``flat``, shape (1,)."""

    def _encode_body(self, flat, shape, *, step, rank, stream):
        if flat.numel() == 0:
            scale = torch.zeros(1, dtype=torch.float32, device=flat.device)
        else:
            scale = self._scale(flat)
        return [scale, bitpack.pack_signs(flat >= 0)]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        scale = wire.section(payload, start, 1, torch.float32)
        positive = bitpack.unpack_signs(wire.section(payload, start + 4, bitpack.packed_nbytes(n, 1), torch.uint8), n)
        return torch.where(positive, scale, -scale)

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        kernels = kernel_module("signs")
        f32_section = kernel_module("common").f32_section

        kernels.encode(flat, self.scale_kind, f32_section(body, 0, 1, writable=True), body[4:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        kernels = kernel_module("signs")
        f32_section = kernel_module("common").f32_section

        kernels.decode(f32_section(body, 0, 1), body[4:], out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        # compressors/cuda/signs.cu: the bits and the tree's subtrees of 4096 leaves in one pass
        # over x, then one block adds the subtrees' sums and writes the scale.
        n = flat.size
        spans = -(-n // _CUDA_SPAN)
        partials = k.empty(max(spans, 1), np.float64)
        kind = np.int32(self.scale_kind)
        k("signs_bits", k.grid(spans, 1), flat, np.int64(n), kind, np.int32(k.address(flat) % 16 == 0), partials,
          body[4:])
        k("signs_scale", 1, partials, np.int64(spans), np.int64(n), kind,
          k.section(body, 0, 1, np.float32, writable=True))

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        if n == 0:
            return
        k("signs_decode", k.grid(-(-n // 16)), k.section(body, 0, 1, np.float32), body[4:], np.int64(n), np.int32(add),
          np.int32(k.address(out) % 16 == 0), out)


_CUDA_SPAN = 4096  # signs.cu's SG_SPAN: leaves of the tree a block sums


class SignSGD(_ScaledSign):
    name = "signsgd"
    wire_id = 20
    scale_kind = SIGN_MAX

    def _scale(self, flat):
        # 1 if any entry is nonzero, 0 if none, Inf if one is +-Inf, NaN if one is NaN (torch.sign(NaN)
        # is 0, so not written with it).
        nonzero = (flat != 0).any().to(torch.float32)
        finite = torch.where(flat.isinf().any(), torch.inf, nonzero)
        return torch.where(flat.isnan().any(), torch.nan, finite).reshape(1)


class EFSignSGD(_ScaledSign):
    name = "efsignsgd"
    wire_id = 21
    scale_kind = L1_MEAN
    needs_error_feedback = True

    def _scale(self, flat):
        l1 = pairwise_sum(flat.abs().double().view(1, -1))
        return (l1 / flat.numel()).to(torch.float32)


class ScaledSign(_ScaledSign):
    name = "scaledsign"
    wire_id = 22
    scale_kind = L2_RMS
    needs_error_feedback = True

    def _scale(self, flat):
        squares = flat.double().view(1, -1) ** 2
        return (torch.sqrt(pairwise_sum(squares)) / math.sqrt(flat.numel())).to(torch.float32)
