"""Encode / decode throughput of every compressor, per implementation, beside the device's own copy.

    python -m benchmarks.compressor_bench [--sizes 20,22,24,26] [--repeats 5] [--threads 1]
                                          [--device cpu|cuda] [--json PATH] [--impls reference,numba]
                                          [--compressors fp32,qsgd,...] [--cols 1024] [--rotate-mib N]
                                          [--budget-s SECONDS]

For each compressor in ``compressors.COMPRESSORS`` with its default parameters (``qsgd``
at ``bits`` 2, 4 and 8, ``fp8`` also with ``block`` 32 and with ``rounding`` stochastic, ``mx`` also with e3m2,
e2m1 and int8 elements, and with ``rounding`` stochastic for e4m3, e3m2, e2m1 and int8), each implementation it
has among ``--impls`` (default: ``reference`` and, on the CPU, ``numba``, on a GPU ``cuda``) and each size
``n = 2**e`` (``--sizes`` lists the exponents), float32 Gaussian tensors of shape ``(n // cols, cols)``
(a weight matrix; ``cols`` defaults to 1024) are encoded into payload buffers, the payloads decoded into
outputs, and decoded-and-added into them (a collective's summing step). Each operation gets its own
pass: one warm-up, then ``--repeats`` timed runs, of which the median is reported. The runs rotate over
as many inputs (each with its payload and output) as ``--rotate-mib`` MiB of inputs need (default 256:
five times a Hopper's 50 MB L2, and more than a CPU's last-level cache), each run, across the passes,
taking the input used longest ago, so that no run finds its input or output in the cache (a small
payload may be there). CPU runs are timed with ``time.perf_counter`` under ``torch.set_num_threads``
(the Numba kernels use one thread); CUDA runs with CUDA events after a ``synchronize``, behind a queued
busy wait that hides the host's launch. The device-to-device copy of the same inputs into the outputs
is measured the same way at every size.

Two speeds per operation: ``*_gbps`` is ``4 n`` bytes of float32 input per second (1e9 bytes), the
figure BENCHMARKS.md's CPU tables show; ``gbps`` in ``rows`` counts the bytes an operation reads plus
writes (encode: the input and the payload; decode: the payload and the output; decode-add: the payload,
and the output read and written; none for a sparse method's, which touches only the entries sent),
comparable with the copy's (``copy_gbps``: input read, output written). ``x ref`` is the speed over
``reference`` of the same configuration and size in the same run.

On a GPU the CUDA kernels have speed goals at >= 2**24 elements (``DENSE``, ``SELECTING``): the dense
methods encode and decode at >= 80% of the copy and >= 5x the reference; adaptive and topk (exact
selection) encode within 3x of one read of the input at the copy's rate. ``goals`` in the JSON and the
last table say which are met.

``--budget-s`` stops starting measurements once that many seconds have passed (the JSON says what was
not measured). A measurement that raises (a GPU out of memory) is recorded with its error, and the next
one goes on. Prints a table and, with ``--json PATH``, saves it after every measurement (written to a
temporary file and renamed) with the machine's description (``orchestrator.study.env_info.describe``:
CPU model, torch version, GPUs, date) and the thread count.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import compressors
from compressors.comm import accounting
from orchestrator.study import env_info
from orchestrator.study.labels import config_label

from . import record as record_

# The parameter sets benchmarked beside the defaults: widths and layouts whose kernels differ.
VARIANTS = {
    "qsgd": tuple({"bits": b} for b in (2, 4, 8)),
    "fp8": ({}, {"block": 32}, {"rounding": "stochastic"}),
    "mx": ({}, {"element": "e3m2"}, {"element": "e2m1"}, {"element": "int8"}, {"rounding": "stochastic"},
           {"element": "e3m2", "rounding": "stochastic"}, {"element": "e2m1", "rounding": "stochastic"},
           {"element": "int8", "rounding": "stochastic"}),
}
OPS = ("encode", "decode", "decode_add")
# The GPU kernels' speed goals (at >= 2**GOAL_MIN_LOG2 elements): the dense methods against the copy and
# the reference, the exact selections against one read of the input.
GOAL_MIN_LOG2 = 24
DENSE = ("dynamic8", "linear8", "qsgd", "terngrad", "onebit", "signsgd", "efsignsgd", "scaledsign", "maxmin",
         "natural", "fp8", "mx")
SELECTING = ("adaptive", "topk")
DENSE_OF_COPY, DENSE_X_REFERENCE, SELECTING_READS = 0.8, 5.0, 3.0
# Below 2**18 elements (256 MiB / 256) an operation costs its launches more than its bytes: more copies
# would only lengthen the warm-up.
MAX_COPIES = 256
# About 1 ms of a GPU's clock: longer than the host takes to launch one operation.
LAUNCH_COVER_CYCLES = 2_000_000
# Their decode-add reads and writes only the entries sent, whose number the payload, not n, sets.
SPARSE = ("adaptive", "topk", "randomk", "dgc")


def configs(names: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(name, params) of every benchmarked configuration, in registry order."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name in compressors.COMPRESSORS:
        if names is not None and name not in names:
            continue
        out += [(name, params) for params in VARIANTS.get(name, ({},))]
    return out


def label(name: str, params: dict[str, Any]) -> str:
    return config_label({"compressor": name, **params}, params)


def has_impl(name: str, impl: str, device: torch.device) -> bool:
    """Whether ``name`` has implementation ``impl`` on ``device`` (Numba: the CPU; CUDA: a GPU)."""
    if impl == "numba":
        return device.type == "cpu" and compressors.has_numba(name)
    if impl == "cuda":
        return device.type == "cuda" and compressors.COMPRESSORS[name].cuda_program is not None
    return True


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    return {**env_info.describe(), "threads": threads, "torch_num_threads": torch.get_num_threads(),
            "device": str(device)}


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds ``fn()`` takes (CUDA: events around it, after a synchronize; a busy wait queued ahead
    of it keeps the GPU occupied while the host launches it, so that the events time the GPU's work
    rather than the launch, and a wait for the GPU inside ``fn`` still shows)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(LAUNCH_COVER_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def copies_for(n: int, rotate_mib: int) -> int:
    """How many inputs of ``n`` float32 span ``rotate_mib`` MiB: at least one, at most ``MAX_COPIES``."""
    return max(1, min(MAX_COPIES, math.ceil(rotate_mib * 2 ** 20 / (4 * n))))


class Rotation:
    """The copy each run takes: the one after the last run's, across passes, so that every run finds
    the copy it takes the longest ago used."""

    def __init__(self, copies: int) -> None:
        self.copies = copies
        self.last = -1

    def next(self) -> int:
        self.last = (self.last + 1) % self.copies
        return self.last


def runs(fn: Callable[[int], Any], rotation: Rotation, repeats: int, device: torch.device) -> list[float]:
    """``repeats`` timed runs of ``fn(i)`` on the rotated copies, after one warm-up run."""
    fn(rotation.next())
    return [timed(lambda i=rotation.next(): fn(i), device) for _ in range(repeats)]


def inputs(n: int, cols: int, copies: int, device: torch.device) -> list[torch.Tensor]:
    """``copies`` float32 Gaussian tensors of ``n`` elements (seeded by ``n`` and the copy)."""
    shape = (n // cols, cols) if cols and n % cols == 0 and n >= cols else (n,)
    return [torch.randn(shape, generator=torch.Generator().manual_seed(n + i)).to(device) for i in range(copies)]


def copy_run(xs: list[torch.Tensor], outs: list[torch.Tensor], repeats: int) -> dict[str, Any]:
    """The device's copy of the inputs into the outputs: median seconds and GB/s read plus written."""
    times = runs(lambda i: outs[i].copy_(xs[i]), Rotation(len(xs)), repeats, xs[0].device)
    seconds = statistics.median(times)
    return {"n": xs[0].numel(), "copy_s": seconds, "copy_gbps": 8 * xs[0].numel() / seconds / 1e9, "copy_runs_s": times}


