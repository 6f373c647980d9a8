"""Link benchmark: gloo collectives between emulated hosts, as a fraction of the link rate.

The hosts are network namespaces ``<prefix>-h0 .. <prefix>-h{N-1}`` with
addresses ``<subnet>.1 .. <subnet>.N`` on shaped links (set up beforehand, as
root, e.g. ``lowprec cluster up --no_ray``). One rank
runs in each namespace (``ip netns exec``, gloo on ``eth0``), and times, per
size:

- ``all_reduce`` of fp32 (gloo's ring, which moves small segments: the reference);
- ``all_to_all_single`` and ``all_gather`` of uint8: ``collective`` (one gloo
  call), ``pieces16`` (the same bytes as 16 async collectives issued back to
  back) and ``exchange`` (``compressors.comm.exchange``: point-to-point, every
  receive posted first; what the compressed collectives use on gloo above
  ``MIN_EXCHANGE_BYTES``);
- the programs themselves with the ``fp32`` codec (a payload of the size):
  ``sra`` (its all_to_all and all_gather phases) and ``allgather``, with the
  exchange switched off (``collective``) and on (``exchange``), timed from
  their ``StepStats.comm_spans``.

The all_to_all moves a buffer of the size (``(N-1)/N`` of it leaves each rank),
the all_gather a part of the size from each rank (``N-1`` parts leave each
rank), as the ``allgather`` program does with its payload; ``sra``'s
all_gather moves ``1/N`` of its payload per rank.
Every variant's output is checked equal to the collective's, byte for byte.
A time is the collective's once every rank has started it: the latest end
minus the latest start over the ranks (one clock: the namespaces share the
machine). Configurations are measured in rounds (``--repeats``), each round
running every one once, after one warm-up round; the table gives the median
over rounds, the ideal time (the bytes a rank sends at the link's TCP goodput,
``rate x 1448/1514`` for 1500-byte frames) and their ratio, the fraction of
the link rate.

    lowprec cluster up --hosts 2 --bandwidth 1gbit --no_ray --prefix ck --subnet 198.18.9
    python -m benchmarks.link_bench --prefix ck --subnet 198.18.9 --hosts 2 --rate 1gbit --sizes_mb 8 \\
        --repeats 5 --json benchmarks/results/link/link_h2.json
    lowprec cluster down --prefix ck

Root needed (``ip netns exec``). Each rank uses one torch thread.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import compressors
from compressors.comm import collectives, exchange, pipeline
from orchestrator.study import env_info

MB = 2**20
PIECES = 16  # the piece count that reached the link rate in the first measurements (16 async collectives)
FRAME_GOODPUT = 1448 / 1514  # TCP payload per Ethernet frame at MTU 1500 (timestamps on)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_rate(text: str) -> float:
    """``1gbit``, ``100mbit``, ``500kbit``, ``2.5gbit`` -> bits per second (tc's units)."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)([kmg]?)bit", text.strip().lower())
    if not m:
        raise ValueError(f"rate {text!r} is invalid; valid: a number and kbit, mbit or gbit, e.g. 1gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def ideal_s(nbytes: float, rate_bps: float) -> float:
    """Seconds to send ``nbytes`` of TCP payload over a link of ``rate_bps``."""
    return nbytes * 8 / (rate_bps * FRAME_GOODPUT)


def spans(n: int, k: int) -> list[tuple[int, int]]:
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


# ---------------------------------------------------------------- one rank


def _timed(fn):
    """``fn`` timed around the call: (its output, [(start, end)])."""
    def run():
        start = time.perf_counter()
        out = fn()
        return out, [(start, time.perf_counter())]
    return run


def _wait_all(works: list) -> None:
    for work in works:
        work.wait()


def _cases(size: int, rank: int, world: int) -> list[dict]:
    """What to run, once per round: ``run()`` gives (output, one (start, end) span per row), ``rows`` the
    (collective, variant, bytes this rank sends) of those spans; outputs of one ``key`` must be equal."""
    gen = torch.Generator().manual_seed(rank)
    blk = size // world  # all_to_all: blk bytes to each rank
    a_in = torch.randint(0, 256, (blk * world,), dtype=torch.uint8, generator=gen)
    g_in = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen)  # all_gather: this rank's part
    g_n = g_in.numel()
    ar = torch.randn(size // 4, generator=gen)
    splits = [blk] * world
    pieces = f"pieces{PIECES}"

    def a2a(variant):
        out = torch.empty_like(a_in)
        if variant == "collective":
            dist.all_to_all_single(out, a_in)
        elif variant == pieces:
            _wait_all([dist.all_to_all([out[r * blk + lo:r * blk + hi] for r in range(world)],
                                       [a_in[r * blk + lo:r * blk + hi] for r in range(world)], async_op=True)
                       for lo, hi in spans(blk, PIECES)])
        else:
            exchange.all_to_all(out, splits, a_in, splits, None).wait()
        return out

    def ag(variant):
        out = torch.empty(world * g_n, dtype=torch.uint8)
        if variant == "collective":
            collectives._all_gather(out, g_in)
        elif variant == pieces:
            _wait_all([dist.all_gather([out[r * g_n + lo:r * g_n + hi] for r in range(world)], g_in[lo:hi],
                                       async_op=True) for lo, hi in spans(g_n, PIECES)])
        else:
            exchange.all_gather(out, g_in, None).wait()
        return out

    def allreduce():
        t = ar.clone()
        dist.all_reduce(t)
        return t

    cases = [{"key": "all_reduce", "run": _timed(allreduce),
              "rows": [("all_reduce fp32", "collective", 2 * (world - 1) / world * ar.numel() * 4)]}]
    for variant in ("collective", pieces, "exchange"):
        cases.append({"key": "all_to_all", "run": _timed(lambda v=variant: a2a(v)),
                      "rows": [("all_to_all_single", variant, (world - 1) * blk)]})
    for variant in ("collective", pieces, "exchange"):
        cases.append({"key": "all_gather", "run": _timed(lambda v=variant: ag(v)),
                      "rows": [("all_gather", variant, (world - 1) * g_n)]})

    # The programs on an fp32 payload of about ``size`` bytes: a (rows, 1024) tensor.
    codec = compressors.get("fp32")
    shape = (max(world, size // 4 // 1024), 1024)
    x = torch.randn(shape, generator=gen)
    chunk_bytes = [codec.payload_nbytes((stop - start, shape[1]))
                   for start, stop in collectives.split(shape, world, 0)]
    sra_bytes = [sum(n for r, n in enumerate(chunk_bytes) if r != rank), (world - 1) * max(chunk_bytes)]
    ag_bytes = (world - 1) * codec.payload_nbytes(shape)

    def program(algo, threshold):
        t = x.clone()
        exchange.MIN_EXCHANGE_BYTES = threshold
        try:
            if algo == "sra":
                stats = pipeline.run(collectives.sra_compressed([t], [0], codec, None, None, 0, (None, None)))
            else:
                stats = pipeline.run(collectives.allgather_compressed([t], [0], codec, None, 0, (None, None)))
        finally:
            exchange.MIN_EXCHANGE_BYTES = DEFAULT_MIN_EXCHANGE_BYTES
        expected = sum(sra_bytes) if algo == "sra" else ag_bytes
        if stats.bytes_sent != expected:
            raise RuntimeError(f"{algo}: bytes_sent {stats.bytes_sent}, {expected} expected")
        return t, stats.comm_spans

    for variant, threshold in (("collective", 1 << 62), ("exchange", DEFAULT_MIN_EXCHANGE_BYTES)):
        cases.append({"key": "sra", "run": lambda th=threshold: program("sra", th),
                      "rows": [("sra: all_to_all", variant, sra_bytes[0]),
                               ("sra: all_gather", variant, sra_bytes[1])]})
        cases.append({"key": "allgather", "run": lambda th=threshold: program("allgather", th),
                      "rows": [("allgather: all_gather", variant, ag_bytes)]})
    return cases


DEFAULT_MIN_EXCHANGE_BYTES = exchange.MIN_EXCHANGE_BYTES


def _rank_main(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for size_mb in args.sizes_mb:
        cases = _cases(int(size_mb * MB) // world * world, rank, world)
        spans_of: list[list] = [[] for _ in cases]
        same = [True] * len(cases)
        for round_ in range(args.repeats + 1):  # round 0 warms up (connections, buffers)
            first: dict[str, torch.Tensor] = {}
            for i, case in enumerate(cases):
                dist.barrier()
                out, case_spans = case["run"]()
                reference = first.setdefault(case["key"], out)
                same[i] = same[i] and torch.equal(out, reference)
                if round_:
                    spans_of[i].append(case_spans)
        # Per row and round: the latest end minus the latest start over the ranks.
        for i, case in enumerate(cases):
            t = torch.tensor(spans_of[i], dtype=torch.float64)  # (rounds, rows, 2)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            ok = torch.tensor([int(same[i])])
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            for j, (collective, variant, nbytes) in enumerate(case["rows"]):
                times = (t[:, j, 1] - t[:, j, 0]).tolist()
                rows.append({"collective": collective, "variant": variant, "size_mb": size_mb, "hosts": world,
                             "bytes_sent": nbytes, "times_s": times, "time_s": statistics.median(times),
                             "same_output": bool(ok.item())})
    if rank == 0:
        with open(args.worker, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------- launching the ranks


def launch(args: argparse.Namespace) -> list[dict]:
    """One rank per namespace; rank 0's rows. Ranks still running at ``--timeout`` are killed (by PID)."""
    with tempfile.TemporaryDirectory(prefix="link_bench-") as tmp, contextlib.ExitStack() as logs:
        out = os.path.join(tmp, "rows.json")
        worker_args = ["--sizes_mb", ",".join(str(s) for s in args.sizes_mb), "--repeats", str(args.repeats),
                       "--timeout", str(args.timeout), "--worker", out]
        procs = []
        for i in range(args.hosts):
            env = [f"GLOO_SOCKET_IFNAME={args.ifname}", f"RANK={i}", f"WORLD_SIZE={args.hosts}",
                   f"MASTER_ADDR={args.subnet}.1", f"MASTER_PORT={args.port}", "OMP_NUM_THREADS=1",
                   f"PYTHONPATH={REPO}"]
            cmd = ["ip", "netns", "exec", f"{args.prefix}-h{i}", "env", *env, sys.executable, "-m",
                   "benchmarks.link_bench", *worker_args]
            log = logs.enter_context(open(os.path.join(tmp, f"rank{i}.log"), "w+"))
            procs.append((subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT), log))
        deadline = time.monotonic() + args.timeout
        failed = []
        for i, (proc, log) in enumerate(procs):
            try:
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                log.seek(0)
                failed.append(f"rank {i} (exit {code}):\n" + "".join(log.readlines()[-15:]))
        if failed:
            raise RuntimeError("link benchmark ranks failed:\n" + "\n".join(failed))
        with open(out) as f:
            return json.load(f)


# ---------------------------------------------------------------- report


def add_ideal(rows: list[dict], rate_bps: float) -> None:
    for r in rows:
        r["ideal_s"] = ideal_s(r["bytes_sent"], rate_bps)
        r["fraction"] = r["ideal_s"] / r["time_s"] if r["time_s"] > 0 else float("nan")


def format_table(rows: list[dict]) -> str:
    width = max(len("collective"), *(len(r["collective"]) for r in rows))
    head = (f"{'collective':<{width}} {'variant':<10} {'MB':>6} {'median s':>9} {'ideal s':>8} {'fraction':>8}"
            f"  {'fractions per round':<s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        each = " ".join(f"{r['ideal_s'] / t:.2f}" for t in r["times_s"])
        flag = "" if r["same_output"] else "  OUTPUT DIFFERS"
        lines.append(f"{r['collective']:<{width}} {r['variant']:<10} {r['size_mb']:>6g} {r['time_s']:>9.4f} "
                     f"{r['ideal_s']:>8.4f} {r['fraction']:>8.2f}  {each}{flag}")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.link_bench", description=__doc__.split("\n")[0])
    p.add_argument("--prefix", default="lp", help="namespaces are <prefix>-h0 .. <prefix>-h{hosts-1}")
    p.add_argument("--subnet", default="198.18.0", help="host i has address <subnet>.(i+1)")
    p.add_argument("--hosts", type=int, default=2, help="number of hosts (ranks)")
    p.add_argument("--rate", default="1gbit", help="the links' rate (tc units: 100mbit, 1gbit), for the ideal")
    p.add_argument("--sizes_mb", default="8", help="comma-separated sizes in MiB (2**20 bytes)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds after one warm-up round")
    p.add_argument("--port", type=int, default=29555, help="MASTER_PORT on host 0")
    p.add_argument("--ifname", default="eth0", help="the hosts' interface (GLOO_SOCKET_IFNAME)")
    p.add_argument("--timeout", type=int, default=600, help="seconds before the ranks are given up")
    p.add_argument("--json", default=None, help="where to save the results and machine facts")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # a rank: where rank 0 writes its rows
    args = p.parse_args(argv)
    if args.hosts < 2:
        p.error(f"--hosts {args.hosts} is invalid; valid: an int >= 2")
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats} is invalid; valid: an int >= 1")
    try:
        args.rate_bps = parse_rate(args.rate)
    except ValueError as e:
        p.error(str(e))
    try:
        args.sizes_mb = [float(s) for s in args.sizes_mb.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes_mb {args.sizes_mb!r} is invalid; valid: comma-separated positive numbers")
    if not args.sizes_mb or any(s <= 0 for s in args.sizes_mb):
        p.error(f"--sizes_mb {args.sizes_mb} is invalid; valid: comma-separated positive numbers")
    if not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,3}", args.subnet):
        p.error(f"--subnet {args.subnet!r} is invalid; valid: three octets, e.g. 198.18.9")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        _rank_main(args)
        return 0
    info = {**env_info.describe(), "hosts": args.hosts, "rate": args.rate, "prefix": args.prefix,
            "subnet": args.subnet, "repeats": args.repeats, "pieces": PIECES,
            "min_exchange_bytes": exchange.MIN_EXCHANGE_BYTES, "threads_per_rank": 1}
    start = time.time()
    rows = launch(args)
    order = list(dict.fromkeys((r["size_mb"], r["collective"]) for r in rows))  # variants of one together
    rows.sort(key=lambda r: order.index((r["size_mb"], r["collective"])))
    add_ideal(rows, args.rate_bps)
    info["wall_s"] = round(time.time() - start, 1)
    if hasattr(os, "getloadavg"):  # other work on a shared machine disturbs the timings
        info["loadavg_1_5_15_at_end"] = [round(v, 2) for v in os.getloadavg()]
    print(f"# link benchmark: {args.hosts} hosts ({args.prefix}-h*), {args.rate} links, gloo, "
          f"{info['cpu_model']} ({info['cpu_count']} cores), torch {info['torch']}, median of {args.repeats} "
          f"rounds after a warm-up, {info['date']}")
    print(format_table(rows))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=1)
        print(f"\nsaved {args.json}")
    return 0 if all(r["same_output"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
