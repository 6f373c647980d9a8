"""Link calibration of an emulated cluster: a timed gloo all_reduce between hosts 0 and 1.

``calibrate(network, rates)`` starts one process per host inside its namespace
(``python -m orchestrator.cluster.calibrate``; they meet through a FileStore in a
temporary folder, so no port needs to be known in advance). For each rate in
turn rank 0 shapes every link (None: removes the limits), then both time a ring
all_reduce of fp32 ones; the result is what went over each link per second:
ring all_reduce sends 2(p-1)/p of the buffer each way per rank, the buffer's
full size with two hosts. That is TCP goodput: with a 1500-byte MTU at most
1448/1514 = 0.956 of the rate tbf is given.

The buffer takes about half a second at the requested rate, at least 1 MiB
but never more than 2 s at the rate (a few bytes to 64 MiB), so a calibration
ends within seconds from 8kbit to 100gbit. The warm-up all_reduce before the
repeats also carries the links' tbf burst, which passes at the veths' own
speed: the repeats then start with the token buckets empty and show the rate
however small the buffer is against the burst. The figure is the median of the
repeats, each timed on the slower rank. Then the latency per message (the performance
model's alpha, orchestrator.predict.perfmodel): the median of timed all_reduces of one
float, which with two ranks are two messages in turn, halved.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compressors.core.params import rate_bps

from .netns import Network, burst_bytes

MIB = 1024**2
_SECONDS = 0.5  # a transfer this long at the requested rate shows the shaping, not the start-up
_MAX_SECONDS = 2.0  # the longest transfer at a low rate (1 MiB at 8kbit would take 17 minutes)
_BYTES_RANGE = (1 * MIB, 64 * MIB)
_TIMEOUT_S = 120.0
_LATENCY_REPEATS = 21


def buffer_bytes(rate: str | None) -> int:
    """All_reduce size for a calibration at ``rate`` (None: unshaped, the largest)."""
    if rate is None:
        return _BYTES_RANGE[1]
    per_second = rate_bps(rate) / 8
    wanted = max(per_second * _SECONDS, min(_BYTES_RANGE[0], per_second * _MAX_SECONDS))
    return max(4, min(_BYTES_RANGE[1], int(wanted) // 4 * 4))


def warm_up_bytes(rate: str | None) -> int:
    """The warm-up all_reduce's size: the buffer and, on shaped links, the tbf burst it empties."""
    return buffer_bytes(rate) + (burst_bytes(rate) // 4 * 4 if rate is not None else 0)


def calibrate(network: Network, rates: list[str | None], repeats: int = 3) -> list[dict[str, Any]]:
    """Shape ``network`` at each of ``rates`` in turn (None: unshaped) and time an all_reduce between its
    hosts 0 and 1; the links stay shaped at the last rate.

    Returns per rate ``{"rate", "measured_bps", "fraction" (of the rate; absent unshaped), "bytes",
    "median_s", "times_s", "repeats", "latency_s"}``; RuntimeError with the ranks' last words when they fail (the
    links' rate is then unknown: shape them again).
    """
    if network.hosts < 2:
        raise ValueError("calibration needs two hosts")
    package_root = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="lowprec-calibrate-") as folder:
        store = os.path.join(folder, "store")
        ranks = []
        for rank in range(2):
            argv = [sys.executable, "-m", "orchestrator.cluster.calibrate", "--store", store, "--rank", str(rank),
                    "--rates", ",".join(rate or "none" for rate in rates), "--repeats", str(repeats),
                    "--prefix", network.prefix, "--subnet", network.subnet, "--hosts", str(network.hosts)]
            child_env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
                         "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
            ranks.append(subprocess.Popen(network.command(rank, argv, child_env), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        outputs = []
        deadline = time.monotonic() + _TIMEOUT_S
        try:
            for process in ranks:
                outputs.append(process.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            outputs = [("", f"timed out after {_TIMEOUT_S:g} s")] * 2
        finally:
            for process in ranks:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    if any(p.returncode != 0 for p in ranks):
        detail = "; ".join(f"rank {r}: {err.strip().splitlines()[-1] if err.strip() else p.returncode}"
                           for r, (p, (_, err)) in enumerate(zip(ranks, outputs)))
        raise RuntimeError(f"link calibration between {network.host(0)} and {network.host(1)} failed: {detail}")
    results = json.loads(outputs[0][0].strip().splitlines()[-1])
    for result in results:
        if result["rate"] is not None:
            result["fraction"] = result["measured_bps"] / rate_bps(result["rate"])
    return results


def _measure(network: Network, store: str, rank: int, rates: list[str | None],
             repeats: int) -> list[dict[str, Any]] | None:
    """One rank of the calibration; rank 0 shapes the links and returns the figures."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=_TIMEOUT_S))
    results = []
    try:
        for rate in rates:
            if rank == 0:
                network.shape(rate) if rate is not None else network.unshape()
            nbytes = buffer_bytes(rate)
            # warm-up: gloo's connections and buffers, the new qdiscs' full token buckets
            dist.all_reduce(torch.ones(warm_up_bytes(rate) // 4, dtype=torch.float32))
            buffer = torch.ones(nbytes // 4, dtype=torch.float32)
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(buffer)
                times.append(time.perf_counter() - start)
            slowest = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            times = slowest.tolist()
            median = statistics.median(times)
            one, small = torch.ones(1), []
            for _ in range(_LATENCY_REPEATS):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(one)
                small.append(time.perf_counter() - start)
            # 2(p-1)/p of the buffer goes each way per rank: all of it with p = 2
            results.append({"rate": rate, "measured_bps": nbytes * 8 / median, "bytes": nbytes,
                            "median_s": median, "times_s": times, "repeats": repeats,
                            "latency_s": statistics.median(small) / 2})
    finally:
        dist.destroy_process_group()
    return results if rank == 0 else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one rank of a link calibration (run by calibrate())")
    parser.add_argument("--store", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--rates", required=True, help="comma-separated; none: unshaped")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--subnet", required=True)
    parser.add_argument("--hosts", type=int, required=True)
    args = parser.parse_args(argv)
    network = Network(args.prefix, args.subnet, args.hosts)
    rates = [None if rate == "none" else rate for rate in args.rates.split(",")]
    figures = _measure(network, args.store, args.rank, rates, args.repeats)
    if figures is not None:
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
