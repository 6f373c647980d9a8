"""Top-k: the ``k = ceil(pi * n)`` entries of largest magnitude as (index, value) pairs.

The choice is exact and deterministic: every entry above the k-th largest
magnitude, then ties at that magnitude by ascending index. NaN counts as the
largest magnitude, so a NaN entry is always sent and poisons what it touches
instead of vanishing. ``count_sent`` is shared with adaptive and randomk,
``select_largest`` with adaptive.

With Numba, ``decode(out=..., add=True)`` adds at the sent entries only; the
reference adds a dense decode, which turns a ``-0.0`` already in ``out`` at an
unsent entry into ``+0.0``. The sums of the collectives start at ``+0.0``
and an IEEE sum from there is never ``-0.0``, so they agree there.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core import wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param

PI = Param("pi", 0.01, float, low=0.0, high=1.0, low_open=True,
           doc="share of the entries sent, those of largest magnitude (k = ceil(pi * n))")
PI_EXAMPLES = ({}, {"pi": 0.1}, {"pi": 0.25}, {"pi": 0.37}, {"pi": 1.0})

# What a decode refuses, in the order both implementations check (the kernels return 1 + the
# position here). Indices must ascend strictly, as the encoder emits them: with a repeated one,
# writing and adding the decoded values would disagree.
TOPK_ERRORS = ("topk: index out of range [0, {n})", "topk: indices are not strictly ascending")


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
    cuda_program = "sparse"

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
        kernels = kernel_module("select")
        f32_section = kernel_module("common").f32_section

        k = count_sent(self.pi, flat.size)
        kernels.topk_encode(flat.view(np.uint32), f32_section(body, 0, k, writable=True).view(np.uint32),
                            f32_section(body, 4 * k, k, writable=True).view(np.int32))

    def _decode_numba(self, body, shape, out, add):
        kernels = kernel_module("select")
        f32_section = kernel_module("common").f32_section

        k = count_sent(self.pi, out.size)
        idx = f32_section(body, 4 * k, k).view(np.int32)
        status = kernels.topk_check(idx, out.size)
        if status:  # before out is touched: a refused payload leaves it as it was
            raise wire.PayloadError(TOPK_ERRORS[status - 1].format(n=out.size))
        if not add:
            out.fill(0.0)
        kernels.topk_scatter(f32_section(body, 0, k), idx, out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        count = count_sent(self.pi, flat.size)
        if count:
            cuda_select(k, flat.view(np.uint32), count, k.section(body, 0, count, np.uint32, writable=True),
                         k.section(body, 4 * count, count, np.int32, writable=True))

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        count = count_sent(self.pi, out.size)
        values = k.section(body, 0, count, np.uint32)
        idx = k.section(body, 4 * count, count, np.int32)
        # Every check before any write: a refused payload leaves out untouched.
        status = k.zeros(1, np.uint32)
        k("sparse_topk_check", k.grid(count), idx, np.int64(count), np.int64(out.size), status)
        bad = int(status[0])
        if bad:
            raise wire.PayloadError(TOPK_ERRORS[0 if bad & 1 else 1].format(n=out.size))
        if not add:
            k("sparse_fill", k.grid(out.size, 1024), out.view(np.uint32), np.int64(out.size), np.uint32(0))
        k("sparse_topk_scatter", k.grid(count), values, idx, np.int64(count), out, np.int32(add))


CUDA_TILE = 4096
CUDA_WS = 8344


def cuda_select(k, x, count: int, values, idx, ws=None, *, counted: bool = False) -> None:
    """sparse.cu's radix select of the ``count`` largest magnitudes of the uint32 words ``x``: their
    words into ``values``, their indices (ascending) into int32 ``idx``. ``ws``: the zeroed
    workspace, whose top-digit histogram sparse_transpose already made if ``counted``."""
    n = x.size
    tiles = -(-n // CUDA_TILE)
    blocks = k.grid(tiles, 1)
    aligned = np.int32(k.address(x) % 16 == 0)
    if ws is None:
        ws = k.zeros(CUDA_WS, np.uint32)
    if not counted:
        k("sparse_select_hist", blocks, x, np.int64(n), aligned, np.int64(count), ws)
    # Each tile's survivors in its own segment (seg[t * tile:]), then per tile three words.
    seg = k.empty(2 * n, np.uint32)
    per_tile = k.empty(3 * tiles, np.uint32)
    seg_idx, seg_bits = seg[:n], seg[n:]
    tile_count, offset, ties = per_tile[:tiles], per_tile[tiles:2 * tiles], per_tile[2 * tiles:]
    k("sparse_select_compact", blocks, x, np.int64(n), aligned, ws, seg_idx, seg_bits, tile_count)
    k("sparse_select_hist3", blocks, np.int64(n), ws, seg_bits, tile_count)
    k("sparse_select_count", blocks, np.int64(n), ws, seg_bits, tile_count, offset, ties)
    k("sparse_select_write", blocks, np.int64(n), ws, seg_idx, seg_bits, tile_count, offset, ties, values, idx)
