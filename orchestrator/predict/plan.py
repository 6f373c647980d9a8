"""A configuration's step at p workers: its plan (all but the link), then its time on a cluster.

Encode and decode at p workers from the one-worker figures: sra encodes n + n/p elements per step
(n + n with one worker) and decodes 2n either way; allgather encodes n and decodes p n. The hierarchical
algorithm's codec runs sra among the H hosts on 1/G of each bucket (encode n/G + n/(G H), decode 2n/G:
the one-worker figures scaled so; by all_gather among the hosts, encode n/G, decode H n/G), its intra
phases' casts and copies taken as within those figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import perfmodel
from .buckets import buckets_of
from .profile import Profile
from .traffic import Traffic, bucket_traffic, comm_s
from .trials import Configuration


@dataclass(frozen=True)
class Plan:
    """A configuration's step at ``p`` workers, all but the link: fwd/bwd/opt and per bucket its
    ready time, encode, decode and traffic (so a bandwidth sweep costs arithmetic only)."""
    fwd_s: float
    bwd_s: float
    opt_s: float
    buckets: list[tuple[float, float, float, Traffic]]
    encode_s: float
    decode_s: float
    overlap: bool


@dataclass(frozen=True)
class DeviceScale:
    """How much longer than in its one-worker trial a worker's device work takes on the target: its
    compute (forward, backward, optimizer), its encodes and its decodes (the target's devices against
    the measured one, or hosts sharing one machine: ``benchmarks/host_contention.py`` measures them)."""
    compute: float = 1.0
    encode: float = 1.0
    decode: float = 1.0

    @classmethod
    def uniform(cls, scale: float) -> "DeviceScale":
        return cls(scale, scale, scale)


def hosts_problem(num_workers: int, workers_per_host: int) -> str | None:
    """Why hosts of ``workers_per_host`` workers cannot hold ``num_workers`` workers, all hosts alike; None
    where they can."""
    if 1 <= workers_per_host <= num_workers and num_workers % workers_per_host == 0:
        return None
    return f"must be in [1, {num_workers}] and divide num_workers ({num_workers})"


def cluster(num_workers: int, workers_per_host: int, bandwidth_bps: float, latency_s: float,
            intra_bandwidth_bps: float) -> perfmodel.Cluster:
    """The target cluster: ``num_workers`` workers, ``workers_per_host`` on each host, each with a link of
    ``bandwidth_bps`` bits/s and ``latency_s`` to the other hosts, a host's joined by ``intra_bandwidth_bps``
    bits/s (latency 0). ValueError, one line naming the argument, where the hosts would not all hold
    ``workers_per_host`` workers."""
    problem = hosts_problem(num_workers, workers_per_host)
    if problem:
        raise ValueError(f"workers_per_host {problem}, got {workers_per_host}")
    return perfmodel.Cluster(num_workers // workers_per_host, workers_per_host,
                             perfmodel.Link(bandwidth_bps / 8, latency_s), perfmodel.Link(intra_bandwidth_bps / 8))


def hierarchical_encode_share(p: int, workers_per_host: int, inter: str | None) -> float:
    """What a rank of the hierarchical algorithm encodes, as a share of what the sra configuration's one-worker
    trial encoded (the gradient twice: its chunks, then its server chunk): an sra among the H = p / G hosts
    on 1/G of the elements encodes 1/G + 1/(G H) of a gradient, an all_gather 1/G, once."""
    G = workers_per_host
    return 1 / (2 * G) if inter == "allgather" else (1 + 1 / (p // G)) / 2 / G


def hierarchical_decode_share(p: int, workers_per_host: int, inter: str | None) -> float:
    """What a rank of the hierarchical algorithm decodes, as a share of what the sra configuration's one-worker
    trial decoded (the gradient twice): an sra's 2/G of a gradient, an all_gather's H payloads of 1/G."""
    G = workers_per_host
    return (p // G) / (2 * G) if inter == "allgather" else 1 / G


def _codec_s(config: Configuration, p: int, scale: DeviceScale, workers_per_host: int) -> tuple[float, float]:
    """A worker's encode and decode time per step at ``p`` workers, from its one-worker trial's."""
    s = config.settings
    encode, decode = config.encode_s, config.decode_s
    if s["algorithm"] == "allreduce":
        # The cast and copies run inside the collective, so the hook times no encode or decode; in a
        # world of one the collective moves nothing, and what it took is that device work.
        encode = decode = config.exposed_comm_s / 2
    encode, decode = encode * scale.encode, decode * scale.decode
    if s["algorithm"] == "sra":
        encode *= (1 + 1 / p) / 2
    elif s["algorithm"] == "allgather":
        decode *= p
    elif s["algorithm"] == "hierarchical":  # an sra (or all_gather) among the hosts on 1/G of the elements
        encode *= hierarchical_encode_share(p, workers_per_host, s.get("inter"))
        decode *= hierarchical_decode_share(p, workers_per_host, s.get("inter"))
    return encode, decode


def plan(config: Configuration, prof: Profile, compute_s: float, p: int, overlap: bool,
         scale: DeviceScale = DeviceScale(), workers_per_host: int = 1) -> Plan:
    """``compute_s``: the one-worker step's compute (fp32's), split as ``prof`` says, times ``scale.compute``;
    the configuration's encode and decode times ``scale.encode`` and ``scale.decode``; ``p`` workers,
    ``workers_per_host`` on each host."""
    s = config.settings
    shapes = [shape for shape, _ in prof.params]
    per_profiled = compute_s * scale.compute / (prof.fwd_s + prof.bwd_s + prof.opt_s)
    compressible = [math.prod(x) if math.prod(x) >= s["min_compress_numel"] else 0 for x in shapes]
    total = sum(compressible) or 1
    encode, decode = _codec_s(config, p, scale, workers_per_host)
    buckets = []
    for idx in buckets_of(shapes, s["bucket_cap_mb"]):
        share = sum(compressible[i] for i in idx) / total
        ready = max(prof.params[i][1] for i in idx) * per_profiled
        buckets.append((ready, encode * share, decode * share,
                        bucket_traffic(config, [shapes[i] for i in idx], p, workers_per_host)))
    return Plan(prof.fwd_s * per_profiled, prof.bwd_s * per_profiled, prof.opt_s * per_profiled, buckets, encode,
                decode, overlap)


def predict_step(step: Plan, cluster: perfmodel.Cluster, reduction_rate: float,
                 latency_s: float | None = None, slowdown: float = 0.0) -> dict[str, float]:
    """Predicted step of a planned configuration on ``cluster`` (the shape it was planned for), its sums at
    ``reduction_rate`` (bytes of one operand per second); ``messages``: how many latencies it pays.
    ``latency_s``: where hosts share one machine's cores, the latency per message under that load (its peers
    take each message late). On links of each worker's own it is the links' latency; where the workers of a
    host share its link, one worker's waits overlap the bytes the others send, and a bucket's communication
    takes the longer of its time on ``cluster`` and its messages' waits. ``slowdown``: how much longer the
    device's work takes while communication overlaps it (``perfmodel.step_time``)."""
    # messages in turn: the communication at a latency of 1 s and no time per byte, on either link
    counting = perfmodel.Link(math.inf, 1.0)
    counts = [comm_s(traffic, replace(cluster, inter=counting, intra=counting), math.inf)
              for *_, traffic in step.buckets]

    def comm(traffic: Traffic, messages: float) -> float:
        if latency_s is None:
            return comm_s(traffic, cluster, reduction_rate)
        if cluster.shares_link:
            return max(comm_s(traffic, cluster, reduction_rate), messages * latency_s)
        # a link per worker (a flat cluster's one link is both of its links)
        own = replace(cluster.inter, latency=latency_s)
        return comm_s(traffic, replace(cluster, inter=own, intra=own if cluster.workers_per_host == 1
                                       else cluster.intra), reduction_rate)

    buckets = [perfmodel.Bucket(ready, enc, comm(traffic, n), dec)
               for (ready, enc, dec, traffic), n in zip(step.buckets, counts)]
    time_s = perfmodel.step_time(step.fwd_s, step.bwd_s, step.opt_s, buckets, step.overlap, slowdown)
    return {"predicted_step_time_s": time_s, "compute_s": step.fwd_s + step.bwd_s + step.opt_s,
            "comm_s": sum(b.comm_s for b in buckets), "encode_s": step.encode_s, "decode_s": step.decode_s,
            "messages": sum(counts)}
