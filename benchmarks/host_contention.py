"""Do busy emulated hosts slow each other's device? k processes of one torch thread each (an
emulated host's share on a 2-core machine with 4 hosts) run the same work at once; the figure is
the median time per repetition with k busy against one alone (the performance model's
``emulated_compute_scale`` says 1 up to the cores, then k / cores).

Two kinds of work: the validation grid's model step (3x1024 MLP, batch 64: forward, backward, SGD)
and a dynamic8 encode + decode of 2^20 floats (the Numba kernels). No Ray, no communication.

    python -m benchmarks.host_contention --busy 1,2,4 --json contention.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from typing import Any

SECONDS = 4.0
SETTINGS = {"dataset": "mnist", "data_dir": None, "seed": 0, "model": "mlp", "width": 1024, "depth": 3,
            "batch_norm": None, "head": None, "input_shape": None, "num_classes": None, "num_samples": None,
            "test_samples": None}


def _worker(kind: str, barrier: Any, results: Any) -> None:
    import torch
    import torch.nn.functional as F

    import compressors
    from orchestrator.profile import build

    torch.set_num_threads(1)
    model, shape, classes = build(SETTINGS)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, *shape), torch.randint(0, classes, (64,))
    gradient, codec = torch.randn(1024, 1024), compressors.get("dynamic8")

    def once() -> None:
        if kind == "model step":
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        else:
            codec.decode(codec.encode(gradient))

    for _ in range(3):  # caches, allocator, the kernels' first call
        once()
    barrier.wait()
    times, end = [], time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    results.put(statistics.median(times))


def measure(kind: str, busy: int) -> float:
    """Median seconds per repetition, the median over the ``busy`` processes."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(busy), ctx.Queue()
    processes = [ctx.Process(target=_worker, args=(kind, barrier, results)) for _ in range(busy)]
    for process in processes:
        process.start()
    figures = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join()
    return statistics.median(figures)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", default="1,2,4", help="processes at once, comma-separated; 1 first")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.busy.split(",")]
    from orchestrator import env_info

    out: dict[str, Any] = {"environment": env_info.collect(), "seconds": SECONDS, "rows": []}
    print("| work | alone (ms) | " + " | ".join(f"{k} busy" for k in counts) + " |")
    print("|---|---|" + "---|" * len(counts))
    for kind in ("model step", "dynamic8 encode+decode"):
        times = {k: measure(kind, k) for k in counts}
        alone = times[counts[0]]
        out["rows"].append({"work": kind, "seconds": times, "slowdown": {k: t / alone for k, t in times.items()}})
        print(f"| {kind} | {alone * 1e3:.1f} | " + " | ".join(f"{t / alone:.2f}x" for t in times.values()) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
