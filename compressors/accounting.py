"""Bytes on the wire, counted in one place.

Bytes are those *this rank transmits* in one step:

- ring ``all_reduce`` of B bytes:        ``2 (N-1) / N * B``
- ``all_gather`` of an S-byte payload:    ``(N-1) * S`` (every other rank gets it once)
- ``all_to_all_single``:                 the payloads sent to the other ranks (own chunk excluded)

``compression_ratio`` is the fp32 ring all_reduce bytes of the same
gradients over the bytes actually sent; with one worker nothing is sent and
the ratio is undefined (NaN).
"""
from __future__ import annotations

import math


def ring_allreduce_bytes(nbytes: int, world: int) -> float:
    return 2.0 * (world - 1) / world * nbytes if world > 1 else 0.0


def allgather_bytes(payload_nbytes: int, world: int) -> float:
    return float((world - 1) * payload_nbytes)


def alltoall_bytes(split_nbytes: list[int], rank: int) -> float:
    return float(sum(n for r, n in enumerate(split_nbytes) if r != rank))


def compression_ratio(numel: int, world: int, bytes_sent: float) -> float:
    fp32 = ring_allreduce_bytes(4 * numel, world)
    return fp32 / bytes_sent if bytes_sent > 0 else math.nan