def bench_one(name: str, params: dict[str, Any], impl: str, xs: list[torch.Tensor], outs: list[torch.Tensor],
              repeats: int) -> dict[str, Any]:
    """Encode, decode and decode-add of one configuration over the rotated inputs, each in its own pass."""
    c = compressors.get(name, impl=impl, **params)
    x, device, n, copies = xs[0], xs[0].device, xs[0].numel(), len(xs)
    payloads = [torch.empty(c.payload_nbytes(x.shape), dtype=torch.uint8, device=device) for _ in range(copies)]
    for i in range(copies):  # every payload valid before a decode reads it
        c.encode(xs[i], step=0, out=payloads[i])
    rotation = Rotation(copies)
    enc = runs(lambda i: c.encode(xs[i], step=1, out=payloads[i]), rotation, repeats, device)
    dec = runs(lambda i: c.decode(payloads[i], out=outs[i]), rotation, repeats, device)
    add = runs(lambda i: c.decode(payloads[i], out=outs[i], add=True), rotation, repeats, device)
    nbytes = int(payloads[0].numel())
    row: dict[str, Any] = {"compressor": name, "params": params, "impl": impl, "label": label(name, params), "n": n,
                           "log2_n": n.bit_length() - 1, "shape": list(x.shape), "copies": copies}
    for op, times in zip(OPS, (enc, dec, add)):
        row[f"{op}_s"] = statistics.median(times)
    for op in OPS:
        row[f"{op}_gbps"] = 4 * n / row[f"{op}_s"] / 1e9
    row.update({"payload_nbytes": nbytes, "payload_ratio": accounting.payload_ratio(n, nbytes),
                "encode_runs_s": enc, "decode_runs_s": dec, "decode_add_runs_s": add})
    return row


