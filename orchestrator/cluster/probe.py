"""The links of a real cluster as its collectives see them (``lowprec cluster probe``): all_reduce and
all_gather between its nodes, timed with the trial's backend, as nccl-tests reports them.

One Ray actor per node (a STRICT_SPREAD placement group: every message crosses between nodes), joined in
one torch.distributed group. For each size, after a warm-up, each repeat is timed on every rank and the
slowest rank's time taken (the collective ends when its last rank does); the figure is the median repeat.
With n ranks, an all_reduce of M bytes in t seconds has the algorithm bandwidth M / t and the bus bandwidth
M / t x 2(n-1)/n (what each rank's link carried each way: the B of the performance model's ring,
orchestrator.predict.perfmodel); an all_gather of S bytes a rank, n S / t and n S / t x (n-1)/n. The
latency per message is the model's alpha: the median all_reduce of one float over the 2(n-1) messages a
ring sends in turn.

``lowprec predict --link FILE`` takes the largest all_reduce's bus bandwidth and that latency in place of
``--bandwidth`` and ``--latency``: the file's ``bandwidth_bps`` and ``latency_s`` (orchestrator.predict.link reads
them).
"""
from __future__ import annotations

import datetime
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")
DEFAULT_SIZES = (1 << 20, 16 << 20, 64 << 20)  # bytes a rank
LATENCY_REPEATS = 21
_TIMEOUT_S = 300.0  # the whole probe: Ray's placement, the group's rendezvous, every collective


def bus_bandwidth(op: str, nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in bytes/s of ``op`` (all_reduce: ``nbytes`` the buffer; all_gather:
    ``nbytes`` each rank's part) taking ``seconds`` over ``world`` ranks, as nccl-tests defines them."""
    if op == "all_reduce":
        algbw = nbytes / seconds
        return algbw, algbw * 2 * (world - 1) / world
    algbw = world * nbytes / seconds
    return algbw, algbw * (world - 1) / world


def _timed(op: str, nbytes: int, repeats: int, device: torch.device, world: int) -> float:
    """The median over ``repeats`` of the slowest rank's time of one ``op`` (after a warm-up)."""
    numel = max(1, nbytes // 4)
    x = torch.ones(numel, device=device)
    out = [torch.empty_like(x) for _ in range(world)] if op == "all_gather" else None

    def once() -> None:
        if op == "all_reduce":
            dist.all_reduce(x)
        else:
            dist.all_gather(out, x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    once()
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.median(slowest.tolist())


def measure(sizes: tuple[int, ...], repeats: int, device: torch.device) -> dict[str, Any]:
    """Every size of all_reduce and all_gather on the initialised group, and the latency per message: the
    same figures on every rank."""
    world = dist.get_world_size()
    found: dict[str, Any] = {"world_size": world, "all_reduce": [], "all_gather": []}
    for op in ("all_reduce", "all_gather"):
        for nbytes in sizes:
            seconds = _timed(op, nbytes, repeats, device, world)
            algbw, busbw = bus_bandwidth(op, nbytes, seconds, world)
            found[op].append({"bytes": nbytes, "time_s": seconds, "algbw_Bps": algbw, "busbw_Bps": busbw})
    one = _timed("all_reduce", 4, LATENCY_REPEATS, device, world)
    found["latency_s"] = one / (2 * (world - 1))
    found["bandwidth_bps"] = 8 * max(found["all_reduce"], key=lambda r: r["bytes"])["busbw_Bps"]
    return found


class _Prober:
    """A Ray actor on one node: its address for the rendezvous, then its part of the probe."""

    def address(self) -> tuple[str, int]:
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def run(self, host: str, port: int, rank: int, world: int, backend: str, sizes: tuple[int, ...],
            repeats: int) -> dict[str, Any]:
        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=_TIMEOUT_S))
        try:
            found = measure(sizes, repeats, device)
        finally:
            dist.destroy_process_group()
        import ray

        return {**found, "node": ray.util.get_node_ip_address()}  # namespaces of one machine share a hostname


def probe(address: str | None, nodes: int | None, backend: str, sizes: tuple[int, ...] = DEFAULT_SIZES,
          repeats: int = 5) -> dict[str, Any]:
    """Probe the Ray cluster at ``address`` with one rank on each of ``nodes`` nodes (None: every live node);
    ValueError, one line, where it has fewer than two (or fewer than asked), or no GPU on each for nccl."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=address, log_to_driver=False)
    try:
        alive = [n for n in ray.nodes() if n["Alive"]]
        n = len(alive) if nodes is None else nodes
        if n < 2 or n > len(alive):
            raise ValueError(f"--nodes must be in [2, {len(alive)}] (the cluster's live nodes), got {n}")
        need = {"GPU": 1} if backend == "nccl" else {"CPU": 1}
        group = placement_group([need] * n, strategy="STRICT_SPREAD")
        if not group.wait(timeout_seconds=60):
            raise ValueError(f"the cluster cannot place one rank with {need} on each of {n} nodes")
        try:
            actor = ray.remote(num_gpus=need.get("GPU", 0), num_cpus=need.get("CPU", 0))(_Prober)
            ranks = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
                     for i in range(n)]
            host, port = ray.get(ranks[0].address.remote(), timeout=60)
            found = ray.get([r.run.remote(host, port, i, n, backend, sizes, repeats) for i, r in enumerate(ranks)],
                            timeout=_TIMEOUT_S)
        finally:
            remove_placement_group(group)
    finally:
        ray.shutdown()
    nodes_seen = sorted({f["node"] for f in found})
    return {**{k: v for k, v in found[0].items() if k != "node"}, "backend": backend, "nodes": nodes_seen,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
