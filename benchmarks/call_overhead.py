"""What a codec call costs beyond its data: many small tensors (a transformer's bucket) against one tensor of
as many elements, on the CPU.

    python -m benchmarks.call_overhead [--tensors 64] [--numel 2048] [--repeats 15] [--methods qsgd,...]
                                       [--out benchmarks/results/compressors/call_overhead.json]

For each method (``impl="numba"`` where it has Numba kernels, else the reference), the median over
``--repeats`` (after one warm-up) of encoding and decoding, into buffers made once, ``--tensors`` float32
Gaussian tensors of ``--numel`` entries one call each, and of one tensor of all of them. A pair of calls
costs ``(many - one) / (tensors - 1)`` beyond its data: the fixed cost of encode plus decode (header,
checks, dispatch), what a bucket of many small tensors pays mostly. The same tensors in one call each way
(``encode_many``, ``decode_many``: one payload for the bucket, a header per tensor), interleaved with the
calls of each: ``fused_us`` is its cost per tensor beyond the data, ``(fused - one) / (tensors - 1)``. One
thread (``torch.set_num_threads``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import compressors

from . import record

METHODS = ("fp16", "qsgd", "scaledsign", "signsgd", "topk", "mx", "onebit")


def _impl(name: str) -> str:
    return "numba" if compressors.has_numba(name) else "reference"


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _pairs(codec: compressors.Compressor, xs: list[torch.Tensor]) -> Callable[[], None]:
    """Encode and decode every tensor of ``xs``, each into its buffers."""
    payloads = [torch.empty(codec.payload_nbytes(x.shape), dtype=torch.uint8) for x in xs]
    outs = [torch.empty_like(x) for x in xs]

    def run() -> None:
        for x, payload, out in zip(xs, payloads, outs):
            codec.encode(x, out=payload)
            codec.decode(payload, out=out)

    return run


def _fused(codec: compressors.Compressor, xs: list[torch.Tensor]) -> Callable[[], None]:
    """Encode every tensor of ``xs`` in one call, and decode them in one."""
    streams = list(range(len(xs)))
    outs = [torch.empty_like(x) for x in xs]

    def run() -> None:
        codec.decode_many(codec.encode_many(xs, streams=streams), outs)

    return run


def _medians_s(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Each of ``fns``' median seconds, their runs interleaved (the machine's drift shared)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) for key, t in times.items()}


def measure(name: str, tensors: int, numel: int, repeats: int) -> dict[str, Any]:
    """One method's row: the seconds of many calls, of one, of the fused pair, and the fixed costs."""
    codec = compressors.get(name, impl=_impl(name))
    g = torch.Generator().manual_seed(0)
    small = [torch.randn(numel, generator=g) for _ in range(tensors)]
    s = _medians_s({"many": _pairs(codec, small), "one": _pairs(codec, [torch.cat(small)]),
                    "fused": _fused(codec, small)}, repeats)
    return {"method": name, "impl": codec.impl, "many_s": s["many"], "one_s": s["one"], "fused_s": s["fused"],
            "per_pair_us": (s["many"] - s["one"]) / (tensors - 1) * 1e6,
            "fused_us": (s["fused"] - s["one"]) / (tensors - 1) * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__.split("\n")[0])
    ap.add_argument("--tensors", type=int, default=64, help="small tensors a run encodes and decodes (>= 2)")
    ap.add_argument("--numel", type=int, default=2048, help="entries of each small tensor (>= 1)")
    ap.add_argument("--repeats", type=int, default=15, help="timed runs; the median is reported (>= 1)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma separated (default: %(default)s)")
    ap.add_argument("--out", default="benchmarks/results/compressors/call_overhead.json", help="JSON written here")
    ap.set_defaults(device="cpu")  # what record.header reads: this benchmark runs on the CPU
    args = ap.parse_args(argv)
    if args.tensors < 2 or args.numel < 1 or args.repeats < 1:
        ap.error("--tensors must be >= 2, --numel and --repeats >= 1")
    methods = record.subset(ap, "--methods", args.methods, compressors.COMPRESSORS)
    torch.set_num_threads(1)
    rows = [measure(name, args.tensors, args.numel, args.repeats) for name in methods]
    print(f"{args.tensors} tensors of {args.numel} float32 against one of {args.tensors * args.numel}, "
          f"median of {args.repeats}:")
    print(f"{'method':<12}{'impl':<11}{'many (ms)':>11}{'one (ms)':>10}{'fused (ms)':>11}{'per call pair (us)':>20}"
          f"{'fused, per tensor (us)':>24}")
    for r in rows:
        print(f"{r['method']:<12}{r['impl']:<11}{r['many_s'] * 1e3:>11.2f}{r['one_s'] * 1e3:>10.2f}"
              f"{r['fused_s'] * 1e3:>11.2f}{r['per_pair_us']:>20.1f}{r['fused_us']:>24.1f}")
    record.save({**record.header("benchmarks.call_overhead", sys.argv[1:] if argv is None else argv, args),
                 "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