def measure(name: str, params: dict[str, Any], impl: str, xs: list[torch.Tensor], outs: list[torch.Tensor],
            repeats: int) -> dict[str, Any]:
    """``bench_one``'s row, or the configuration with the error that stopped it (a GPU out of memory at a
    large size): recorded, and the next measurement goes on."""
    try:
        return bench_one(name, params, impl, xs, outs, repeats)
    except (RuntimeError, MemoryError) as error:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if xs[0].is_cuda:
            torch.cuda.empty_cache()
        return {"compressor": name, "params": params, "impl": impl, "label": label(name, params), "n": xs[0].numel(),
                "log2_n": xs[0].numel().bit_length() - 1,
                "error": f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}"}


def moved_bytes(op: str, n: int, payload_nbytes: int, compressor: str = "") -> int | None:
    """Bytes ``op`` reads plus writes on ``n`` float32 with a payload of ``payload_nbytes``; None for a
    sparse method's decode-add (it touches the entries sent, however many its payload holds)."""
    if op == "decode_add":
        return None if compressor in SPARSE else payload_nbytes + 8 * n
    return payload_nbytes + 4 * n


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's speed over the reference's for the same configuration and size (same run)."""
    measured = [r for r in rows if "error" not in r]
    reference = {(r["label"], r["n"]): r for r in measured if r["impl"] == "reference"}
    for r in measured:
        base = reference.get((r["label"], r["n"]))
        for op in OPS:
            r[f"{op}_vs_reference"] = base[f"{op}_s"] / r[f"{op}_s"] if base else None
    return rows


def summary_rows(results: list[dict[str, Any]], copies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration, size and operation, of its fastest implementation measured (cuda, then
    numba, then reference): GB/s read plus written, the copy's at that size, and the reference's."""
    copy_at = {c["n"]: c["copy_gbps"] for c in copies}
    rank = {"cuda": 0, "numba": 1, "reference": 2}
    best: dict[tuple[str, int], dict[str, Any]] = {}
    reference: dict[tuple[str, int], dict[str, Any]] = {}
    for r in (r for r in results if "error" not in r):
        key = (r["label"], r["n"])
        if key not in best or rank[r["impl"]] < rank[best[key]["impl"]]:
            best[key] = r
        if r["impl"] == "reference":
            reference[key] = r
    rows = []
    for key, r in best.items():
        ref = reference.get(key) if r["impl"] != "reference" else None
        for op in OPS:
            moved = moved_bytes(op, r["n"], r["payload_nbytes"], r["compressor"])
            rows.append({"compressor": r["compressor"], "params": r["params"], "impl": r["impl"], "n": r["n"],
                         "op": op, "seconds": r[f"{op}_s"], "gbps": moved / r[f"{op}_s"] / 1e9 if moved else None,
                         "copy_gbps": copy_at.get(r["n"]),
                         "reference_gbps": moved / ref[f"{op}_s"] / 1e9 if ref and moved else None})
    return rows


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The speed goals of the CUDA kernels' rows at >= 2**GOAL_MIN_LOG2 elements: per configuration and
    size, the figures the goal names and whether it is met (None: the goal needs a figure not measured)."""
    at: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["impl"] == "cuda" and r["n"] >= 2 ** GOAL_MIN_LOG2 and r["compressor"] in DENSE + SELECTING:
            at.setdefault((label(r["compressor"], r["params"]), r["n"]), {})[r["op"]] = r
    out = []
    for (name, n), ops in at.items():
        enc = ops["encode"]
        copy = enc["copy_gbps"]
        line: dict[str, Any] = {"label": name, "compressor": enc["compressor"], "n": n}
        if copy is None:  # the copy at this size was not measured (the budget ran out)
            line.update({"goal": None, "met": None})
        elif enc["compressor"] in SELECTING:
            # one read of the input (4n bytes) at the copy's rate (bytes read plus written per second)
            reads = enc["seconds"] / (4 * n / (copy * 1e9))
            line.update({"goal": f"encode within {SELECTING_READS:g}x one read of the input",
                         "encode_reads": reads, "met": reads <= SELECTING_READS})
        else:
            figures = {f"{op}_of_copy": ops[op]["gbps"] / copy for op in ("encode", "decode")}
            figures.update({f"{op}_x_reference": (ops[op]["gbps"] / ops[op]["reference_gbps"]
                                                  if ops[op]["reference_gbps"] else None) for op in ("encode", "decode")})
            known = all(v is not None for v in figures.values())
            met = known and all(figures[f"{op}_of_copy"] >= DENSE_OF_COPY and
                                figures[f"{op}_x_reference"] >= DENSE_X_REFERENCE for op in ("encode", "decode"))
            line.update({"goal": f"encode and decode >= {DENSE_OF_COPY:.0%} of the copy and >= "
                                 f"{DENSE_X_REFERENCE:g}x the reference", **figures, "met": met if known else None})
        out.append(line)
    return out


def format_table(results: list[dict[str, Any]], copies: list[dict[str, Any]]) -> str:
    width = max([16, *(len(r["label"]) for r in results)])
    head = (f"{'compressor':<{width}} {'impl':<9} {'n':>5} {'encode GB/s':>11} {'x ref':>6} {'decode GB/s':>11} "
            f"{'x ref':>6} {'dec+add GB/s':>12} {'x ref':>6} {'payload bytes':>13} {'payload_ratio':>13}")
    lines = [head, "-" * len(head)]

    def ratio(value: float | None) -> str:
        return f"{value:>6.1f}" if value is not None else f"{'':>6}"

    for r in results:
        start = f"{r['label']:<{width}} {r['impl']:<9} {'2^' + str(r['log2_n']):>5}"
        if "error" in r:
            lines.append(f"{start} {r['error']}")
            continue
        lines.append(f"{start} {r['encode_gbps']:>11.3f} "
                     f"{ratio(r['encode_vs_reference'])} {r['decode_gbps']:>11.3f} {ratio(r['decode_vs_reference'])} "
                     f"{r['decode_add_gbps']:>12.3f} {ratio(r['decode_add_vs_reference'])} "
                     f"{r['payload_nbytes']:>13d} {r['payload_ratio']:>13.2f}")
    lines.append("GB/s of float32 input (4n bytes / s). The copy (bytes read + written / s): " +
                 ", ".join(f"2^{c['n'].bit_length() - 1} {c['copy_gbps']:.3f} GB/s" for c in copies))
    return "\n".join(lines)


def format_goals(lines: list[dict[str, Any]]) -> str:
    out = [f"{'goal at >= 2^' + str(GOAL_MIN_LOG2):<38} {'n':>5} {'enc/copy':>8} {'dec/copy':>8} {'enc x ref':>9} "
           f"{'dec x ref':>9} {'enc reads':>9}  verdict"]

    def fig(line: dict[str, Any], key: str, width: int) -> str:
        value = line.get(key)
        return f"{value:>{width}.2f}" if value is not None else f"{'-':>{width}}"

    for g in lines:
        verdict = {True: "met", False: "MISSED", None: "unknown"}[g["met"]]
        out.append(f"{g['label']:<38} {'2^' + str(g['n'].bit_length() - 1):>5} {fig(g, 'encode_of_copy', 8)} "
                   f"{fig(g, 'decode_of_copy', 8)} {fig(g, 'encode_x_reference', 9)} {fig(g, 'decode_x_reference', 9)} "
                   f"{fig(g, 'encode_reads', 9)}  {verdict}")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compressor_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,22,24,26", help="exponents e of n = 2**e, comma separated")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    ap.add_argument("--json", default=None, metavar="PATH", help="save results and machine info here")
    ap.add_argument("--compressors", default=None, help="comma separated subset of compressor names")
    ap.add_argument("--cols", type=int, default=1024, help="input shape (n // cols, cols); 0: 1-D")
    ap.add_argument("--impls", default=None,
                    help="comma separated implementations (default: reference, and numba on the CPU, cuda on a GPU)")
    ap.add_argument("--rotate-mib", type=int, default=256,
                    help="MiB of inputs the runs rotate over (out of the caches); 0: one input")
    record_.add_options(ap)
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes: comma separated integers expected, got {args.sizes!r}")
    if not args.sizes or any(not 0 <= e <= 30 for e in args.sizes):
        ap.error("--sizes: exponents in [0, 30] expected")
    if args.repeats < 1 or args.threads < 1 or args.cols < 0:
        ap.error("--repeats and --threads must be >= 1, --cols >= 0")
    if not 0 <= args.rotate_mib <= 2 ** 16:
        ap.error(f"--rotate-mib: MiB in [0, 65536] expected, got {args.rotate_mib}")
    if args.compressors is not None:
        args.compressors = record_.subset(ap, "--compressors", args.compressors, compressors.COMPRESSORS)
    default = "reference,numba" if args.device == "cpu" else "reference,cuda"
    args.impls = record_.subset(ap, "--impls", args.impls or default, compressors.IMPLS[1:])
    record_.check_options(ap, args)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    stop_at = record_.deadline(args.budget_s)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    info = machine_info(device, args.threads)
    print(f"# {info['cpu_model']} | torch {info['torch']} | threads {info['torch_num_threads']} | "
          f"device {info['device']}{' (' + ', '.join(info['gpus']) + ')' if info['gpus'] else ''} | {info['date']}",
          flush=True)
    planned = [(e, name, params, impl) for e in args.sizes for name, params in configs(args.compressors)
               for impl in args.impls if has_impl(name, impl, device)]
    results: list[dict[str, Any]] = []
    copies: list[dict[str, Any]] = []
    record = record_.header("benchmarks.compressor_bench", argv, args, info)

    def save() -> None:
        rows = summary_rows(with_ratios(results), copies)
        record.update({"not_measured": len(planned) - len(results), "copy": copies, "rows": rows,
                       "goals": goals(rows), "results": results})
        record_.save(record, args.json)

    for e in args.sizes:
        if record_.past(stop_at):
            break
        n = 2 ** e
        xs = inputs(n, args.cols, copies_for(n, args.rotate_mib), device)
        outs = [torch.zeros_like(x) for x in xs]  # touched: no run pays the first write's page faults
        copies.append(copy_run(xs, outs, args.repeats))
        for _, name, params, impl in (p for p in planned if p[0] == e):
            if record_.past(stop_at):
                break
            print(f"  {label(name, params)} {impl} 2^{e} ...", file=sys.stderr, flush=True)
            results.append(measure(name, params, impl, xs, outs, args.repeats))
            save()
        del xs, outs
    save()
    print(format_table(results, copies), flush=True)
    if record["goals"]:
        print(format_goals(record["goals"]), flush=True)
    record_.print_ending(record, len(planned), "measurements", args.budget_s, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
