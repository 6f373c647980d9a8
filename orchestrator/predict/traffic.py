"""What a gradient bucket puts on the wire, collective by collective, and what that costs on a cluster.

Exact payload sizes from the compressors: sra's chunks and the hierarchical algorithm's pieces cut as
``compressors.comm.collectives`` cuts them; tensors below ``min_compress_numel`` travel in one fp32 ring
all_reduce; the casts (fp32, fp16, bf16) in a ring all_reduce of their own width.
"""
from __future__ import annotations

import math

import compressors
from compressors.comm import collectives

from . import perfmodel
from .trials import Configuration

CAST_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}

# One bucket's traffic: (collective, bytes) in the order they run; bytes are what perfmodel's cost
# of that collective takes (ring: the buffer; all_gather: one rank's payload; all_to_all: what a rank sends;
# reduce_scatter: the buffer). Collectives over every rank are named alone; those of the hierarchical
# algorithm among a host's ranks ``intra_``, among the ranks of one local rank on every host ``inter_``.
Traffic = list[tuple[str, float]]
Shape = tuple[int, ...]


def bucket_traffic(config: Configuration, shapes: list[Shape], p: int, workers_per_host: int = 1) -> Traffic:
    """What one bucket (parameter ``shapes``) puts on the wire with ``p`` workers, ``workers_per_host`` on
    each host."""
    s = config.settings
    name, algorithm = s["compressor"], s["algorithm"]
    if algorithm == "allreduce":
        return [("ring", CAST_ITEMSIZE[name] * sum(math.prod(x) for x in shapes))]
    small = [x for x in shapes if math.prod(x) < s["min_compress_numel"]]
    large = [x for x in shapes if math.prod(x) >= s["min_compress_numel"]]
    traffic: Traffic = [("ring", 4 * sum(math.prod(x) for x in small))]
    if not large:
        return traffic
    codec = compressors.get(name, **(s["compressor_params"] or {}))
    if algorithm == "allgather":
        return traffic + [("all_gather", sum(codec.payload_nbytes(x) for x in large))]
    if algorithm == "sra":
        return traffic + _sra_traffic(codec, list(enumerate(large)), p)
    return traffic + _hierarchical_traffic(config, codec, large, p, workers_per_host)


def _hierarchical_traffic(config: Configuration, codec: compressors.Compressor, large: list[Shape], p: int,
                          g: int) -> Traffic:
    """The hierarchical algorithm's traffic for the compressed tensors of a bucket (``large``), ``g`` workers on
    each host: local rank r's share of each tensor, cut as hierarchical_compressed cuts it, then the sra (or
    all_gather: ``inter``) of those pieces among the hosts; the local ranks run theirs at once, and the busiest
    one's bytes (collective by collective) set the pace."""
    s = config.settings
    pieces: list[list[tuple[int, Shape]]] = [[] for _ in range(g)]
    for index, x in enumerate(large):
        axis = collectives.chunk_axis(x, codec)
        for rank, bounds in enumerate(collectives.split(x, g, index, axis)):
            if bounds[1] > bounds[0]:  # a one-row tensor goes whole to one local rank
                pieces[rank].append((index, collectives.chunk_shape(x, bounds, axis)))
    if (s.get("inter") or "sra") == "allgather":
        across = [[("all_gather", sum(codec.payload_nbytes(x) for _, x in mine))] for mine in pieces]
    else:
        across = [_sra_traffic(codec, mine, p // g) for mine in pieces]
    busiest = [(f"inter_{kind}", max(rank[i][1] for rank in across)) for i, (kind, _) in enumerate(across[0])]
    # the intra phases at the intra precision, split evenly (their bytes are cheap, their padding ignored)
    intra = CAST_ITEMSIZE[s.get("intra") or "fp32"] * sum(math.prod(x) for x in large)
    return [("intra_reduce_scatter", intra), *busiest, ("intra_all_gather", intra / g)]


def _sra_traffic(codec: compressors.Compressor, tensors: list[tuple[int, Shape]], p: int) -> Traffic:
    """An sra's traffic among ``p`` ranks for (key, shape) ``tensors``: payload bytes of each rank's chunks, as
    collectives.sra_compressed cuts them (the keys place a one-row tensor)."""
    to_rank = [0] * p
    for key, x in tensors:
        axis = collectives.chunk_axis(x, codec)
        for r, bounds in enumerate(collectives.split(x, p, key, axis)):
            to_rank[r] += codec.payload_nbytes(collectives.chunk_shape(x, bounds, axis))
    scales: Traffic = [("ring", 4 * len(tensors))] if codec.scales_by_tensor else []
    return [("all_to_all", sum(to_rank[1:])), *scales, ("all_gather", max(to_rank))]


def comm_s(traffic: Traffic, cluster: perfmodel.Cluster, reduction_rate: float) -> float:
    """The time of ``traffic`` on ``cluster``, its sums at ``reduction_rate`` (bytes of one operand per second)."""
    hosts, local = cluster.hosts, cluster.workers_per_host
    costs = {"ring": lambda n: perfmodel.flat_ring_allreduce_s(n, cluster, reduction_rate),
             "all_gather": lambda n: perfmodel.flat_allgather_s(n, cluster),
             "all_to_all": lambda n: perfmodel.flat_alltoall_s(n, cluster),
             "intra_reduce_scatter": lambda n: perfmodel.reduce_scatter_s(n, local, cluster.intra, reduction_rate),
             "inter_all_to_all": lambda n: perfmodel.alltoall_s(n, hosts, cluster.across),
             "inter_ring": lambda n: perfmodel.ring_allreduce_s(n, hosts, cluster.across, reduction_rate),
             "inter_all_gather": lambda n: perfmodel.allgather_s(n, hosts, cluster.across),
             "intra_all_gather": lambda n: perfmodel.allgather_s(n, local, cluster.intra)}
    return sum(costs[kind](nbytes) for kind, nbytes in traffic)
