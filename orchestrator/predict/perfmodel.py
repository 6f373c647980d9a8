"""The performance model of a data-parallel step: pure arithmetic (docs/predictor.md).

Costs of the collectives from a link's latency ``alpha`` (s per message) and bandwidth ``B``
(bytes/s each way, full duplex: a host sends and receives at B at once) and this machine's
reduction rate ``R_add`` (``reduction_rate``: bytes of one operand summed per second), and the step
as a timeline of gradient buckets ready during backward:

- ring all_reduce of M bytes: ``2(p-1) alpha + 2(p-1)/p M/B + (p-1)/p M/R_add``;
- all_gather of an S-byte payload per rank: ``(p-1) alpha + (p-1) S/B``;
- all_to_all sending ``A`` bytes to the other ranks: ``(p-1) alpha + A/B``;
- sra: an all_to_all then an all_gather of the re-encoded chunks.

A cluster of H hosts of G workers each (``Cluster``, p = H G) has two links: each worker's own link to
the other hosts (``inter``: a NIC per worker, as GPU nodes have) and the link joining a host's workers
(``intra``: NVLink-class). A flat collective spans all p ranks:

- ring all_reduce: every step of the ring waits for its slowest hop, one between hosts where H > 1:
  the ring's cost over ``inter`` (over ``intra`` where H = 1);
- all_gather and all_to_all: (p-G)/(p-1) of the bytes go to ranks on other hosts over ``inter``,
  (G-1)/(p-1) to the host's own over ``intra``, at once: the longer of ``(p-G) alpha_e + (p-G) S/B_e``
  and ``(G-1) alpha_i + (G-1) S/B_i`` (all_gather; all_to_all: the shares of A instead of multiples
  of S). With G = 1 both are the one-link costs above, bit for bit.

Where a host has one link to the others, shared by its G workers (``shared_link``: an emulated host, a
node with one NIC), what its workers send across at once shares it: a flat all_gather's or all_to_all's
bytes across, and the hierarchical algorithm's G exchanges among the hosts, each take G times as long. A
flat ring puts one of a host's ranks on each link between hosts (its ranks are consecutive), so it
shares nothing.

The hierarchical average of a bucket of M bytes at the intra precision: a reduce-scatter among the
host's G ranks over ``intra``, ``(G-1) alpha_i + (G-1)/G M/B_i + (G-1)/G M/R_add``; across hosts,
among the H ranks of each local rank, an sra of that rank's 1/G of the bucket over ``inter`` (the
costs above with p = H); an all_gather among the G ranks over ``intra`` of M/G bytes each.

Timeline (buckets i = 1..K ready at t_i into backward, encode e_i, communication c_i, decode d_i):
with overlap f_i = max(f_{i-1}, t_i + e_i) + c_i, T = T_fwd + max(T_bwd, f_K + d_K) + T_opt, with
the encodes and decodes on the compute device (contended: backward grows by them, and each t_i by
the encodes and earlier buckets' decodes before it); without,
T = T_fwd + T_bwd + sum(e_i + c_i + d_i) + T_opt.

With a ``slowdown`` s > 0 (``step_time``), the device's work runs 1 + s times longer while a bucket's
communication is in flight beside it (on a GPU, communication kernels and copies take SMs and memory
bandwidth from backward); s = 0 is the timeline above, bit for bit.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


# The slowdown of a GPU's compute while communication overlaps it, where none was measured: the average that
# Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
# Performance and Power Implications" (arXiv:2507.03114, 2025) measured on A100, H100, MI250 and MI210.
GPU_OVERLAP_SLOWDOWN = 0.189
GPU_SLOWDOWN_SOURCE = "Lee et al. 2025's average on A100, H100, MI250 and MI210 (docs/predictor.md)"


@dataclass(frozen=True)
class Link:
    """One worker's link: bandwidth in bytes/s each way, latency in seconds per message."""
    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True)
class Cluster:
    """``hosts`` hosts of ``workers_per_host`` workers: each worker's link to the other hosts (``inter``),
    and the link between the workers of a host (``intra``)."""
    hosts: int
    workers_per_host: int
    inter: Link
    intra: Link
    shared_link: bool = False  # one link per host, shared by its workers (else a link per worker)

    @property
    def workers(self) -> int:
        return self.hosts * self.workers_per_host

    @property
    def shares_link(self) -> bool:
        """Whether several workers of a host send over one link to the other hosts."""
        return self.shared_link and self.workers_per_host > 1

    @property
    def across(self) -> Link:
        """What one worker gets of the link to the other hosts while every worker of its host sends."""
        if not self.shares_link:
            return self.inter
        return Link(self.inter.bandwidth / self.workers_per_host, self.inter.latency)

    @classmethod
    def flat(cls, workers: int, link: Link) -> "Cluster":
        """A host per worker: every message crosses ``link``."""
        return cls(workers, 1, link, link)


def ring_allreduce_s(nbytes: float, p: int, link: Link, reduction_rate: float = math.inf) -> float:
    if p <= 1 or nbytes <= 0:
        return 0.0
    return (2 * (p - 1) * link.latency + 2 * (p - 1) / p * nbytes / link.bandwidth
            + (p - 1) / p * nbytes / reduction_rate)


def allgather_s(payload_nbytes: float, p: int, link: Link) -> float:
    if p <= 1 or payload_nbytes <= 0:
        return 0.0
    return (p - 1) * link.latency + (p - 1) * payload_nbytes / link.bandwidth


