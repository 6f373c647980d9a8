"""Sparse methods: Dryden et al.'s adaptive quantization and top-k.

Both send the ``k = ceil(pi * n)`` entries of largest magnitude, chosen by
exact selection: every entry above the k-th largest magnitude, then ties at
that magnitude by ascending index, so the choice is deterministic.  NaN
counts as the largest magnitude, so a NaN entry is always sent and poisons
what it touches (a NaN mean or value) instead of vanishing.
"""
from __future__ import annotations

import math

import torch

from . import wire
from .base import Compressor, numel
from .params import Param

PI = Param("pi", 0.01, float, low=0.0, high=1.0, low_open=True,
           doc="share of the entries sent, those of largest magnitude (k = ceil(pi * n))")
PI_EXAMPLES = ({}, {"pi": 0.1}, {"pi": 0.25}, {"pi": 0.37}, {"pi": 1.0})
# Entries of a column of at most this length pack (index << 1 | sign) in 16 bits.
SHORT_COLUMN = 32767


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
    """(index, value) pairs.  Body: ``k`` float32 values, ``k`` int32 indices (``8 k`` bytes)."""
    name = "topk"
    wire_id = 9
    params = (PI,)
    examples = PI_EXAMPLES
    needs_error_feedback = True
    sparse = True

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
            raise wire.PayloadError(f"topk: index out of range [0, {n})")
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[idx] = values
        return out


class Adaptive(Compressor):
    """Dryden et al. (2016) adaptive quantization.

    Of the ``k`` selected entries, those >= 0 and those < 0 of each column
    decode to their region's mean in that column.  Body: the total ``k``
    (uint32), per column its first entry's offset (int32), positive and
    negative means (float32), then per entry ``column_index << 1 | sign``:
    2 bytes when a column has at most 32767 entries, else 4.
    ``4 + 12 rows + k * (2 or 4)`` bytes.
    """
    name = "adaptive"
    wire_id = 8
    params = (PI,)
    examples = PI_EXAMPLES
    needs_error_feedback = True
    sparse = True

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
            raise wire.PayloadError(f"adaptive: body says {total} entries, the header {k}")
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
            raise wire.PayloadError("adaptive: column offsets are not ascending within [0, k]")
        col = entries >> 1
        if k and (int(entries.min()) < 0 or int(col.max()) >= cols):
            raise wire.PayloadError(f"adaptive: column index out of range [0, {cols})")
        row = torch.repeat_interleave(torch.arange(rows, device=payload.device), per_row)
        negative = (entries & 1).bool()
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[row * cols + col] = torch.where(negative, mean_neg[row], mean_pos[row])
        return out
