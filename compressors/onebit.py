"""1-bit SGD (Seide et al. 2014, as in CNTK).

Per group the two reconstruction values are the mean of the entries >= 0
and the mean of the entries < 0 (0 for an empty side); each entry sends one
bit (1: >= 0). The sums behind the means are float64 in a fixed order
(``pairwise``), so every implementation sends the same bits.
Error feedback is part of the method: use it through ``ErrorFeedback``.
A NaN entry falls on the negative side and makes that group's mean NaN.

``grouping`` says what a group is (``group_shape``). CNTK and LBANN keep a
layer's weight as (out x in), column-major, and group per column: per input
unit. Torch's weight is (out, in), so ``column`` groups the columns of the
2-D view of ``wire.matrix_shape`` (for a conv weight, of (out, in*kh*kw)),
as the papers do; ``row`` groups its rows (per output unit). 0-D and 1-D
tensors are one group either way. A column is not contiguous: both
implementations encode the transposed copy, whose rows are the groups, so
the bits follow the groups, not the input's order.

Body: ``groups`` float32 positive means, ``groups`` float32 negative means,
then ``ceil(n / 8)`` bytes of bits (little-endian, group after group).
"""
from __future__ import annotations

import numpy as np
import torch

from . import bits as bitpack
from . import chunks, wire
from .base import Compressor, numel
from .pairwise import pairwise_sum
from .params import Param

GROUPINGS = ("column", "row")
# Column is the papers' grouping (issue 14: on MNIST MLP gradients it changes 1-bit error by up to a third
# per layer, either way). sra splits such tensors by columns (``split_axis``), so each group stays whole.
GROUPING = Param("grouping", "column", str, choices=GROUPINGS,
                 doc="what shares the reconstruction values: a column of the (out, in) view (per input unit, "
                     "as in CNTK/LBANN) or a row (per output unit)")
# Header code of each grouping: 0 is row, the only layout before the parameter existed.
GROUPING_CODES = {"row": 0, "column": 1}


def group_shape(shape: tuple[int, ...], grouping: str) -> tuple[int, int]:
    """``(groups, length)``: the groups as the rows of a matrix (the transpose of the 2-D view
    for ``column``, see the module docstring); 0-D and 1-D tensors are one group."""
    rows, cols = wire.matrix_shape(shape)
    if grouping == "row" or len(shape) < 2:
        return rows, cols
    return cols, rows


def transposes(shape: tuple[int, ...], grouping: str) -> bool:
    """Whether the groups' matrix is the transpose of the 2-D view (not just a view of it)."""
    rows, cols = wire.matrix_shape(shape)
    return grouping == "column" and len(shape) >= 2 and rows > 1 and cols > 1


def to_groups(flat: torch.Tensor, shape: tuple[int, ...], grouping: str) -> torch.Tensor:
    """The flat input as the contiguous ``(groups, length)`` matrix."""
    groups, length = group_shape(shape, grouping)
    if transposes(shape, grouping):
        return flat.view(length, groups).t().contiguous()
    return flat.view(groups, length)


def from_groups(m: torch.Tensor, shape: tuple[int, ...], grouping: str) -> torch.Tensor:
    """The flat values, in the input's order, of a ``(groups, length)`` matrix."""
    if transposes(shape, grouping):
        return m.t().reshape(-1)
    return m.reshape(-1)


def to_groups_numpy(flat: np.ndarray, shape: tuple[int, ...], grouping: str) -> np.ndarray:
    """``to_groups`` for the kernels: the flat, C-contiguous float32 group-major copy (or ``flat``)."""
    if not transposes(shape, grouping):
        return flat
    from .kernels.common import transpose

    groups, length = group_shape(shape, grouping)
    out = np.empty(flat.size, np.float32)
    transpose(flat, length, groups, out)
    return out


class OneBit(Compressor):
    name = "onebit"
    wire_id = 7
    params = (GROUPING,)
    examples = ({}, {"grouping": "row"})
    needs_error_feedback = True
    has_numba = True

    @property
    def split_axis(self) -> int:
        return 1 if self.grouping == "column" else 0

    def _header_params(self, shape):
        return (GROUPING_CODES[self.grouping], 0, 0, 0.0)

    def _body_nbytes(self, shape):
        groups, _ = group_shape(shape, self.grouping)
        return 8 * groups + bitpack.packed_nbytes(numel(shape), 1)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        rows, cols = group_shape(shape, self.grouping)
        m = to_groups(flat, shape, self.grouping)
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
        rows, cols = group_shape(shape, self.grouping)
        mean_pos = wire.section(payload, start, rows, torch.float32)
        mean_neg = wire.section(payload, start + 4 * rows, rows, torch.float32)
        data = wire.section(payload, start + 8 * rows, bitpack.packed_nbytes(rows * cols, 1), torch.uint8)
        out = torch.empty(rows, cols, dtype=torch.float32, device=payload.device)
        for a, b in chunks.spans(rows, cols, multiple=8):
            at = a * cols // 8
            positive = bitpack.unpack_signs(data[at:at + bitpack.packed_nbytes((b - a) * cols, 1)], (b - a) * cols)
            out[a:b] = torch.where(positive.view(b - a, cols), mean_pos[a:b, None], mean_neg[a:b, None])
        return from_groups(out, shape, self.grouping)

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        from .kernels import onebit as kernels
        from .kernels.common import f32_section

        rows, cols = group_shape(shape, self.grouping)
        kernels.encode(to_groups_numpy(flat, shape, self.grouping), rows, cols,
                       f32_section(body, 0, rows, writable=True), f32_section(body, 4 * rows, rows, writable=True),
                       body[8 * rows:])

    def _decode_numba(self, body, shape, out, add):
        from .kernels import onebit as kernels
        from .kernels.common import f32_section

        rows, cols = group_shape(shape, self.grouping)
        means = (f32_section(body, 0, rows), f32_section(body, 4 * rows, rows))
        if transposes(shape, self.grouping):
            kernels.decode_columns(body[8 * rows:], rows, cols, *means, out, add)
        else:
            kernels.decode(body[8 * rows:], rows, cols, *means, out, add)
