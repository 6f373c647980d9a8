"""Encode / decode throughput of every compressor, per implementation.

    python -m benchmarks.compressor_bench [--sizes 20,22,24,26] [--repeats 5] [--threads 1]
                                          [--device cpu|cuda] [--json PATH] [--impls reference,numba]
                                          [--compressors fp32,qsgd,...] [--cols 1024]

For each compressor in ``compressors.COMPRESSORS`` with its default parameters (``qsgd``
at ``bits`` 2, 4 and 8, ``fp8`` also with ``block`` 32 and with ``rounding`` stochastic, ``mx`` also with e3m2,
e2m1 and int8 elements, and with ``rounding`` stochastic for e4m3, e3m2, e2m1 and int8), each implementation it
has among ``--impls`` (default:
``reference`` and, on the CPU, ``numba``) and each size ``n = 2**e`` (``--sizes``
lists the exponents), a float32 Gaussian tensor of shape ``(n // cols, cols)``
(a weight matrix; ``cols`` defaults to 1024) is encoded into a reused payload
buffer, the payload decoded into a reused output, and decoded-and-added into
it (a collective's summing step): one warm-up, then ``--repeats`` timed runs,
of which the median is reported. Throughput is ``4 n`` bytes of float32 input
per second (GB/s, 1e9 bytes); ``x ref`` is the ratio to ``reference`` of the
same configuration and size in the same run. CPU runs are timed with
``time.perf_counter`` under ``torch.set_num_threads`` (the Numba kernels use
one thread); CUDA runs with CUDA events after a ``synchronize``.

Prints a table (configuration, impl, n, encode / decode / decode-add GB/s and
their ratios to reference, payload bytes, ``payload_ratio`` = 4 n / payload
bytes, see ``compressors.comm.accounting``) and, with ``--json PATH``, saves it with
the machine's description (``orchestrator.study.env_info.describe``: CPU model, torch
version, GPUs, date) and the thread count.
"""
from __future__ import annotations

import argparse
import json
import os
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

# The parameter sets benchmarked beside the defaults: widths and layouts whose kernels differ.
VARIANTS = {
    "qsgd": tuple({"bits": b} for b in (2, 4, 8)),
    "fp8": ({}, {"block": 32}, {"rounding": "stochastic"}),
    "mx": ({}, {"element": "e3m2"}, {"element": "e2m1"}, {"element": "int8"}, {"rounding": "stochastic"},
           {"element": "e3m2", "rounding": "stochastic"}, {"element": "e2m1", "rounding": "stochastic"},
           {"element": "int8", "rounding": "stochastic"}),
}


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


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    return {**env_info.describe(), "threads": threads, "torch_num_threads": torch.get_num_threads(),
            "device": str(device)}


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """``fn()`` and its duration in seconds (CUDA: events around it, after a synchronize)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_one(name: str, params: dict[str, Any], impl: str, x: torch.Tensor, repeats: int) -> dict[str, Any]:
    c = compressors.get(name, impl=impl, **params)
    device = x.device
    n = x.numel()
    payload = torch.empty(c.payload_nbytes(x.shape), dtype=torch.uint8, device=device)
    out = torch.empty(x.shape, dtype=torch.float32, device=device)
    # warm-up (kernels, allocator, lazy tables, CUDA context)
    c.encode(x, step=0, out=payload)
    c.decode(payload, out=out)
    c.decode(payload, out=out, add=True)
    enc: list[float] = []
    dec: list[float] = []
    add: list[float] = []
    for r in range(repeats):
        _, t = timed(lambda r=r: c.encode(x, step=r + 1, out=payload), device)
        enc.append(t)
        _, t = timed(lambda: c.decode(payload, out=out), device)
        dec.append(t)
        _, t = timed(lambda: c.decode(payload, out=out, add=True), device)
        add.append(t)
    enc_s, dec_s, add_s = statistics.median(enc), statistics.median(dec), statistics.median(add)
    return {
        "compressor": name,
        "params": params,
        "impl": impl,
        "label": label(name, params),
        "n": n,
        "log2_n": n.bit_length() - 1,
        "shape": list(x.shape),
        "encode_s": enc_s,
        "decode_s": dec_s,
        "decode_add_s": add_s,
        "encode_gbps": 4 * n / enc_s / 1e9,
        "decode_gbps": 4 * n / dec_s / 1e9,
        "decode_add_gbps": 4 * n / add_s / 1e9,
        "payload_nbytes": int(payload.numel()),
        "payload_ratio": accounting.payload_ratio(n, int(payload.numel())),
        "encode_runs_s": enc,
        "decode_runs_s": dec,
        "decode_add_runs_s": add,
    }


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's speed over the reference's for the same configuration and size (same run)."""
    reference = {(r["label"], r["n"]): r for r in rows if r["impl"] == "reference"}
    for r in rows:
        base = reference.get((r["label"], r["n"]))
        for kind in ("encode", "decode", "decode_add"):
            r[f"{kind}_vs_reference"] = base[f"{kind}_s"] / r[f"{kind}_s"] if base else None
    return rows


