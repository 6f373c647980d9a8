"""The performance model of a data-parallel step: pure arithmetic (docs/predictor.md).

Costs of the collectives from a link's latency ``alpha`` (s per message) and bandwidth ``B``
(bytes/s each way, full duplex: a host sends and receives at B at once), and the step as a
timeline of gradient buckets ready during backward:

- ring all_reduce of M bytes: ``2(p-1) alpha + 2(p-1)/p M/B + (p-1)/p M/R_add``;
- all_gather of an S-byte payload per rank: ``(p-1) alpha + (p-1) S/B``;
- all_to_all sending ``A`` bytes to the other ranks: ``(p-1) alpha + A/B``;
- sra: an all_to_all then an all_gather of the re-encoded chunks.

Timeline (buckets i = 1..K ready at t_i into backward, encode e_i, communication c_i, decode d_i):
with overlap f_i = max(f_{i-1}, t_i + e_i) + c_i, T = T_fwd + max(T_bwd, f_K + d_K) + T_opt, with
the encodes and decodes on the compute device (contended: backward grows by them, and each t_i by
the encodes and earlier buckets' decodes before it); without,
T = T_fwd + T_bwd + sum(e_i + c_i + d_i) + T_opt.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

@dataclass(frozen=True)
class Link:
    """One host's link: bandwidth in bytes/s each way, latency in seconds per message."""
    bandwidth: float
    latency: float = 0.0


def ring_allreduce_s(nbytes: float, p: int, link: Link, reduce_bps: float = math.inf) -> float:
    if p <= 1 or nbytes <= 0:
        return 0.0
    return (2 * (p - 1) * link.latency + 2 * (p - 1) / p * nbytes / link.bandwidth
            + (p - 1) / p * nbytes / reduce_bps)


def allgather_s(payload_nbytes: float, p: int, link: Link) -> float:
    if p <= 1 or payload_nbytes <= 0:
        return 0.0
    return (p - 1) * link.latency + (p - 1) * payload_nbytes / link.bandwidth


def alltoall_s(sent_nbytes: float, p: int, link: Link) -> float:
    """``sent_nbytes``: what this rank sends to the others, together."""
    if p <= 1 or sent_nbytes <= 0:
        return 0.0
    return (p - 1) * link.latency + sent_nbytes / link.bandwidth


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket: ready ``ready_s`` after backward starts; its costs in seconds."""
    ready_s: float
    encode_s: float
    comm_s: float
    decode_s: float


def step_time(fwd_s: float, bwd_s: float, opt_s: float, buckets: list[Bucket], overlap: bool) -> float:
    """Predicted step time. ``buckets`` in the order they become ready (DDP's: reverse parameters);
    ``overlap``: communication runs beside backward (else each bucket's runs to completion in turn)."""
    if not overlap:
        return fwd_s + bwd_s + sum(b.encode_s + b.comm_s + b.decode_s for b in buckets) + opt_s
    # Encodes and decodes run on the compute device: each delays the rest of backward and every later
    # bucket (an earlier bucket's decode is taken to run before the next bucket is ready: exact when its
    # communication is short, and where it is long the later buckets' finish, not backward, sets the pace).
    finish, shift, decode = 0.0, 0.0, 0.0
    for b in buckets:
        shift += decode + b.encode_s
        finish = max(finish, b.ready_s + shift) + b.comm_s
        decode = b.decode_s
    # the last bucket's decode ends the step
    return fwd_s + max(bwd_s + shift, finish + decode) + opt_s


def speedup_bound(baseline_step_s: float, compute_s: float) -> float:
    """S_max = 1 + E / T_compute, E the baseline's exposed communication: no compressor beats it."""
    exposed = max(0.0, baseline_step_s - compute_s)
    return 1.0 + exposed / compute_s if compute_s > 0 else math.nan


def break_even(faster_at, low: float, high: float, iterations: int = 60) -> float | None:
    """The bandwidth below which ``faster_at(bandwidth)`` is true, by bisection on a log scale;
    ``low`` if it is never true in [low, high], ``high`` if always (callers say so), else the edge."""
    if not faster_at(low):
        return low
    if faster_at(high):
        return high
    lo, hi = math.log(low), math.log(high)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if faster_at(math.exp(mid)):
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)
