"""Dryden et al.'s adaptive quantization: the ``k = ceil(pi * n)`` entries of largest magnitude,
each decoding to its sign's mean in its group (a column or a row).

Selected exactly as top-k selects (``compressors.codecs.topk``), or, with
``threshold="sampled"``, estimated from samples as LBANN does (see
``Adaptive``). NaN counts as the largest magnitude, so a NaN entry is always
sent and makes its side's mean NaN instead of vanishing.

With Numba, ``decode(out=..., add=True)`` adds at the sent entries only; the
reference adds a dense decode (see ``compressors.codecs.topk``).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.pairwise import pairwise_sum
from ..core.params import Param
from .onebit import GROUPING, GROUPING_CODES, from_groups, group_shape, to_groups, to_groups_numpy, transposes
from .topk import CUDA_TILE, CUDA_WS, PI, PI_EXAMPLES, count_sent, cuda_select, select_largest

THRESHOLDS = ("exact", "sampled")
THRESHOLD = Param("threshold", "exact", str, choices=THRESHOLDS,
                  doc="how adaptive selects: the k largest exactly, or by LBANN's thresholds and means from samples")
# LBANN's sample sizes (NUM_THRESHOLD_SAMPLES, NUM_RECON_SAMPLES) and its cap on the entries sent
# (MAX_QUANTIZED_EXCESS times the target).
THRESHOLD_SAMPLES = 1024
MEAN_SAMPLES = 128
EXCESS = 4
# The smallest positive float32 (a denormal): the lowest sampled threshold.
TINY = 2.0**-149
# Entries of a group of at most this length pack (index << 1 | sign) in 16 bits.
SHORT_COLUMN = 32767
# What a decode refuses, in the order both implementations check (the kernels return 1 + the
# position here). Indices must ascend strictly, as the encoder emits them: with a repeated one,
# writing and adding the decoded values would disagree.
# What a decode refuses (see topk's errors).
ADAPTIVE_ERRORS = ("adaptive: body says {total} entries, the header {k}",
                   "adaptive: column offsets are not ascending within [0, k]",
                   "adaptive: column index out of range [0, {cols})",
                   "adaptive: column indices are not strictly ascending within a column")




class Adaptive(Compressor):
    """Dryden et al. (2016) adaptive quantization.

    Of the entries sent, those >= 0 and those < 0 of each group (a column or a row, see
    ``onebit.group_shape``) decode to their region's mean in that group.

    ``threshold="exact"``: the ``k`` largest magnitudes, selected exactly, and their exact
    means. ``threshold="sampled"`` does what LBANN does: two thresholds, one per sign, from
    ``THRESHOLD_SAMPLES`` positions drawn at random, with replacement (all entries when there
    are no more): of the ``ceil(pi * samples)`` largest sample magnitudes, the smallest positive
    and the smallest negative one (one sign missing: the other's); an entry is sent when its magnitude
    reaches its sign's threshold (and is not 0). Per group, the means are those of the sent
    entries among ``MEAN_SAMPLES`` positions of the group drawn at random (all of a shorter
    group), a side with none decoding to its threshold. At most ``EXCESS * k`` entries go (the
    first ones, group by group): what a bad sample lets through beyond is dropped, to the
    residual. The positions come from the counter hash (``compressors.core.rng``: index ``j`` for
    threshold sample ``j``, ``THRESHOLD_SAMPLES + MEAN_SAMPLES * g + t`` for sample ``t`` of group
    ``g``), position ``(h * bound) >> 24`` for the hash's 24 bits ``h``. The sums behind the
    means are pairwise trees (``compressors.core.pairwise``). A non-finite entry is always sent
    (unless dropped by the cap) and is added to its side's mean, which it makes NaN or Inf.

    Body: the number of entries sent (uint32), per group its first entry's offset (int32),
    positive and negative means (float32), then per entry ``index_in_group << 1 | sign``: 2 bytes
    when a group has at most 32767 entries, else 4. ``4 + 12 groups + capacity * (2 or 4)``
    bytes, the capacity being ``k`` (exact) or ``min(n, EXCESS * k)`` (sampled: the entries
    not sent are zero bytes, so the size stays fixed). Within a group the indices ascend
    strictly; a decode refuses a body where they do not.
    """
    name = "adaptive"
    wire_id = 8
    params = (PI, GROUPING, THRESHOLD)
    examples = PI_EXAMPLES + ({"grouping": "row"}, {"pi": 0.1, "grouping": "row"}, {"threshold": "sampled"},
                              {"pi": 0.1, "threshold": "sampled"}, {"pi": 0.37, "threshold": "sampled"},
                              {"pi": 0.05, "grouping": "row", "threshold": "sampled"})
    needs_error_feedback = True
    sparse = True
    has_numba = True
    cuda_program = "sparse"

    @property
    def split_axis(self) -> int:
        return 1 if self.grouping == "column" else 0

    def _entry_bytes(self, shape) -> int:
        return 2 if group_shape(shape, self.grouping)[1] <= SHORT_COLUMN else 4

    def _capacity(self, n: int) -> int:
        k = count_sent(self.pi, n)
        return k if self.threshold == "exact" else min(n, EXCESS * k)

    def _header_params(self, shape):
        layout = GROUPING_CODES[self.grouping] | THRESHOLDS.index(self.threshold) << 1
        return (self._capacity(numel(shape)), 8 * self._entry_bytes(shape), layout, self.pi)

    def _body_nbytes(self, shape):
        groups, _ = group_shape(shape, self.grouping)
        return 4 + 12 * groups + self._capacity(numel(shape)) * self._entry_bytes(shape)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        groups, length = group_shape(shape, self.grouping)
        m = to_groups(flat, shape, self.grouping).reshape(-1)
        n = m.numel()
        if self.threshold == "exact":
            idx = select_largest(m, count_sent(self.pi, n))
            mean_pos, mean_neg = _exact_means(m[idx], idx // length if length else idx, groups)
        else:
            key = rng.stream_key(self.seed, step, rank, stream)
            idx, mean_pos, mean_neg = _sampled(m, groups, length, count_sent(self.pi, min(n, THRESHOLD_SAMPLES)),
                                               self._capacity(n), key)
        group = idx // length if length else idx
        per_group = torch.bincount(group, minlength=groups)
        offsets = (torch.cumsum(per_group, 0) - per_group).to(torch.int32)
        entries = ((idx - group * length) << 1 | (m[idx] < 0)).to(torch.int32)
        width = self._entry_bytes(shape)
        if width == 2:
            entries = entries.view(torch.uint8).view(-1, 4)[:, :2]
        total = torch.tensor([idx.numel()], dtype=torch.int32, device=flat.device)
        unused = torch.zeros((self._capacity(n) - idx.numel()) * width, dtype=torch.uint8, device=flat.device)
        return [total, offsets, mean_pos, mean_neg, entries, unused]

    def _check_total(self, total: int, capacity: int) -> None:
        """The body's entry count: exactly the capacity (exact), at most it (sampled)."""
        if self.threshold == "exact" and total != capacity:
            raise wire.PayloadError(ADAPTIVE_ERRORS[0].format(total=total, k=capacity))
        if self.threshold == "sampled" and not 0 <= total <= capacity:
            raise wire.PayloadError(ADAPTIVE_ERRORS[0].format(total=total, k=f"at most {capacity}"))

    def _decode_body(self, payload, start, shape):
        rows, cols = group_shape(shape, self.grouping)
        n = numel(shape)
        k = int(wire.section(payload, start, 1, torch.int32)[0])
        self._check_total(k, self._capacity(n))
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
        # Groups ascend and indices lie in [0, cols): ascending flat positions are ascending
        # indices within each group.
        position = row * cols + col
        if bool((position[1:] <= position[:-1]).any()):
            raise wire.PayloadError(ADAPTIVE_ERRORS[3])
        negative = (entries & 1).bool()
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[position] = torch.where(negative, mean_neg[row], mean_pos[row])
        return from_groups(out.view(rows, cols), shape, self.grouping)

    def _encode_numba(self, flat, body, shape, *, step, rank, stream):
        kernels = kernel_module("select")
        f32_section = kernel_module("common").f32_section

        groups, length = group_shape(shape, self.grouping)
        head = f32_section(body, 0, 1 + 3 * groups, writable=True)
        bits = to_groups_numpy(flat, shape, self.grouping).view(np.uint32)
        wide = self._entry_bytes(shape) == 4
        if self.threshold == "exact":
            kernels.adaptive_encode(bits, count_sent(self.pi, flat.size), groups, length, head.view(np.int32),
                                    head, body[4 + 12 * groups:], wide)
        else:
            kernels.adaptive_sampled_encode(bits, rng.stream_key(self.seed, step, rank, stream),
                                            count_sent(self.pi, min(flat.size, THRESHOLD_SAMPLES)),
                                            self._capacity(flat.size), groups, length, head.view(np.int32), head,
                                            body[4 + 12 * groups:], wide)

    def _decode_numba(self, body, shape, out, add):
        kernels = kernel_module("select")
        f32_section = kernel_module("common").f32_section

        groups, length = group_shape(shape, self.grouping)
        capacity = self._capacity(out.size)
        head = f32_section(body, 0, 1 + 3 * groups)
        ints = head.view(np.int32)
        # Where entry j of group g lands in ``out``: g * stride + j * step.
        stride, step = (1, groups) if transposes(shape, self.grouping) else (length, 1)
        status = kernels.adaptive_decode(ints, head, body[4 + 12 * groups:], capacity, self.threshold == "exact",
                                         groups, length, stride, step, self._entry_bytes(shape) == 4, out, add)
        if status == 1:
            self._check_total(int(ints[0]), capacity)
        if status:
            raise wire.PayloadError(ADAPTIVE_ERRORS[status - 1].format(cols=length))

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        groups, length = group_shape(shape, self.grouping)
        n = flat.size
        head = k.section(body, 0, 1 + 3 * groups, np.uint32, writable=True)
        entries = body[4 + 12 * groups:]
        wide = np.int32(self._entry_bytes(shape) == 4)
        if n == 0:  # no groups, no entries: the total alone (as the Numba kernels write it)
            k("sparse_fill", 1, head, np.int64(1), np.uint32(0))
            return
        exact = self.threshold == "exact"
        count = count_sent(self.pi, n)
        x = flat.view(np.uint32)
        ws = k.zeros(CUDA_WS, np.uint32)
        counted = False
        if transposes(shape, self.grouping):
            # The groups' matrix (the selection's order is its indices'); exact: the top digit's
            # histogram on the way, so the selection reads the matrix once more only.
            m = k.empty(n, np.uint32)
            k("sparse_transpose", k.grid(-(-length // 32) * -(-groups // 32), 1), x, m, np.int64(length),
              np.int64(groups), np.int32(exact), np.int64(count), ws)
            x, counted = m, exact
        if exact:
            idx = k.empty(count, np.int32)
            bits = k.empty(count, np.uint32)
            cuda_select(k, x, count, bits, idx, ws, counted=counted)
            k("sparse_adaptive_exact", k.grid(groups, _CUDA_WARPS), idx, bits, np.int64(count), np.int64(groups),
              np.int64(length), wide, head, entries)
            return
        key = np.uint32(rng.stream_key(self.seed, step, rank, stream))
        capacity = self._capacity(n)
        k("sparse_sampled_threshold", 1, x, np.int64(n), key, np.int64(count_sent(self.pi, min(n, THRESHOLD_SAMPLES))),
          ws)
        tiles = -(-n // CUDA_TILE)
        seg = k.empty(2 * n, np.uint32)
        per_tile = k.empty(2 * tiles, np.uint32)
        poison = k.zeros(3 * groups, np.uint32)
        k("sparse_sampled_compact", k.grid(tiles, 1), x, np.int64(n), np.int32(k.address(x) % 16 == 0),
          np.int64(length), ws, seg[:n], seg[n:], per_tile[:tiles], per_tile[tiles:], poison)
        k("sparse_sampled_finish", k.grid(max(tiles, -(-groups // _CUDA_WARPS)), 1), x, np.int64(n), key,
          np.int64(groups), np.int64(length), np.int64(capacity), wide, ws, seg[:n], seg[n:], per_tile[:tiles],
          per_tile[tiles:], poison, head, entries)

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        groups, length = group_shape(shape, self.grouping)
        capacity = self._capacity(out.size)
        head = k.section(body, 0, 1 + 3 * groups, np.uint32)
        entries = body[4 + 12 * groups:]
        wide = np.int32(self._entry_bytes(shape) == 4)
        # Every check before any write: a refused payload leaves out untouched.
        status = k.zeros(1, np.uint32)
        k("sparse_adaptive_check", k.grid(max(groups, capacity)), head, entries, np.int64(capacity),
          np.int32(self.threshold == "exact"), np.int64(groups), np.int64(length), wide, status)
        bad = int(status[0])
        if bad:
            failed = (bad & -bad).bit_length()  # the first check that failed, 1..4
            if failed == 1:
                self._check_total(int(head.view(np.int32)[0]), capacity)
            raise wire.PayloadError(ADAPTIVE_ERRORS[failed - 1].format(cols=length))
        stride, step = (1, groups) if transposes(shape, self.grouping) else (length, 1)
        if not add:
            k("sparse_fill", k.grid(out.size, 1024), out.view(np.uint32), np.int64(out.size), np.uint32(0))
        k("sparse_adaptive_scatter", k.grid(capacity), head, entries, np.int64(groups), np.int64(stride),
          np.int64(step), wide, out, np.int32(add))


# compressors/cuda/sparse.cu's tile (SP_TILE), workspace words (SP_WS), warps per block.
_CUDA_WARPS = 8


def _exact_means(values: torch.Tensor, group: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group, the float32 means of ``values`` >= 0 and < 0 (0 where none), summed in float64
    in ascending index order (as CPU index_add_ and the kernel add them)."""
    region = group * 2 + (values < 0)
    # float64 sums: float32 ones overflow for large entries.
    sums = torch.zeros(2 * groups, dtype=torch.float64, device=values.device).index_add_(0, region, values.double())
    counts = torch.bincount(region, minlength=2 * groups)
    means = torch.where(counts > 0, sums / counts.clamp(min=1), 0.0).to(torch.float32).view(groups, 2).t()
    return means[0], means[1]


def _positions(key: int, start: int, count: int, bound: int, device: torch.device) -> torch.Tensor:
    """``count`` positions in ``[0, bound)`` from the counter hash's indices ``start..``: the 24 bits
    of each uniform times ``bound``, shifted down (exact integers, as the kernel computes them)."""
    h = (rng.uniform(key, count, device, start=start) * 2.0**24).to(torch.int64)
    return (h * bound) >> 24


def _sampled(m: torch.Tensor, groups: int, length: int, keep: int, capacity: int,
             key: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LBANN's sampled selection (see ``Adaptive``) of the group-major ``m``: the indices sent
    (ascending, at most ``capacity``) and the float32 positive and negative means per group."""
    n = m.numel()
    if n == 0:
        empty = m.new_zeros(0)
        return torch.zeros(0, dtype=torch.int64, device=m.device), empty, empty
    mag = torch.nan_to_num(m.abs(), nan=math.inf)
    negative = m < 0
    if n <= THRESHOLD_SAMPLES:
        at = torch.arange(n, device=m.device)
    else:
        at = _positions(key, 0, THRESHOLD_SAMPLES, n, m.device)
    sample, sample_negative = mag[at], negative[at]
    top = sample >= torch.topk(sample, keep).values.min()
    sides = [sample[top & ~sample_negative], sample[top & sample_negative]]
    low = [side.min() if side.numel() else None for side in sides]
    low_pos, low_neg = (low[0] if low[0] is not None else low[1]), (low[1] if low[1] is not None else low[0])
    # Never a zero threshold: sending zeros helps nothing (LBANN sends none then either).
    low_pos, low_neg = low_pos.clamp(min=TINY), low_neg.clamp(min=TINY)
    sent = mag >= torch.where(negative, low_neg, low_pos)
    idx = sent.nonzero().view(-1)[:capacity]
    # The means: per group, the sent entries among its sample positions.
    if length <= MEAN_SAMPLES:
        where = torch.arange(n, device=m.device).view(groups, length)
    else:
        where = torch.arange(groups, device=m.device)[:, None] * length + _positions(
            key, THRESHOLD_SAMPLES, groups * MEAN_SAMPLES, length, m.device).view(groups, MEAN_SAMPLES)
    values, taken, neg = m[where], sent[where], negative[where]
    # A non-finite entry sent is added to its side's mean (poisons it), sampled or not.
    bad = sent & ~torch.isfinite(m)
    group = torch.arange(n, device=m.device) // length
    means = []
    for side_negative, fallback in ((False, low_pos.double()), (True, -low_neg.double())):
        side = taken & (neg if side_negative else ~neg)
        count = side.sum(dim=1)
        mean = torch.where(count > 0, pairwise_sum(torch.where(side, values, 0.0).double()) / count.clamp(min=1),
                           fallback)
        side_bad = bad & (negative if side_negative else ~negative)
        poison = torch.zeros(groups, dtype=torch.float64, device=m.device).index_add_(
            0, group[side_bad], m[side_bad].double())
        means.append((mean + poison).to(torch.float32))
    return idx, means[0], means[1]