def input_tensor(n: int, cols: int, device: torch.device) -> torch.Tensor:
    shape = (n // cols, cols) if cols and n % cols == 0 and n >= cols else (n,)
    g = torch.Generator().manual_seed(n)
    return torch.randn(shape, generator=g).to(device)


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'compressor':<16} {'impl':<9} {'n':>5} {'encode GB/s':>11} {'x ref':>6} {'decode GB/s':>11} "
            f"{'x ref':>6} {'dec+add GB/s':>12} {'x ref':>6} {'payload bytes':>13} {'payload_ratio':>13}")
    lines = [head, "-" * len(head)]

    def ratio(value: float | None) -> str:
        return f"{value:>6.1f}" if value is not None else f"{'':>6}"

    for r in rows:
        lines.append(f"{r['label']:<16} {r['impl']:<9} {'2^' + str(r['log2_n']):>5} {r['encode_gbps']:>11.3f} "
                     f"{ratio(r['encode_vs_reference'])} {r['decode_gbps']:>11.3f} {ratio(r['decode_vs_reference'])} "
                     f"{r['decode_add_gbps']:>12.3f} {ratio(r['decode_add_vs_reference'])} "
                     f"{r['payload_nbytes']:>13d} {r['payload_ratio']:>13.2f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compressor_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,22,24,26", help="exponents e of n = 2**e, comma separated")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", default=None, metavar="PATH", help="save results and machine info here")
    ap.add_argument("--compressors", default=None, help="comma separated subset of compressor names")
    ap.add_argument("--cols", type=int, default=1024, help="input shape (n // cols, cols); 0: 1-D")
    ap.add_argument("--impls", default=None,
                    help="comma separated implementations (default: reference, and numba on the CPU)")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes: comma separated integers expected, got {args.sizes!r}")
    if not args.sizes or any(not 0 <= e <= 30 for e in args.sizes):
        ap.error("--sizes: exponents in [0, 30] expected")
    if args.repeats < 1 or args.threads < 1 or args.cols < 0:
        ap.error("--repeats and --threads must be >= 1, --cols >= 0")
    if args.compressors is not None:
        args.compressors = [s.strip() for s in args.compressors.split(",") if s.strip()]
        unknown = [s for s in args.compressors if s not in compressors.COMPRESSORS]
        if unknown:
            ap.error(f"--compressors: unknown {unknown}; valid: {list(compressors.COMPRESSORS)}")
    default = "reference,numba" if args.device == "cpu" else "reference"
    args.impls = [s.strip() for s in (args.impls or default).split(",") if s.strip()]
    if not args.impls or any(i not in compressors.IMPLS[1:] for i in args.impls):
        ap.error(f"--impls: a comma separated subset of {', '.join(compressors.IMPLS[1:])} expected")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    info = machine_info(device, args.threads)
    print(f"# {info['cpu_model']} | torch {info['torch']} | threads {info['torch_num_threads']} | "
          f"device {info['device']}{' (' + ', '.join(info['gpus']) + ')' if info['gpus'] else ''} | {info['date']}",
          flush=True)
    rows: list[dict[str, Any]] = []
    for e in args.sizes:
        x = input_tensor(2**e, args.cols, device)
        for name, params in configs(args.compressors):
            for impl in args.impls:
                if impl == "numba" and not compressors.has_numba(name):
                    continue
                print(f"  {label(name, params)} {impl} 2^{e} ...", file=sys.stderr, flush=True)
                rows.append(bench_one(name, params, impl, x, args.repeats))
        del x
    rows = with_ratios(rows)
    print(format_table(rows), flush=True)
    if args.json:
        out = {"machine": info, "args": {"sizes": args.sizes, "repeats": args.repeats, "threads": args.threads,
                                         "device": args.device, "cols": args.cols, "impls": args.impls,
                                         "compressors": args.compressors},
               "results": rows}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"# saved {args.json}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
