"""Bytes on the wire, counted in one place.

Bytes are those *this rank transmits* in one step:

- ring ``all_reduce`` of B bytes:        ``2 (N-1) / N * B``
- ``all_gather`` of an S-byte payload:    ``(N-1) * S`` (every other rank gets it once)
- ``all_to_all_single``:                 the payloads sent to the other ranks (own chunk excluded)
- PyTorch's PowerSGD hook: ring all_reduces of fp32 tensors (``powersgd_bytes``)

``compression_ratio`` is the fp32 ring all_reduce bytes of the same
gradients over the bytes actually sent; with one worker nothing is sent and
the ratio is undefined (NaN).  ``payload_ratio`` is a property of a payload
alone: the fp32 bytes of the tensor (``4 n``) over the payload's bytes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence


def ring_allreduce_bytes(nbytes: int, world: int) -> float:
    return 2.0 * (world - 1) / world * nbytes if world > 1 else 0.0


def allgather_bytes(payload_nbytes: int, world: int) -> float:
    return float((world - 1) * payload_nbytes)


def alltoall_bytes(split_nbytes: list[int], rank: int) -> float:
    return float(sum(n for r, n in enumerate(split_nbytes) if r != rank))


def compression_ratio(numel: int, world: int, bytes_sent: float) -> float:
    """fp32 ring all_reduce bytes of ``numel`` elements over ``bytes_sent`` (NaN when nothing was sent)."""
    fp32 = ring_allreduce_bytes(4 * numel, world)
    return fp32 / bytes_sent if bytes_sent > 0 else math.nan


def payload_ratio(numel: int, payload_nbytes: int) -> float:
    """``4 n`` (the tensor in fp32) over the payload's bytes, header included."""
    return 4 * numel / payload_nbytes if payload_nbytes > 0 else math.nan


def powersgd_bytes(shapes: Sequence[Sequence[int]], matrix_rank: int, world: int, compressing: bool,
                   min_compression_rate: float = 2.0) -> float:
    """Bytes PyTorch's ``powerSGD_hook`` sends for one bucket of fp32 gradients of ``shapes``.

    Before it starts compressing: one ring all_reduce of the bucket.  Then each
    gradient is viewed as a matrix ``(n, m) = (shape[0], numel // shape[0])``
    of rank ``r = min(n, m, matrix_rank)``; it is compressed when
    ``(n + m) r * min_compression_rate < n m``, into ``P (n x r)`` and
    ``Q (m x r)``.  Three ring all_reduces follow: the uncompressed gradients,
    the Ps, the Qs.
    """
    numels = [math.prod(s) for s in shapes]
    if not compressing:
        return ring_allreduce_bytes(4 * sum(numels), world)
    dense = ps = qs = 0
    for shape, numel in zip(shapes, numels):
        n = shape[0] if len(shape) else 1
        m = numel // n if n else 0
        r = min(n, m, matrix_rank)
        if (n + m) * r * min_compression_rate < n * m:
            ps += n * r
            qs += m * r
        else:
            dense += numel
    return sum(ring_allreduce_bytes(4 * count, world) for count in (dense, ps, qs) if count)
