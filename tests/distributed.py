"""Run a function on N gloo ranks in spawned processes and collect what each returns."""
from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn: Callable, args: tuple, results: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results[rank] = ("ok", fn(rank, world, *args))
    except BaseException:  # reported to the parent, which fails the test
        results[rank] = ("error", traceback.format_exc())
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, fn: Callable, *args: Any, timeout: float = 120) -> list[Any]:
    """``fn(rank, world, *args)`` on every rank; its return values, by rank."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        port = free_port()
        procs = [ctx.Process(target=_worker, args=(r, world, port, fn, args, results)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
                raise TimeoutError(f"rank did not finish within {timeout} s")
        out = []
        for r in range(world):
            status, value = results.get(r, ("error", f"rank {r} died with exit code {procs[r].exitcode}"))
            if status != "ok":
                raise AssertionError(f"rank {r} failed:\n{value}")
            out.append(value)
        return out
