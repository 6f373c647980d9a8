"""Synthetic allreduce benchmark (Dryden et al. 2016): one averaging of one square matrix.

For each side (64 .. 8192, as memory allows) and each method, N processes
average one float32 ``side x side`` matrix through a ``Reducer``: fp32
``all_reduce`` (``none``), fp16, and every compressor over ``allgather`` and
``sra``.  Each measurement is one warm-up, then ``--repeats`` timed averagings,
each after a barrier; the time of a repeat is the slowest rank's, and the
table reports the median over repeats, the speedup over fp32 ``all_reduce`` at
the same side, the bytes one rank sends (from ``StepStats``) and the
encode/communicate/decode split (mean over ranks, median over repeats).

    python -m compressors.allreduce_bench --world 2 --sides 64,128,256 --repeats 5 --json out.json

gloo on CPU by default; ``--backend nccl`` puts rank r on ``cuda:r`` and needs
``torch.cuda.device_count() >= world``.  Each process uses ``--threads`` torch
threads (default 1: the development machines have 2 cores).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import machine
from .reducer import Reducer

DEFAULT_SIDES = (64, 128, 256, 512, 1024, 2048, 4096)
MAX_SIDE = 8192

# (label, compressor, algorithm, params)
BASELINES = [("fp32", "none", "allreduce", {}), ("fp16", "fp16", "allreduce", {})]
COMPRESSORS = [("dynamic8", "dynamic8", {}), ("linear8", "linear8", {}), ("qsgd4", "qsgd", {"bits": 4}),
               ("qsgd8", "qsgd", {"bits": 8}), ("onebit", "onebit", {}), ("adaptive0.01", "adaptive", {"pi": 0.01}),
               ("topk0.01", "topk", {"pi": 0.01})]
METHODS = BASELINES + [(f"{label}/{algo}", name, algo, params)
                       for label, name, params in COMPRESSORS for algo in ("allgather", "sra")]


def method_labels() -> list[str]:
    return [m[0] for m in METHODS]


# ---------------------------------------------------------------- machine facts


def mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    info = {
        **machine.describe(),
        "world": args.world,
        "backend": args.backend,
        "threads_per_process": args.threads,
        "repeats": args.repeats,
    }
    return info


def fits(side: int, world: int, backend: str) -> bool:
    """Whether one averaging of a side x side matrix fits in memory (rough, generous)."""
    nbytes = 4 * side * side
    if backend == "nccl":
        per_rank = min(torch.cuda.get_device_properties(r).total_memory for r in range(world))
        return nbytes * (6 + 2 * world) < 0.8 * per_rank
    avail = mem_available_bytes()
    # input, copy, compensated value, decoded copies, gathered payloads (allgather: world of them)
    return avail is None or nbytes * (8 + 2 * world) * world < 0.8 * avail


# ---------------------------------------------------------------- one rank


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure(reducer: Reducer, x: torch.Tensor, repeats: int, device: torch.device, world: int) -> dict:
    """Warm-up, then ``repeats`` timed averagings; per-repeat times reduced over ranks."""
    reducer.average([x.clone()])
    rows = []
    for _ in range(repeats):
        t = x.clone()
        _sync(device)
        dist.barrier()
        start = time.perf_counter()
        stats = reducer.average([t])
        _sync(device)
        wall = time.perf_counter() - start
        rows.append([wall, stats.encode_s, stats.comm_s, stats.decode_s, stats.bytes_sent])
    local = torch.tensor(rows, dtype=torch.float64, device=device)
    walls = local[:, 0].clone()
    dist.all_reduce(walls, op=dist.ReduceOp.MAX)
    rest = local[:, 1:].clone()
    dist.all_reduce(rest, op=dist.ReduceOp.SUM)
    rest /= world
    walls, rest = walls.cpu().tolist(), rest.cpu().tolist()
    return {
        "time_s": statistics.median(walls),
        "times_s": walls,
        "encode_s": statistics.median(r[0] for r in rest),
        "comm_s": statistics.median(r[1] for r in rest),
        "decode_s": statistics.median(r[2] for r in rest),
        "bytes_per_rank": statistics.median(r[3] for r in rest),
    }


def _rank_main(rank: int, world: int, port: int, args: argparse.Namespace, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    results = []
    try:
        methods = [m for m in METHODS if m[0] in args.methods]
        for side in args.sides:
            gen = torch.Generator().manual_seed(1000 * side + rank)
            x = torch.randn(side, side, generator=gen).to(device)
            for label, name, algo, params in methods:
                reducer = Reducer(name, algo, **params)
                row = {"side": side, "numel": side * side, "method": label, "compressor": name,
                       "algorithm": algo, "params": params}
                row.update(_measure(reducer, x, args.repeats, device, world))
                results.append(row)
                if rank == 0 and not args.quiet:
                    print(f"  side {side:5d} {label:22s} {1e3 * row['time_s']:10.2f} ms", file=sys.stderr, flush=True)
            del x
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- report


def add_speedups(rows: list[dict]) -> None:
    fp32 = {r["side"]: r["time_s"] for r in rows if r["method"] == "fp32"}
    for r in rows:
        base = fp32.get(r["side"])
        r["speedup"] = base / r["time_s"] if base and r["time_s"] > 0 else math.nan
        fp32_bytes = 2.0 * (r["world"] - 1) / r["world"] * 4 * r["numel"]
        r["compression_ratio"] = fp32_bytes / r["bytes_per_rank"] if r["bytes_per_rank"] else math.nan


def format_table(rows: list[dict]) -> str:
    head = (f"{'side':>5} {'method':<22} {'time ms':>10} {'speedup':>8} {'MB/rank':>9} {'ratio':>6} "
            f"{'enc ms':>9} {'comm ms':>9} {'dec ms':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['side']:>5} {r['method']:<22} {1e3 * r['time_s']:>10.2f} {r['speedup']:>8.2f} "
                     f"{r['bytes_per_rank'] / 1e6:>9.3f} {r['compression_ratio']:>6.1f} {1e3 * r['encode_s']:>9.2f} "
                     f"{1e3 * r['comm_s']:>9.2f} {1e3 * r['decode_s']:>9.2f}")
    return "\n".join(lines)


def format_speedups(rows: list[dict]) -> str:
    """One line per method, one column per side: speedup over fp32 all_reduce."""
    sides = sorted({r["side"] for r in rows})
    by = {(r["method"], r["side"]): r for r in rows}
    methods = [m for m in method_labels() if any((m, s) in by for s in sides)]
    head = f"{'speedup vs fp32':<22}" + "".join(f"{s:>9}" for s in sides)
    lines = [head, "-" * len(head)]
    fp32 = "".join(f"{1e3 * by[('fp32', s)]['time_s']:>9.2f}" if ("fp32", s) in by else f"{'':>9}" for s in sides)
    lines.append(f"{'(fp32 time, ms)':<22}" + fp32)
    for m in methods:
        lines.append(f"{m:<22}" + "".join(f"{by[(m, s)]['speedup']:>9.2f}" if (m, s) in by else f"{'':>9}"
                                          for s in sides))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m compressors.allreduce_bench", description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2, help="number of processes (ranks)")
    p.add_argument("--sides", default=",".join(map(str, DEFAULT_SIDES)),
                   help=f"comma-separated matrix sides (at most {MAX_SIDE})")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--methods", default=None, help=f"comma-separated subset of: {','.join(method_labels())}")
    p.add_argument("--json", default=None, help="where to save the results and machine facts")
    p.add_argument("--quiet", action="store_true", help="no per-measurement progress on stderr")
    args = p.parse_args(argv)
    if args.world < 2:
        p.error(f"--world {args.world} is invalid; valid: an int >= 2")
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats} is invalid; valid: an int >= 1")
    if args.threads < 1:
        p.error(f"--threads {args.threads} is invalid; valid: an int >= 1")
    try:
        args.sides = [int(s) for s in args.sides.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sides {args.sides!r} is invalid; valid: comma-separated ints in [1, {MAX_SIDE}]")
    if not args.sides or any(not 1 <= s <= MAX_SIDE for s in args.sides):
        p.error(f"--sides {args.sides} is invalid; valid: comma-separated ints in [1, {MAX_SIDE}]")
    labels = method_labels()
    if args.methods is None:
        args.methods = labels
    else:
        args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        bad = [m for m in args.methods if m not in labels]
        if bad:
            p.error(f"--methods {bad} are unknown; valid: {labels}")
        if "fp32" not in args.methods:
            args.methods.insert(0, "fp32")  # the speedup baseline
    if args.backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() < args.world:
            p.error(f"--backend nccl needs {args.world} GPUs, this machine has "
                    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> list[dict]:
    skipped = [s for s in args.sides if not fits(s, args.world, args.backend)]
    if skipped:
        print(f"skipping sides {skipped}: not enough memory for {args.world} ranks", file=sys.stderr)
    args.sides = [s for s in args.sides if s not in skipped]
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "rows.json")
        ctx = mp.get_context("spawn")
        port = _free_port()
        procs = [ctx.Process(target=_rank_main, args=(r, args.world, port, args, out_path)) for r in range(args.world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        failed = [r for r, proc in enumerate(procs) if proc.exitcode != 0]
        if failed:
            raise RuntimeError(f"ranks {failed} failed (exit codes {[procs[r].exitcode for r in failed]})")
        with open(out_path) as f:
            rows = json.load(f)
    for r in rows:
        r["world"] = args.world
    add_speedups(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine_info(args)  # dated at the start
    start = time.time()
    rows = run(args)
    info["wall_s"] = round(time.time() - start, 1)
    if hasattr(os, "getloadavg"):  # other work on a shared machine disturbs the timings
        info["loadavg_1_5_15_at_end"] = [round(v, 2) for v in os.getloadavg()]
    print(f"# allreduce benchmark: world {args.world}, {args.backend}, {info['cpu_model']} "
          f"({info['cpu_count']} cores), torch {info['torch']}, {args.threads} thread(s)/rank, "
          f"median of {args.repeats} after a warm-up, {info['date']}")
    print(format_table(rows))
    print()
    print(format_speedups(rows))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=1)
        print(f"\nsaved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