def alltoall_s(sent_nbytes: float, p: int, link: Link) -> float:
    """``sent_nbytes``: what this rank sends to the others, together."""
    if p <= 1 or sent_nbytes <= 0:
        return 0.0
    return (p - 1) * link.latency + sent_nbytes / link.bandwidth


def reduce_scatter_s(nbytes: float, p: int, link: Link, reduction_rate: float = math.inf) -> float:
    """An all_to_all of M bytes' p chunks, each rank summing the p copies of its own: a ring all_reduce's
    first half (an all_gather of the M/p-byte sums is the second)."""
    if p <= 1 or nbytes <= 0:
        return 0.0
    return (p - 1) * link.latency + (p - 1) / p * nbytes / link.bandwidth + (p - 1) / p * nbytes / reduction_rate


def flat_ring_allreduce_s(nbytes: float, cluster: Cluster, reduction_rate: float = math.inf) -> float:
    """A ring over every rank of ``cluster``: each step waits for the slowest hop, one between hosts."""
    link = cluster.inter if cluster.hosts > 1 else cluster.intra
    return ring_allreduce_s(nbytes, cluster.workers, link, reduction_rate)


def flat_allgather_s(payload_nbytes: float, cluster: Cluster) -> float:
    """All_gather over every rank: the payloads of the ranks on other hosts over ``inter``, those of the
    host's own over ``intra``, at once."""
    p, g = cluster.workers, cluster.workers_per_host
    if p <= 1 or payload_nbytes <= 0:
        return 0.0
    link = cluster.across
    across = (p - g) * link.latency + (p - g) * payload_nbytes / link.bandwidth
    inside = (g - 1) * cluster.intra.latency + (g - 1) * payload_nbytes / cluster.intra.bandwidth
    return max(across, inside)


def flat_alltoall_s(sent_nbytes: float, cluster: Cluster) -> float:
    """All_to_all over every rank, sending ``sent_nbytes`` alike to the others: the share for other hosts
    over ``inter``, the rest over ``intra``, at once."""
    p, g = cluster.workers, cluster.workers_per_host
    if p <= 1 or sent_nbytes <= 0:
        return 0.0
    # the shares first: (p - 1) / (p - 1) is 1 exactly, so one worker per host is alltoall_s to the bit
    link = cluster.across
    across = (p - g) * link.latency + sent_nbytes * ((p - g) / (p - 1)) / link.bandwidth
    inside = (g - 1) * cluster.intra.latency + sent_nbytes * ((g - 1) / (p - 1)) / cluster.intra.bandwidth
    return max(across, inside)


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket: ready ``ready_s`` after backward starts; its costs in seconds."""
    ready_s: float
    encode_s: float
    comm_s: float
    decode_s: float


def step_time(fwd_s: float, bwd_s: float, opt_s: float, buckets: list[Bucket], overlap: bool,
              slowdown: float = 0.0) -> float:
    """Predicted step time. ``buckets`` in the order they become ready (DDP's: reverse parameters);
    ``overlap``: communication runs beside backward (else each bucket's runs to completion in turn).
    ``slowdown``: how much longer the device's work takes while communication runs beside it (0.1: a
    tenth longer; a GPU's communication kernels and copies take SMs and memory bandwidth from backward)."""
    if not overlap:
        return fwd_s + bwd_s + sum(b.encode_s + b.comm_s + b.decode_s for b in buckets) + opt_s
    if slowdown > 0:
        return _slowed_step_time(fwd_s, bwd_s, opt_s, buckets, slowdown)
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


def _slowed_step_time(fwd_s: float, bwd_s: float, opt_s: float, buckets: list[Bucket], slowdown: float) -> float:
    """``step_time`` with overlap where the device's work (backward, encodes, decodes) runs 1 + ``slowdown``
    times longer while communication is in flight. The times of ``buckets`` are the device's work: a
    bucket is ready when backward's work (with the encodes and earlier decodes before it) reaches its
    ready point. Once a bucket's communication is scheduled the link is busy from now until it ends
    (the buckets queue on it), so the work advances at 1 / (1 + slowdown) up to that end, then at 1."""
    wall, work, busy_until = 0.0, 0.0, 0.0

    def advance(to_work: float) -> float:
        nonlocal wall, work
        if wall < busy_until:  # the slowed stretch first
            slowed = (busy_until - wall) / (1 + slowdown)
            if to_work - work <= slowed:
                wall += (to_work - work) * (1 + slowdown)
                work = to_work
                return wall
            wall, work = busy_until, work + slowed
        wall += to_work - work
        work = to_work
        return wall

    shift, decode = 0.0, 0.0
    for b in buckets:
        shift += decode + b.encode_s
        ready = advance(max(work, b.ready_s + shift))
        busy_until = max(busy_until, ready) + b.comm_s
        decode = b.decode_s
    backward_end = advance(max(work, bwd_s + shift))
    return fwd_s + max(backward_end, busy_until + decode) + opt_s


def speedup_bound(baseline_step_s: float, compute_s: float) -> float:
    """S_max = 1 + E / T_compute, E the baseline's exposed communication: no compressor beats it."""
    exposed = max(0.0, baseline_step_s - compute_s)
    return 1.0 + exposed / compute_s if compute_s > 0 else math.nan


def break_even(faster_at: Callable[[float], bool], low: float, high: float, iterations: int = 60) -> float:
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
