"""1-bit SGD (Seide et al. 2014, as in CNTK).

Per column (a row of the 2-D view, see ``wire.matrix_shape``) the two
reconstruction values are the mean of the entries >= 0 and the mean of the
entries < 0 (0 for an empty side); each entry sends one bit (1: >= 0). The
sums behind the means are float64 in a fixed order (``pairwise``), so every
implementation sends the same bits.
Error feedback is part of the method: use it through ``ErrorFeedback``.
A NaN entry falls on the negative side and makes that column's mean NaN.

Body: ``rows`` float32 positive means, ``rows`` float32 negative means, then
``ceil(n / 8)`` bytes of bits (little-endian).
"""
from __future__ import annotations

import torch

from . import bits as bitpack
from . import chunks, wire
from .base import Compressor, numel
from .pairwise import pairwise_sum


class OneBit(Compressor):
    name = "onebit"
    wire_id = 7
    needs_error_feedback = True
    has_numba = True

    def _body_nbytes(self, shape):
        rows, _ = wire.matrix_shape(shape)
        return 8 * rows + bitpack.packed_nbytes(numel(shape), 1)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        rows, cols = wire.matrix_shape(shape)
        m = flat.view(rows, cols)
        mean_pos = torch.empty(rows, dtype=torch.float32, device=flat.device)
        mean_neg = torch.empty(rows, dtype=torch.float32, device=flat.device)
        bits = torch.empty(bitpack.packed_nbytes(rows * cols, 1), dtype=torch.uint8, device=flat.device)
        # Pieces of 8 rows at a time, so each piece's bits start on a byte.
        for a, b in chunks.spans(rows, cols, multiple=8):
            mean_pos[a:b], mean_neg[a:b], piece_bits = self._encode_rows(m[a:b])
            bits[a * cols // 8:a * cols // 8 + piece_bits.numel()] = piece_bits
        return [mean_pos, mean_neg, bits]

    def _encode_rows(self, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cols = m.shape[1]
        positive = m >= 0
        n_pos = positive.sum(dim=1)
        # float64 sums (float32 ones overflow for large entries), in the fixed order.
        sum_pos = pairwise_sum(torch.where(positive, m, 0.0).double())
        sum_neg = pairwise_sum(torch.where(positive, 0.0, m).double())
        mean_pos = torch.where(n_pos > 0, sum_pos / n_pos.clamp(min=1), 0.0).to(torch.float32)
        n_neg = cols - n_pos
        mean_neg = torch.where(n_neg > 0, sum_neg / n_neg.clamp(min=1), 0.0).to(torch.float32)
        return mean_pos, mean_neg, bitpack.pack_signs(positive)

    def _decode_body(self, payload, start, shape):
        rows, cols = wire.matrix_shape(shape)
        mean_pos = wire.section(payload, start, rows, torch.float32)
        mean_neg = wire.section(payload, start + 4 * rows, rows, torch.float32)
        data = wire.section(payload, start + 8 * rows, bitpack.packed_nbytes(rows * cols, 1), torch.uint8)
        out = torch.empty(rows, cols, dtype=torch.float32, device=payload.device)
        for a, b in chunks.spans(rows, cols, multiple=8):
            at = a * cols // 8
            positive = bitpack.unpack_signs(data[at:at + bitpack.packed_nbytes((b - a) * cols, 1)], (b - a) * cols)
            out[a:b] = torch.where(positive.view(b - a, cols), mean_pos[a:b, None], mean_neg[a:b, None])
        return out.reshape(-1)

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        from .kernels import onebit as kernels
        from .kernels.common import f32_section

        rows, cols = wire.matrix_shape(shape)
        kernels.encode(flat, rows, cols, f32_section(body, 0, rows, writable=True),
                       f32_section(body, 4 * rows, rows, writable=True), body[8 * rows:])

    def _decode_numba(self, body, shape, out, add):
        from .kernels import onebit as kernels
        from .kernels.common import f32_section

        rows, cols = wire.matrix_shape(shape)
        kernels.decode(body[8 * rows:], rows, cols, f32_section(body, 0, rows), f32_section(body, 4 * rows, rows),
                       out, add)
