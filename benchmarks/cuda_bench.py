"""GPU throughput of the CUDA kernels (``impl="cuda"``) against the torch reference on the same GPU.

For every compressor with CUDA kernels, encode and decode of 2**20 .. 2**28 float32 elements:
CUDA-event timing, the median of ``--repeats`` runs after warm-up, inputs rotated among enough
copies that they do not fit the L2 cache; GB/s counts bytes read plus bytes written (encode: the
input and the payload; decode: the payload and the output). The device-to-device copy bandwidth
is measured in the same run. Goals at >= 2**24 elements: dense methods encode and decode at
>= 80% of the copy bandwidth and >= 5x the reference; topk and adaptive (exact selection) encode
within 3x of one read of the input at the copy bandwidth. Prints a table, writes JSON (--out).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics

import torch

import compressors

SELECTING = ("topk", "adaptive")
_L2_SPAN = 256 * 2 ** 20  # rotate over at least this many bytes of inputs: 5x a Hopper's 50 MB L2


def _time(fn, args_list, repeats: int, warmup: int = 3) -> float:
    """Median seconds of fn(args) over ``repeats`` runs, cycling through args_list."""
    for i in range(warmup):
        fn(*args_list[i % len(args_list)])
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args_list[i % len(args_list)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def copy_bandwidth(repeats: int) -> float:
    """Bytes read + written per second of a 1 GiB device-to-device copy."""
    src = torch.empty(2 ** 28, device="cuda").uniform_()
    dst = torch.empty_like(src)
    seconds = _time(lambda: dst.copy_(src), [()], repeats)
    return 2 * src.numel() * 4 / seconds


def measure(name: str, params: dict, impl: str, n: int, repeats: int) -> dict:
    codec = compressors.get(name, impl=impl, **params)
    copies = max(1, min(8, math.ceil(_L2_SPAN / (4 * n))))
    g = torch.Generator(device="cuda").manual_seed(n)
    inputs = [torch.randn(n, device="cuda", generator=g) for _ in range(copies)]
    nbytes = codec.payload_nbytes((n,))
    payloads = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    outs = [torch.empty(n, device="cuda") for _ in range(copies)]
    encode = _time(lambda x, p: codec.encode(x, out=p, step=1), list(zip(inputs, payloads)), repeats)
    for x, p in zip(inputs, payloads):
        codec.encode(x, out=p, step=1)
    decode = _time(lambda p, o: codec.decode(p, out=o), list(zip(payloads, outs)), repeats)
    return {"compressor": name, "params": params, "impl": impl, "numel": n, "payload_bytes": nbytes,
            "encode_s": encode, "decode_s": decode,
            "encode_gbps": (4 * n + nbytes) / encode / 1e9, "decode_gbps": (4 * n + nbytes) / decode / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--max-log2", type=int, default=28)
    parser.add_argument("--reference-max-log2", type=int, default=26,
                        help="the torch reference is slow and memory-hungry: measured up to this size")
    args = parser.parse_args()
    copy = copy_bandwidth(args.repeats)
    rows = []
    names = [name for name, cls in compressors.COMPRESSORS.items() if cls.cuda_program is not None]
    for name in names:
        for log2 in range(20, args.max_log2 + 1, 2):
            for impl in ("cuda", "reference"):
                if impl == "reference" and log2 > args.reference_max_log2:
                    continue
                try:
                    row = measure(name, {}, impl, 2 ** log2, args.repeats)
                except torch.cuda.OutOfMemoryError as err:
                    row = {"compressor": name, "impl": impl, "numel": 2 ** log2, "error": str(err)[:200]}
                torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)
    by = {(r["compressor"], r["impl"], r["numel"]): r for r in rows if "error" not in r}
    table = []
    for (name, impl, n), r in by.items():
        if impl != "cuda":
            continue
        ref = by.get((name, "reference", n))
        line = {"compressor": name, "numel": n, "encode_gbps": r["encode_gbps"], "decode_gbps": r["decode_gbps"],
                "encode_of_copy": r["encode_gbps"] * 1e9 / copy, "decode_of_copy": r["decode_gbps"] * 1e9 / copy,
                "encode_x_ref": ref["encode_s"] / r["encode_s"] if ref else None,
                "decode_x_ref": ref["decode_s"] / r["decode_s"] if ref else None}
        if n >= 2 ** 24:
            if name in SELECTING:
                line["goal_met"] = r["encode_s"] <= 3 * (4 * n) / copy
            else:
                line["goal_met"] = (line["encode_of_copy"] >= 0.8 and line["decode_of_copy"] >= 0.8
                                    and (ref is None or (line["encode_x_ref"] >= 5 and line["decode_x_ref"] >= 5)))
        table.append(line)
    result = {"gpu": torch.cuda.get_device_name(), "copy_gbps": copy / 1e9, "rows": rows, "table": table}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['gpu']}: device-to-device copy {copy / 1e9:.0f} GB/s (read + write)")
    print(f"{'compressor':12} {'numel':>10} {'enc GB/s':>9} {'dec GB/s':>9} {'enc/copy':>8} {'dec/copy':>8} "
          f"{'enc x ref':>9} {'dec x ref':>9} goal")
    for t in table:
        fmt = lambda v: f"{v:9.1f}" if v is not None else f"{'-':>9}"  # noqa: E731
        print(f"{t['compressor']:12} {t['numel']:>10} {t['encode_gbps']:9.0f} {t['decode_gbps']:9.0f} "
              f"{t['encode_of_copy']:8.2f} {t['decode_of_copy']:8.2f} {fmt(t['encode_x_ref'])} {fmt(t['decode_x_ref'])} "
              f"{'' if 'goal_met' not in t else ('met' if t['goal_met'] else 'MISSED')}")


if __name__ == "__main__":
    main()
