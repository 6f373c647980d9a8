"""Synthetic allreduce benchmark (Dryden et al. 2016): one averaging of one square matrix.

For each side (64 .. 8192, as memory allows) and each configuration,
``--num_workers`` processes average one float32 ``side x side`` matrix through
a ``compressors.Reducer``: fp32 and fp16 over ``allreduce``, and every
compressed method over ``allgather`` and ``sra``.  Each measurement is one
warm-up, then ``--repeats`` timed averagings, each after a barrier; the time
of a repeat is the slowest rank's, and the table reports the median over
repeats, the speedup over fp32 ``allreduce`` at the same side,
``bytes_sent`` (what one rank sends, from ``StepStats``), the
``compression_ratio`` (``compressors.comm.accounting``: fp32 ring all_reduce
bytes / bytes sent) and the encode/communicate/decode split (mean over ranks,
median over repeats).

    python -m benchmarks.allreduce_bench --num_workers 2 --sides 64,128,256 --repeats 5 --json out.json

gloo on CPU by default; ``--backend nccl`` puts rank r on ``cuda:r`` and needs
``torch.cuda.device_count() >= num_workers``.  Each process uses ``--threads``
torch threads (default 1: the development machines have 2 cores).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

import compressors
from compressors.comm import accounting
from orchestrator.study import env_info
from orchestrator.study.labels import config_label
from tests.distributed import run_ranks

from . import record as record_

DEFAULT_SIDES = (64, 128, 256, 512, 1024, 2048, 4096)
MAX_SIDE = 8192

BASELINE = ("fp32", "allreduce", {})  # the speedup baseline, always measured
BASELINES = [BASELINE, ("fp16", "allreduce", {})]
COMPRESSED = [("dynamic8", {}), ("linear8", {}), ("qsgd", {"bits": 4}), ("qsgd", {"bits": 8}), ("onebit", {}),
              ("adaptive", {"pi": 0.01}), ("topk", {"pi": 0.01})]
# (compressor, algorithm, params)
METHODS = BASELINES + [(name, algo, params) for name, params in COMPRESSED for algo in ("allgather", "sra")]


def label(compressor: str, algorithm: str, params: dict[str, Any]) -> str:
    return config_label({"compressor": compressor, **params, "algorithm": algorithm}, [*params, "algorithm"])


# ---------------------------------------------------------------- machine facts


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    return {
        **env_info.describe(),
        "num_workers": args.num_workers,
        "backend": args.backend,
        "threads_per_process": args.threads,
        "repeats": args.repeats,
    }


def fits(side: int, num_workers: int, backend: str) -> bool:
    """Whether one averaging of a side x side matrix fits in memory (rough, generous)."""
    nbytes = 4 * side * side
    if backend == "nccl":
        per_rank = min(torch.cuda.get_device_properties(r).total_memory for r in range(num_workers))
        return nbytes * (6 + 2 * num_workers) < 0.8 * per_rank
    avail = env_info.mem_available_bytes()
    # input, copy, compensated value, decoded copies, gathered payloads (allgather: one per worker)
    return avail is None or nbytes * (8 + 2 * num_workers) * num_workers < 0.8 * avail


# ---------------------------------------------------------------- one rank


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure(reducer: compressors.Reducer, x: torch.Tensor, repeats: int, device: torch.device,
             num_workers: int) -> dict:
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
    rest /= num_workers
    walls, rest = walls.cpu().tolist(), rest.cpu().tolist()
    return {
        "time_s": statistics.median(walls),
        "times_s": walls,
        "encode_s": statistics.median(r[0] for r in rest),
        "comm_s": statistics.median(r[1] for r in rest),
        "decode_s": statistics.median(r[2] for r in rest),
        "bytes_sent": statistics.median(r[3] for r in rest),
    }


def _rank_main(rank: int, num_workers: int, args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    device = torch.device("cuda", rank) if args.backend == "nccl" else torch.device("cpu")
    results = []
    for side in args.sides:
        gen = torch.Generator().manual_seed(1000 * side + rank)
        x = torch.randn(side, side, generator=gen).to(device)
        for name, algo, params in args.methods:
            reducer = compressors.Reducer(name, algo, **params)
            row = {"side": side, "numel": side * side, "label": label(name, algo, params), "compressor": name,
                   "algorithm": algo, "params": params, "num_workers": num_workers}
            row.update(_measure(reducer, x, args.repeats, device, num_workers))
            results.append(row)
            if rank == 0 and not args.quiet:
                print(f"  side {side:5d} {row['label']:36s} {1e3 * row['time_s']:10.2f} ms", file=sys.stderr,
                      flush=True)
        del x
    return results


# ---------------------------------------------------------------- report


def add_speedups(rows: list[dict]) -> None:
    base_label = label(*BASELINE)
    fp32 = {r["side"]: r["time_s"] for r in rows if r["label"] == base_label}
    for r in rows:
        base = fp32.get(r["side"])
        r["speedup"] = base / r["time_s"] if base and r["time_s"] > 0 else math.nan
        r["compression_ratio"] = accounting.compression_ratio(r["numel"], r["num_workers"], r["bytes_sent"])


def format_table(rows: list[dict]) -> str:
    width = max([len("configuration")] + [len(r["label"]) for r in rows])
    head = (f"{'side':>5} {'configuration':<{width}} {'time ms':>10} {'speedup':>8} {'bytes_sent MB':>13} "
            f"{'compression_ratio':>17} {'enc ms':>9} {'comm ms':>9} {'dec ms':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['side']:>5} {r['label']:<{width}} {1e3 * r['time_s']:>10.2f} {r['speedup']:>8.2f} "
                     f"{r['bytes_sent'] / 1e6:>13.3f} {r['compression_ratio']:>17.1f} {1e3 * r['encode_s']:>9.2f} "
                     f"{1e3 * r['comm_s']:>9.2f} {1e3 * r['decode_s']:>9.2f}")
    return "\n".join(lines)


def format_speedups(rows: list[dict]) -> str:
    """One line per configuration, one column per side: speedup over fp32 allreduce."""
    sides = sorted({r["side"] for r in rows})
    by = {(r["label"], r["side"]): r for r in rows}
    labels = list(dict.fromkeys(r["label"] for r in rows))
    base = label(*BASELINE)
    width = max(len(s) for s in labels + ["speedup vs fp32 allreduce"])
    head = f"{'speedup vs fp32 allreduce':<{width}}" + "".join(f"{s:>9}" for s in sides)
    lines = [head, "-" * len(head)]
    fp32 = "".join(f"{1e3 * by[(base, s)]['time_s']:>9.2f}" if (base, s) in by else f"{'':>9}" for s in sides)
    lines.append(f"{'(fp32 time, ms)':<{width}}" + fp32)
    for m in labels:
        lines.append(f"{m:<{width}}" + "".join(f"{by[(m, s)]['speedup']:>9.2f}" if (m, s) in by else f"{'':>9}"
                                               for s in sides))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.allreduce_bench", description=__doc__.split("\n")[0])
    p.add_argument("--num_workers", type=int, default=2, help="number of processes (ranks)")
    p.add_argument("--sides", default=",".join(map(str, DEFAULT_SIDES)),
                   help=f"comma-separated matrix sides (at most {MAX_SIDE})")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    names = sorted({m[0] for m in METHODS}, key=compressors.NAMES.index)
    p.add_argument("--compressors", default=None, help=f"comma-separated subset of: {','.join(names)}")
    p.add_argument("--algorithms", default=None, help="comma-separated subset of: " + ",".join(compressors.ALGORITHMS))
    p.add_argument("--json", default=None, help="where to save the results and machine facts")
    p.add_argument("--quiet", action="store_true", help="no per-measurement progress on stderr")
    args = p.parse_args(argv)
    if args.num_workers < 2:
        p.error(f"--num_workers {args.num_workers} is invalid; valid: an int >= 2")
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
    chosen, algos = (None if text is None else record_.names(text) for text in (args.compressors, args.algorithms))
    for flag, given, valid in (("--compressors", chosen, names), ("--algorithms", algos, compressors.ALGORITHMS)):
        bad = [s for s in given or [] if s not in valid]
        if bad:
            p.error(f"{flag} {bad} are unknown; valid: {list(valid)}")
    args.methods = [BASELINE] + [m for m in METHODS if m is not BASELINE
                                 and (chosen is None or m[0] in chosen) and (algos is None or m[1] in algos)]
    if args.backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() < args.num_workers:
            p.error(f"--backend nccl needs {args.num_workers} GPUs, this machine has "
                    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    return args


def run(args: argparse.Namespace) -> list[dict]:
    skipped = [s for s in args.sides if not fits(s, args.num_workers, args.backend)]
    if skipped:
        print(f"skipping sides {skipped}: not enough memory for {args.num_workers} ranks", file=sys.stderr)
    args.sides = [s for s in args.sides if s not in skipped]
    rows = run_ranks(args.num_workers, _rank_main, args, backend=args.backend, timeout=None)[0]
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
    print(f"# allreduce benchmark: num_workers {args.num_workers}, {args.backend}, {info['cpu_model']} "
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
