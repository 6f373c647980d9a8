"""The multi-process helpers of the tests: run a function on N ranks of one process group in
processes of their own and collect what each returns (``run_ranks``, also used by the benchmarks:
``from tests.distributed import run_ranks``, from the checkout), guard a rank's sub-checks, and the
small DDP model and data the hook tests train.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# Ranks are forked from a server process that has imported these once (multiprocessing's forkserver):
# a fresh interpreter per rank would import torch and the project again, seconds per world on 2 cores.
# torch._dynamo too, which DDP's constructor imports: seconds of each rank of every world that makes a DDP
# model (torch 2.13 imports it without calling into torch.cuda). The server never touches CUDA or starts
# threads, so forking it is safe (also for NCCL ranks). Not numba: its configuration (the kernels' cache
# folder) is read when it is imported, in each rank.
_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "compressors", "tests.distributed", "tests.helpers",
            "pytest"]


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)  # read when the server starts: the first world
    return context


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, backend: str, fn: Callable, args: tuple, environ: dict[str, str],
            out: str) -> None:
    # The server's environment is the one of the first world: each rank takes its caller's (what the
    # preloaded modules read when imported came from the first world's).
    os.environ.clear()
    os.environ.update(environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world)
        try:
            result = ("ok", fn(rank, world, *args))
        finally:
            dist.destroy_process_group()
    except BaseException:  # reported to the parent, which raises
        result = ("error", traceback.format_exc())
    try:
        data = pickle.dumps(result)
    except Exception:  # what fn returned cannot travel: say so rather than die without a word
        data = pickle.dumps(("error", traceback.format_exc()))
    with open(out + ".part", "wb") as f:
        f.write(data)
    os.replace(out + ".part", out)  # whole or absent: a rank killed while writing leaves none


def run_ranks(world: int, fn: Callable, *args: Any, backend: str = "gloo", timeout: float | None = 120) -> list[Any]:
    """``fn(rank, world, *args)`` on every rank of a ``backend`` group; the return values, by rank.

    ``fn`` and ``args`` must be picklable (a module-level function); so must
    what it returns.  With ``nccl`` rank r uses ``cuda:r``.  A rank that raises
    or dies makes this raise RuntimeError with its traceback; ranks still
    running after ``timeout`` seconds (None: no limit) are killed and this
    raises TimeoutError.
    """
    context = _context()
    with tempfile.TemporaryDirectory(prefix="ranks-") as folder:
        outs = [str(Path(folder) / f"rank{r}.pickle") for r in range(world)]
        port = free_port()
        procs = [context.Process(target=_worker, args=(r, world, port, backend, fn, args, dict(os.environ), outs[r]))
                 for r in range(world)]
        for p in procs:
            p.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in procs:
            p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        stuck = [r for r, p in enumerate(procs) if p.is_alive()]
        for r in stuck:
            procs[r].kill()
            procs[r].join()
        if stuck:
            raise TimeoutError(f"ranks {stuck} did not finish within {timeout} s")
        out = []
        for r in range(world):
            try:
                with open(outs[r], "rb") as f:
                    status, value = pickle.load(f)
            except FileNotFoundError:
                status, value = "error", f"rank {r} died with exit code {procs[r].exitcode}"
            if status != "ok":
                raise RuntimeError(f"rank {r} failed:\n{value}")
            out.append(value)
        return out


# ---------------------------------------------------------------- inside a rank


def guard(fn, *args):
    """``fn(*args)`` as ("ok", value) or ("error", traceback): one failing sub-check of a rank
    function is reported without hiding the others."""
    try:
        return ("ok", fn(*args))
    except Exception:
        return ("error", traceback.format_exc())


def ok(result, what: str = ""):
    """The value of a ``guard`` result, or an assertion naming what failed on a rank."""
    status, value = result
    assert status == "ok", f"{what} failed on a rank:\n{value}"
    return value


def gen(*seed: int) -> torch.Generator:
    """A generator seeded by several integers (test case, world, rank, tensor...)."""
    s = 0
    for part in seed:
        s = (s * 1_000_003 + part) % (2**61)
    return torch.Generator().manual_seed(s)


def make_mlp(d_in: int = 32, hidden: int = 64, classes: int = 4) -> torch.nn.Module:
    """Weights of 2048 and 4096 entries (compressed), biases and the 256-entry head (fp32 path)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def mlp_data(rank: int, n: int = 256, d_in: int = 32, classes: int = 4):
    """A learnable problem (a fixed random teacher), a different shard per rank."""
    teacher = torch.randn(d_in, classes, generator=gen(99))
    x = torch.randn(n, d_in, generator=gen(100, rank))
    y = (x @ teacher).argmax(dim=1)
    return x, y
