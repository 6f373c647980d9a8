"""1-bit SGD (Seide et al. 2014, as in CNTK).

Per group the two reconstruction values are the mean of the entries >= 0
and the mean of the entries < 0 (0 for an empty side); each entry sends one
bit (1: >= 0). The sums behind the means are float64 in a fixed order
(``pairwise``), so every implementation sends the same bits.
Error feedback is part of the method: use it through ``ErrorFeedback``.
A NaN entry falls on the negative side and makes that group's mean NaN.

``grouping`` says what a group is (``group_shape``). CNTK (and LBANN's later
quantizer.cpp) keep a layer's weight as (out x in), column-major, and group per
column: per input unit; LBANN's first lbann_quantizer.cpp transposed to
quantize per output unit (our ``row``). Torch's weight is (out, in), so
``column`` groups the columns of the
2-D view of ``wire.matrix_shape`` (for a conv weight, of (out, in*kh*kw)),
as the papers do; ``row`` groups its rows (per output unit). 0-D and 1-D
tensors are one group either way. A column is not contiguous: the bits
follow the groups, not the input's order (the reference encodes the
transposed copy, whose rows are the groups; the Numba kernel reads the
columns in place where each group's bits start on a byte).

Body: ``groups`` float32 positive means, ``groups`` float32 negative means,
then ``ceil(n / 8)`` bytes of bits (little-endian, group after group).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import bits as bitpack
from ..core import chunks, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.pairwise import pairwise_sum
from ..core.params import Param

GROUPINGS = ("column", "row")
# Column is the papers' grouping (on MNIST MLP gradients it changes 1-bit error by up to a third per
# layer, either way: benchmarks/grouping_error.py). sra splits such tensors by columns (``split_axis``), so each group stays whole.
GROUPING = Param("grouping", "column", str, choices=GROUPINGS,
                 doc="what shares the reconstruction values: a column of the (out, in) view (per input unit, "
                     "as in CNTK/LBANN) or a row (per output unit)")
# Header code of each grouping: 0 is row, the only layout before the parameter existed.
GROUPING_CODES = {"row": 0, "column": 1}
_CUDA_TILE = 2048  # compressors/cuda/onebit.cu's ONEBIT_TILE: entries a block encodes at a time


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
    transpose = kernel_module("common").transpose

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
    cuda_program = "onebit"

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
        kernels = kernel_module("onebit")
        f32_section = kernel_module("common").f32_section

        rows, cols = group_shape(shape, self.grouping)
        means = (f32_section(body, 0, rows, writable=True), f32_section(body, 4 * rows, rows, writable=True))
        if transposes(shape, self.grouping) and cols % 8 == 0:
            # Each group's bits start on a byte: read the columns in place, no transposed copy.
            kernels.encode_columns(flat, cols, rows, *means, body[8 * rows:])
        else:
            kernels.encode(to_groups_numpy(flat, shape, self.grouping), rows, cols, *means, body[8 * rows:])

    def _decode_numba(self, body, shape, out, add):
        kernels = kernel_module("onebit")
        f32_section = kernel_module("common").f32_section

        rows, cols = group_shape(shape, self.grouping)
        means = (f32_section(body, 0, rows), f32_section(body, 4 * rows, rows))
        if transposes(shape, self.grouping):
            kernels.decode_columns(body[8 * rows:], rows, cols, *means, out, add)
        else:
            kernels.decode(body[8 * rows:], rows, cols, *means, out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        rows, cols = group_shape(shape, self.grouping)
        n = rows * cols
        if n == 0:
            return
        mean_pos = k.section(body, 0, rows, np.float32, writable=True)
        mean_neg = k.section(body, 4 * rows, rows, np.float32, writable=True)
        packed = body[8 * rows:]
        m = flat
        if transposes(shape, self.grouping):
            # The groups' matrix as a copy (as the Numba path), then rows as for a row grouping.
            m = k.empty(n, np.float32)
            k("onebit_transpose", k.grid(-(-cols // 32) * -(-rows // 32), 1), flat, np.int64(cols), np.int64(rows), m)
        x_al16 = np.int32(k.address(m) % 16 == 0)
        if cols <= _CUDA_TILE:
            # One pass: a block per tile of whole rows, then the bytes across the tiles' boundaries.
            logq = (cols - 1).bit_length()
            per_tile = (_CUDA_TILE >> logq) * cols
            tiles = -(-rows // (_CUDA_TILE >> logq))
            k("onebit_encode_tiles", k.grid(tiles, 1), m, np.int64(rows), np.int64(cols), np.int32(logq),
              mean_pos, mean_neg, packed, np.int32(k.address(packed) % 4), x_al16)
            k("onebit_encode_edges", k.grid(tiles), m, np.int64(n), np.int64(cols), np.int64(per_tile),
              np.int64(tiles), np.int32(0), packed)
            return
        # Long rows: aligned subtrees of _CUDA_TILE leaves (and the bytes inside them), summed up.
        per = -(-cols // _CUDA_TILE)
        sums = [k.empty(rows * per, np.float64) for _ in range(3)]
        k("onebit_partials", k.grid(rows * per, 1), m, np.int64(rows), np.int64(cols), np.int64(per), x_al16,
          *sums, packed)
        k("onebit_encode_edges", k.grid(rows * per), m, np.int64(n), np.int64(cols), np.int64(per),
          np.int64(rows * per), np.int32(1), packed)
        while True:
            nxt = -(-per // _CUDA_TILE)
            last = nxt == 1
            out = sums if last else [k.empty(rows * nxt, np.float64) for _ in range(3)]
            logq = min((per - 1).bit_length(), _CUDA_TILE.bit_length() - 1)
            k("onebit_reduce", k.grid(rows * nxt, 1), *sums, np.int64(rows), np.int64(per), np.int32(logq),
              np.int64(cols), np.int32(last), *out, mean_pos, mean_neg)
            if last:
                return
            sums, per = out, nxt

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        rows, cols = group_shape(shape, self.grouping)
        n = rows * cols
        if n == 0:
            return
        mean_pos = k.section(body, 0, rows, np.float32)
        mean_neg = k.section(body, 4 * rows, rows, np.float32)
        packed = body[8 * rows:]
        if transposes(shape, self.grouping):
            # Straight into the input's order: (cols / 8 bands of rows) x (rows / 256 spans of columns).
            k("onebit_decode_columns", k.grid(-(-cols // 8) * -(-rows // 256), 1), packed, np.int64(packed.size),
              np.int64(rows), np.int64(cols), mean_pos, mean_neg, out, np.int32(add))
        else:
            k("onebit_decode_rows", k.grid(-(-n // 8)), packed, np.int64(n), np.int64(cols), mean_pos, mean_neg,
              out, np.int32(add), np.int32(k.address(out) % 16 == 0))
