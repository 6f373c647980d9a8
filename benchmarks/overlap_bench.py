"""Overlap benchmark: DDP step time with communication overlapped with backward, and without.

``--num_workers`` processes train an MLP (784 -> width x depth -> 10, random
data) with DDP for ``--steps`` steps after ``--warmup`` untimed ones, per
configuration:

- ``fp32 plain``: DDP with no hook, its own bucketed all_reduce (what users run);
- fp32, and each ``--compressors`` entry, through our hook with ``overlap`` on and off.

A step is timed from the forward to the end of the optimizer step, after a
barrier; its time is the slowest rank's. ``compute`` and ``exposed comm`` come
from ``compressors.ddp.step_clock`` (median over steps, max over ranks). The table
gives medians and the ratio of each configuration's step time to ``fp32 plain``
in the same run. Configurations are measured in rounds (``--rounds``), each
round running every configuration once in turn, so that drift of a noisy
machine falls on all of them; the table takes the median over rounds.

    python -m benchmarks.overlap_bench --num_workers 2 --width 1024 --depth 3 --rounds 3 --json out.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from compressors import ddp
from compressors.ddp.step_clock import StepClock
from orchestrator.study import env_info

from tests.distributed import run_ranks

# (label, compressor, params, overlap); compressor None: plain DDP, no hook
PLAIN = ("fp32 plain", None, {}, True)


def configurations(names: list[str]) -> list[tuple[str, str | None, dict, bool]]:
    out = [PLAIN]
    for spec in ["fp32", *names]:
        name, _, bits = spec.partition(":")
        params = {"bits": int(bits)} if bits else {}
        for overlap in (True, False):
            out.append((f"{spec} overlap={'on' if overlap else 'off'}", name, params, overlap))
    return out


def _model(width: int, depth: int) -> torch.nn.Module:
    torch.manual_seed(0)
    layers, d = [], 784
    for _ in range(depth):
        layers += [torch.nn.Linear(d, width), torch.nn.ReLU()]
        d = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(d, 10))


def _measure(rank: int, world: int, config: tuple, args: argparse.Namespace) -> dict[str, list[float]]:
    _, compressor, params, overlap = config
    model = _model(args.width, args.depth)
    ddp_model = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    clock = StepClock(model)
    if compressor is not None:
        switch = ddp.HookSwitch(ddp.comm_hook(compressor, overlap=overlap, **params), clock)
        switch.register(ddp_model, [switch.active])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch_size, 784, generator=gen), torch.randint(0, 10, (args.batch_size,), generator=gen)
    steps, exposed = [], []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        clock.start()
        opt.zero_grad()
        F.cross_entropy(ddp_model(x), y).backward()
        exposed.append(clock.exposed_s(time.perf_counter()))
        opt.step()
        steps.append(time.perf_counter() - start)
    clock.remove()
    steps, exposed = steps[args.warmup:], exposed[args.warmup:]
    # the slowest rank's step, step by step
    t = torch.tensor([steps, exposed], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {"step_s": t[0].tolist(), "exposed_comm_s": t[1].tolist(),
            "compute_s": [s - e for s, e in zip(steps, exposed)]}


def _rank_main(rank: int, world: int, args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    configs = configurations(args.compressors)
    rows = []
    for r in range(args.rounds):
        for config in configs:
            m = _measure(rank, world, config, args)
            rows.append({"round": r, "label": config[0], "step_s": statistics.median(m["step_s"]),
                         "compute_s": statistics.median(m["compute_s"]),
                         "exposed_comm_s": statistics.median(m["exposed_comm_s"])})
            if rank == 0 and not args.quiet:
                print(f"round {r} {config[0]}: {rows[-1]['step_s'] * 1000:.1f} ms", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> list[dict]:
    """Median over rounds per configuration, and the ratio to fp32 plain's step time in each round."""
    plain = {r["round"]: r["step_s"] for r in rows if r["label"] == PLAIN[0]}
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        out.append({"label": label, "rounds": len(mine),
                    **{k: statistics.median(r[k] for r in mine) for k in ("step_s", "compute_s", "exposed_comm_s")},
                    "vs_fp32_plain": statistics.median(plain[r["round"]] / r["step_s"] for r in mine)})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overlap_bench", description=__doc__.split("\n")[0])
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--bucket_cap_mb", type=float, default=None, help="DDP's bucket size (default: DDP's)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--compressors", default="qsgd:4",
                   help="comma-separated compressor[:bits] measured beside fp32 (default qsgd:4)")
    p.add_argument("--json", default=None)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.compressors = [c for c in args.compressors.split(",") if c]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = run_ranks(args.num_workers, _rank_main, args, timeout=None)[0]
    summary = table(rows)
    print(f"{'configuration':<24} {'step ms':>8} {'compute ms':>10} {'exposed ms':>10} {'fp32 plain / this':>17}")
    for r in summary:
        print(f"{r['label']:<24} {r['step_s'] * 1000:>8.1f} {r['compute_s'] * 1000:>10.1f} "
              f"{r['exposed_comm_s'] * 1000:>10.1f} {r['vs_fp32_plain']:>17.2f}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": env_info.describe(), "args": vars(args), "rounds": rows, "table": summary}, f, indent=1)
        print(f"\nsaved {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
