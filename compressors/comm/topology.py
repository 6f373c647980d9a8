"""Which host each rank runs on, and the process groups of a two-level (hierarchical) average.

A cluster of multi-GPU nodes joins the workers of a node by a fast link (NVLink, shared memory) and the
nodes by a slower one. ``Topology.hosts`` names each rank's host; the hierarchical algorithm
(``collectives.hierarchical_compressed``) averages inside each host at full precision and compresses
only what crosses hosts, among the ranks with the same local rank.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class Topology:
    """``hosts[r]``: the host of rank r (any hashable labels; hosts numbered in order of first rank)."""

    hosts: tuple[int, ...]

    @classmethod
    def flat(cls, world: int) -> "Topology":
        """Every rank a host of its own."""
        return cls(tuple(range(world)))

    @classmethod
    def of(cls, labels: list[object]) -> "Topology":
        """From a host label per rank (node ranks, host names)."""
        number: dict[object, int] = {}
        return cls(tuple(number.setdefault(label, len(number)) for label in labels))

    @property
    def world(self) -> int:
        return len(self.hosts)

    def ranks_of(self, host: int) -> list[int]:
        """The ranks on ``host``, in rank order (their local ranks 0, 1, ...)."""
        return [r for r, h in enumerate(self.hosts) if h == host]

    @property
    def host_count(self) -> int:
        return len(set(self.hosts))

    @property
    def workers_per_host(self) -> int:
        """G: the ranks of every host (ValueError where hosts hold different numbers of ranks)."""
        counts = {len(self.ranks_of(h)) for h in set(self.hosts)}
        if len(counts) != 1:
            raise ValueError(f"hosts hold different numbers of ranks ({sorted(counts)}): the hierarchical "
                             "algorithm needs as many workers on every host")
        return counts.pop()

    def intra_groups(self) -> list[list[int]]:
        """The ranks of each host."""
        return [self.ranks_of(h) for h in range(self.host_count)]

    def inter_groups(self) -> list[list[int]]:
        """For each local rank g, the g-th rank of every host."""
        hosts = self.intra_groups()
        return [[ranks[g] for ranks in hosts] for g in range(self.workers_per_host)]

    def inter_share_ring(self, rank: int) -> float:
        """Of what a rank sends in a ring over all ranks (to rank + 1), the share that crosses hosts."""
        if self.world < 2:
            return 0.0
        return float(self.hosts[(rank + 1) % self.world] != self.hosts[rank])

    def inter_share_peers(self, rank: int) -> float:
        """Of what a rank sends alike to every other rank (all_gather, all_to_all), the share that crosses
        hosts: its peers on other hosts over all its peers."""
        if self.world < 2:
            return 0.0
        return sum(h != self.hosts[rank] for h in self.hosts) / (self.world - 1)


def host_label() -> str:
    """This process's host: NODE_RANK (a sweep's workers, Ray Train's), torchrun's GROUP_RANK, else the host name."""
    for variable in ("NODE_RANK", "GROUP_RANK"):
        if os.environ.get(variable) is not None:
            return f"{variable}={os.environ[variable]}"
    return socket.gethostname()


def discover(group: dist.ProcessGroup | None = None) -> Topology:
    """The topology of ``group`` from every rank's ``host_label`` (a collective call); one rank without
    an initialised process group."""
    if not dist.is_available() or not dist.is_initialized():
        return Topology((0,))
    labels: list[object] = [None] * dist.get_world_size(group)
    dist.all_gather_object(labels, host_label(), group=group)
    return Topology.of(labels)


@dataclass(frozen=True)
class Hierarchy:
    """The process groups of a hierarchical average, seen from one rank: ``intra`` over its host's ranks,
    ``inter`` over the ranks with its local rank (None where that is this rank alone), each a tuple: one
    group, or two (the first for the phase that starts the level's collectives, the second for the
    phase that ends it) where stages start collectives from callbacks; and its place: local rank g of G,
    host of H."""

    intra: tuple[dist.ProcessGroup | None, ...]
    inter: tuple[dist.ProcessGroup | None, ...]
    local_rank: int
    local_world: int
    host: int
    hosts: int


def build_hierarchy(topology: Topology, group: dist.ProcessGroup | None, copies: int = 1) -> Hierarchy:
    """Make the groups (a collective call: every rank of ``group`` makes it, with the same topology);
    ``copies`` (1 or 2) groups of each kind: 2 for overlapped programs (``Hierarchy``)."""
    G, H = topology.workers_per_host, topology.host_count
    global_ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD) \
        if dist.is_initialized() else [0]
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    host = topology.hosts[rank]
    intra_lists = [[global_ranks[r] for r in ranks] for ranks in topology.intra_groups()]
    inter_lists = [[global_ranks[r] for r in ranks] for ranks in topology.inter_groups()]
    local_rank = topology.ranks_of(host).index(rank)
    intra: list[dist.ProcessGroup | None] = []
    inter: list[dist.ProcessGroup | None] = []
    for _ in range(copies):
        intra.append(_subgroup(intra_lists, host) if G > 1 else None)
        inter.append(_subgroup(inter_lists, local_rank) if H > 1 else None)
    return Hierarchy(tuple(intra), tuple(inter), local_rank, G, host, H)


def _subgroup(lists: list[list[int]], mine: int) -> dist.ProcessGroup:
    # Every rank creates every subgroup, in the same order (torch requires it), and keeps its own.
    mine_group = None
    for i, ranks in enumerate(lists):
        made = dist.new_group(ranks)
        if i == mine:
            mine_group = made
    return mine_group
