"""How much busy emulated hosts slow each other's device: the one-worker trials of a results folder,
run ``k`` at once on this machine, against one alone.

Emulated hosts share the machine's cores, caches and memory bandwidth, so a host of a p-worker trial
computes, encodes and decodes more slowly than the same host alone, where its one-worker trial
measured it. This measures that factor per configuration and phase: for each one-worker trial of
``--inputs``, ``k`` processes (``k`` in ``--busy``) each run the trial's settings (``train_loop.train``,
no Ray, no communication: a world of one) with the torch threads an emulated host has, released
together by a barrier; a phase's figure is the median over the processes of their median per step,
and its factor the figure at ``k`` over the figure at 1. ``predictor_validation --contention`` uses
the factors in place of the model's own guess (``emulated.emulated_compute_scale``: 1 up to the
cores, then threads / cores), as inputs measured on the target's devices. With ``--world`` the k
processes are one gloo world over loopback, as a trial's hosts are one world over their links: its
device phases then also bear what a world adds (gloo's threads, ranks waiting for one another
inside no link), its communication is loopback's and is not used.

    python -m benchmarks.host_contention --inputs results/predictor_inputs --busy 1,2,4 --json contention.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
from pathlib import Path
from typing import Any

from orchestrator.study import env_info
from orchestrator.predict.sharing import factors
from orchestrator.predict.trials import configurations, read_trials
from orchestrator.study.settings import TRAINING_KEYS

PHASES = ("step_time_s", "compute_s", "encode_s", "decode_s", "exposed_comm_s")
_TIMEOUT_S = 900


def _worker(settings: dict[str, Any], threads: int, world: dict[str, str] | None, barrier: Any,
            results: Any) -> None:
    from orchestrator.study.train_loop import train

    if world is not None:  # one gloo world over loopback (env://), as torchrun would start it
        os.environ.update(world)
    barrier.wait()
    final = train(settings, threads=threads)["final"]
    results.put({phase: final[phase] for phase in PHASES})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(settings: dict[str, Any], busy: int, threads: int, world: bool = False) -> dict[str, float]:
    """Per phase, the median over ``busy`` processes training ``settings`` at once: each a world of
    one, or (``world``) together one world of ``busy`` ranks over loopback (its phases are the
    slowest rank's, as in a trial)."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(busy), ctx.Queue()
    port = str(_free_port())
    worlds = [{"RANK": str(r), "WORLD_SIZE": str(busy), "LOCAL_WORLD_SIZE": str(busy), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port} if world and busy > 1 else None for r in range(busy)]
    processes = [ctx.Process(target=_worker, args=(settings, threads, w, barrier, results)) for w in worlds]
    for process in processes:
        process.start()
    try:
        figures = [results.get(timeout=_TIMEOUT_S) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
    return {phase: statistics.median(f[phase] for f in figures) for phase in PHASES}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=Path, required=True, help="results folder with one-worker trials")
    parser.add_argument("--busy", default="1,2,4", help="processes at once, comma-separated; 1 first")
    parser.add_argument("--hosts", type=int, default=4,
                        help="the emulated cluster's hosts: each process gets cores / hosts torch threads")
    parser.add_argument("--steps", type=int, default=100, help="steps per process (max_steps_per_epoch)")
    parser.add_argument("--world", action="store_true",
                        help="the k processes form one gloo world over loopback (a trial's hosts, but for the links)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.busy.split(",")]
    if counts[0] != 1:
        parser.error("--busy must start with 1: the factors are against one process alone")
    threads = max(1, (os.cpu_count() or 1) // args.hosts)
    configs, _ = configurations(read_trials(args.inputs))
    out: dict[str, Any] = {"environment": env_info.collect(), "inputs": str(args.inputs), "threads": threads,
                           "steps": args.steps, "world": args.world,
                           "configurations": []}
    print("| configuration | phase | alone (ms) | " + " | ".join(f"{k} busy" for k in counts[1:]) + " |")
    print("|---|---|---|" + "---|" * len(counts[1:]))
    for config in configs:
        settings = {**config.settings, "epochs": 1, "max_steps_per_epoch": args.steps, "target_accuracy": None}
        settings = {k: v for k, v in settings.items() if k in TRAINING_KEYS}
        times = {k: measure(settings, k, threads, args.world) for k in counts}
        scale = factors(times)
        out["configurations"].append({"configuration": config.label, "key": list(config.key),
                                      "seconds": times, "factors": scale})
        for phase in PHASES:
            if times[1][phase] > 0:
                print(f"| {config.label} | {phase} | {times[1][phase] * 1e3:.1f} | "
                      + " | ".join(f"{scale[k][phase]:.2f}x" for k in counts[1:]) + " |", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
        print(f"saved {args.json}")


if __name__ == "__main__":
    main()
