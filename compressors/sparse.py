"""Sparse methods: Dryden et al.'s adaptive quantization and top-k.

Both send the ``k = ceil(pi * n)`` entries of largest magnitude, chosen by
exact selection: every entry above the k-th largest magnitude, then ties at
that magnitude by ascending index, so the choice is deterministic.  NaN
counts as the largest magnitude, so a NaN entry is always sent and poisons
what it touches (a NaN mean or value) instead of vanishing.

With Numba, ``decode(out=..., add=True)`` adds at the sent entries only; the
reference adds a dense decode, which turns a ``-0.0`` already in ``out`` at an
unsent entry into ``+0.0``. The sums of the collectives start at ``+0.0``
and an IEEE sum from there is never ``-0.0``, so they agree there.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import wire
from .base import Compressor, numel
from .params import Param

PI = Param("pi", 0.01, float, low=0.0, high=1.0, low_open=True,
           doc="share of the entries sent, those of largest magnitude (k = ceil(pi * n))")
PI_EXAMPLES = ({}, {"pi": 0.1}, {"pi": 0.25}, {"pi": 0.37}, {"pi": 1.0})
# Entries of a column of at most this length pack (index << 1 | sign) in 16 bits.
SHORT_COLUMN = 32767
# What a decode refuses, in the order both implementations check (the kernels return 1 + the
# position here). Indices must ascend strictly, as the encoder emits them: with a repeated one,
# writing and adding the decoded values would disagree.
TOPK_ERRORS = ("topk: index out of range [0, {n})", "topk: indices are not strictly ascending")
ADAPTIVE_ERRORS = ("adaptive: body says {total} entries, the header {k}",
                   "adaptive: column offsets are not ascending within [0, k]",
                   "adaptive: column index out of range [0, {cols})",
                   "adaptive: column indices are not strictly ascending within a column")


def count_sent(pi: float, n: int) -> int:
    """``ceil(pi * n)``, at least 1 for a non-empty tensor.

    Rounded to 9 significant digits first so that ``0.1 * 1000`` is 100, not
    ``ceil(100.00000000000001)``.
    """
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(float(f"{pi * n:.9g}"))))


def select_largest(v: torch.Tensor, k: int) -> torch.Tensor:
    """Ascending flat indices of the ``k`` largest magnitudes of 1-D ``v``."""
    if k == 0:
        return torch.zeros(0, dtype=torch.int64, device=v.device)
    mag = torch.nan_to_num(v.abs(), nan=math.inf)
    threshold = torch.topk(mag, k, sorted=False).values.min()
    chosen = mag > threshold
    ties = mag == threshold
    room = k - chosen.sum()
    chosen |= ties & (torch.cumsum(ties, 0) <= room)
    return chosen.nonzero().view(-1)


class TopK(Compressor):
    """(index, value) pairs.  Body: ``k`` float32 values, ``k`` int32 indices (``8 k`` bytes).

    The indices ascend strictly; a decode refuses a body whose indices do not.
    """
    name = "topk"
    wire_id = 9
    params = (PI,)
    examples = PI_EXAMPLES
    needs_error_feedback = True
    sparse = True
    has_numba = True

    def _header_params(self, shape):
        return (count_sent(self.pi, numel(shape)), 0, 0, self.pi)

    def _body_nbytes(self, shape):
        return 8 * count_sent(self.pi, numel(shape))

    def _encode_body(self, flat, shape, *, step, rank, stream):
        idx = select_largest(flat, count_sent(self.pi, flat.numel()))
        return [flat[idx], idx.to(torch.int32)]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        k = count_sent(self.pi, n)
        values = wire.section(payload, start, k, torch.float32)
        idx = wire.section(payload, start + 4 * k, k, torch.int32).to(torch.int64)
        if k and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise wire.PayloadError(TOPK_ERRORS[0].format(n=n))
        if bool((idx[1:] <= idx[:-1]).any()):
            raise wire.PayloadError(TOPK_ERRORS[1])
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[idx] = values
        return out

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        from .kernels import select as kernels
        from .kernels.common import f32_section

        k = count_sent(self.pi, flat.size)
        kernels.topk_encode(flat.view(np.uint32), f32_section(body, 0, k, writable=True).view(np.uint32),
                            f32_section(body, 4 * k, k, writable=True).view(np.int32))

    def _decode_numba(self, body, shape, out, add):
        from .kernels import select as kernels
        from .kernels.common import f32_section

        k = count_sent(self.pi, out.size)
        status = kernels.topk_decode(f32_section(body, 0, k), f32_section(body, 4 * k, k).view(np.int32), out, add)
        if status:
            raise wire.PayloadError(TOPK_ERRORS[status - 1].format(n=out.size))


class Adaptive(Compressor):
    """Dryden et al. (2016) adaptive quantization.

    Of the ``k`` selected entries, those >= 0 and those < 0 of each column
    decode to their region's mean in that column.  Body: the total ``k``
    (uint32), per column its first entry's offset (int32), positive and
    negative means (float32), then per entry ``column_index << 1 | sign``:
    2 bytes when a column has at most 32767 entries, else 4.
    ``4 + 12 rows + k * (2 or 4)`` bytes.  Within a column the indices
    ascend strictly; a decode refuses a body where they do not.
    """
    name = "adaptive"
    wire_id = 8
    params = (PI,)
    examples = PI_EXAMPLES
    needs_error_feedback = True
    sparse = True
    has_numba = True

    def _entry_bytes(self, shape) -> int:
        return 2 if wire.matrix_shape(shape)[1] <= SHORT_COLUMN else 4

    def _header_params(self, shape):
        return (count_sent(self.pi, numel(shape)), 8 * self._entry_bytes(shape), 0, self.pi)

    def _body_nbytes(self, shape):
        rows, _ = wire.matrix_shape(shape)
        return 4 + 12 * rows + count_sent(self.pi, numel(shape)) * self._entry_bytes(shape)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        rows, cols = wire.matrix_shape(shape)
        k = count_sent(self.pi, flat.numel())
        idx = select_largest(flat, k)
        values = flat[idx]
        row = idx // cols if cols else idx
        negative = values < 0
        region = row * 2 + negative
        # float64 sums: float32 ones overflow for large entries.
        sums = torch.zeros(2 * rows, dtype=torch.float64, device=flat.device).index_add_(0, region, values.double())
        counts = torch.bincount(region, minlength=2 * rows)
        means = torch.where(counts > 0, sums / counts.clamp(min=1), 0.0).to(torch.float32).view(rows, 2).t()
        per_row = counts.view(rows, 2).sum(dim=1)
        offsets = (torch.cumsum(per_row, 0) - per_row).to(torch.int32)
        entries = ((idx - row * cols) << 1 | negative).to(torch.int32)
        if self._entry_bytes(shape) == 2:
            entries = entries.view(torch.uint8).view(-1, 4)[:, :2]
        total = torch.tensor([k], dtype=torch.int32, device=flat.device)
        return [total, offsets, means[0], means[1], entries]

    def _decode_body(self, payload, start, shape):
        rows, cols = wire.matrix_shape(shape)
        n = numel(shape)
        k = count_sent(self.pi, n)
        total = int(wire.section(payload, start, 1, torch.int32)[0])
        if total != k:
            raise wire.PayloadError(ADAPTIVE_ERRORS[0].format(total=total, k=k))
        offsets = wire.section(payload, start + 4, rows, torch.int32).to(torch.int64)
        mean_pos = wire.section(payload, start + 4 + 4 * rows, rows, torch.float32)
        mean_neg = wire.section(payload, start + 4 + 8 * rows, rows, torch.float32)
        at = start + 4 + 12 * rows
        if self._entry_bytes(shape) == 2:
            raw = wire.section(payload, at, 2 * k, torch.uint8).view(-1, 2).to(torch.int64)
            entries = raw[:, 0] | raw[:, 1] << 8
        else:
            entries = wire.section(payload, at, k, torch.int32).to(torch.int64)
        ends = torch.cat([offsets[1:], offsets.new_tensor([k])]) if rows else offsets
        per_row = ends - offsets
        if rows and (int(offsets[0]) != 0 or int(per_row.min()) < 0 or int(offsets[-1]) > k):
            raise wire.PayloadError(ADAPTIVE_ERRORS[1])
        col = entries >> 1
        if k and (int(entries.min()) < 0 or int(col.max()) >= cols):
            raise wire.PayloadError(ADAPTIVE_ERRORS[2].format(cols=cols))
        row = torch.repeat_interleave(torch.arange(rows, device=payload.device), per_row)
        # Rows ascend and indices lie in [0, cols): ascending flat positions are ascending
        # indices within each column.
        position = row * cols + col
        if bool((position[1:] <= position[:-1]).any()):
            raise wire.PayloadError(ADAPTIVE_ERRORS[3])
        negative = (entries & 1).bool()
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[position] = torch.where(negative, mean_neg[row], mean_pos[row])
        return out

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        from .kernels import select as kernels
        from .kernels.common import f32_section

        rows, cols = wire.matrix_shape(shape)
        head = f32_section(body, 0, 1 + 3 * rows, writable=True)
        kernels.adaptive_encode(flat.view(np.uint32), count_sent(self.pi, flat.size), rows, cols, head.view(np.int32),
                                head, body[4 + 12 * rows:], self._entry_bytes(shape) == 4)

    def _decode_numba(self, body, shape, out, add):
        from .kernels import select as kernels
        from .kernels.common import f32_section

        rows, cols = wire.matrix_shape(shape)
        k = count_sent(self.pi, out.size)
        head = f32_section(body, 0, 1 + 3 * rows)
        ints = head.view(np.int32)
        status = kernels.adaptive_decode(ints, head, body[4 + 12 * rows:], k, rows, cols,
                                         self._entry_bytes(shape) == 4, out, add)
        if status:
            raise wire.PayloadError(ADAPTIVE_ERRORS[status - 1].format(total=int(ints[0]), k=k, cols=cols))
