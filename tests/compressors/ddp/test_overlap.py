"""Overlapped DDP hooks (compressors.comm.pipeline, compressors.ddp) on 2 gloo ranks.

Overlap on and off must give the same parameters bit for bit, after steps over
several DDP buckets; an overlapped hook must return before its collectives are
done; a failing hook must surface on every rank, without a hang; the fp32
baseline is plain DDP, with no hook.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from compressors import ddp
from compressors.comm.stats import span_union
from compressors.ddp.step_clock import StepClock

from tests.distributed import guard, make_mlp, mlp_data, ok, run_ranks

slow = pytest.mark.slow
STEPS = 6
BUCKET_CAP_MB = 0.0005  # DDP closes a bucket once it holds >= 512 B: the MLP then has 3, whose phases overlap
METHODS = {
    "fp32": ("fp32", {}),
    "fp16": ("fp16", {}),
    "dynamic8": ("dynamic8", {}),
    "qsgd": ("qsgd", {"bits": 4}),
    "onebit": ("onebit", {}),
    "adaptive": ("adaptive", {"pi": 0.05}),
    "powersgd": ("powersgd", {"matrix_rank": 2}),
    "qsgd-allgather": ("qsgd", {"bits": 4, "algorithm": "allgather"}),
}


def _train(rank: int, name: str, params: dict, overlap: bool) -> dict:
    model = make_mlp()
    ddp_model = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)
    state = ddp.comm_hook(name, overlap=overlap, **params)
    buckets: set[int] = set()

    def counting(st, bucket):
        buckets.add(bucket.index())
        return type(st).hook(st, bucket)

    state.bind(ddp_model)
    ddp_model.register_comm_hook(state, counting)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = mlp_data(rank)
    for t in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(ddp_model(x[t * 32:(t + 1) * 32]), y[t * 32:(t + 1) * 32]).backward()
        opt.step()
    return {"params": torch.cat([q.detach().reshape(-1) for q in model.parameters()]),
            "buckets": len(buckets),
            "steps": state.step, "history": len(state.history),
            "spans": [len(s.comm_spans) for s in state.history],
            "comm_is_union": all(s.comm_s == span_union(s.comm_spans) for s in state.history)}


def battery(rank: int, world: int, signal: str) -> dict:
    """Every check here that has no rank fail, in one world (a world costs seconds to start, most of them
    each rank's import of what DDP's constructor imports): overlap on and off for each method, plain DDP
    beside the fp32 hook, and the overlapped hook's early return (``signal``: a file not there yet)."""
    torch.set_num_threads(1)
    return {"pairs": {(run, overlap): guard(_train, rank, *METHODS[run][:2], overlap)
                      for run in METHODS for overlap in (True, False)},
            "plain_and_hooked": guard(_plain_and_hooked, rank, world),
            "early_return": guard(_early_return, rank, world, signal)}


_RESULTS: dict[int, list[dict]] = {}


def results() -> list[dict]:
    if not _RESULTS:
        with tempfile.TemporaryDirectory(prefix="overlap-") as folder:
            _RESULTS[0] = run_ranks(2, battery, str(Path(folder) / "hooked"), timeout=360)
    return _RESULTS[0]


@slow
@pytest.mark.parametrize("run", list(METHODS))
def test_overlap_on_and_off_give_identical_parameters(run):
    per_rank = [(ok(r["pairs"][(run, True)], f"{run} overlapped"),
                 ok(r["pairs"][(run, False)], f"{run} to completion")) for r in results()]
    for on, off in per_rank:
        assert on["buckets"] >= 3, "the test needs several buckets to overlap"
        assert torch.equal(on["params"], off["params"])
        assert on["steps"] == off["steps"] == on["history"] == STEPS
        assert on["spans"] == off["spans"] and min(on["spans"]) >= 1
        assert on["comm_is_union"] and off["comm_is_union"]
    assert torch.equal(per_rank[0][0]["params"], per_rank[1][0]["params"])


def _early_return(rank: int, world: int, signal: str) -> dict:
    """Overlapped, rank 1 starts its backward only once rank 0's first hook has returned (a file says
    so): rank 0's hooks must return while none of their collectives can have completed. To completion,
    both ranks start at once and every hook returns its bucket done."""
    torch.set_num_threads(1)
    out = {}
    for overlap in (True, False):
        model = make_mlp()
        ddp_model = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)
        state = ddp.comm_hook("qsgd", bits=4, overlap=overlap)
        done_at_return: list[bool] = []
        # Set here between the two backward passes, not read from the state's step count: the first
        # backward's one bucket (DDP's first bucket holds the whole MLP) closes the step in a callback that
        # may run before the hook returns, and step 1 then began in the first backward.
        second: list[bool] = []

        def watched(st, bucket):
            fut = ddp.reducer_hook(st, bucket)
            if second:  # the second backward: DDP has rebuilt its buckets (3)
                done_at_return.append(fut.done())
                if overlap and rank == 0:
                    open(signal, "w").close()
            return fut

        state.bind(ddp_model)
        ddp_model.register_comm_hook(state, watched)
        x, y = mlp_data(rank)
        F.cross_entropy(ddp_model(x[:32]), y[:32]).backward()
        dist.barrier()
        loss = F.cross_entropy(ddp_model(x[:32]), y[:32])  # forward: DDP syncs its rebuilt buckets here
        if overlap and rank == 1:
            deadline = time.monotonic() + 60
            while not os.path.exists(signal):
                if time.monotonic() > deadline:
                    raise TimeoutError("rank 0's overlapped hook did not return while rank 1 waited")
                time.sleep(0.01)
        second.append(True)
        loss.backward()
        out[overlap] = done_at_return
    return out


@slow
def test_an_overlapped_hook_returns_before_its_collectives_complete():
    rank0 = ok(results()[0]["early_return"], "the early return")
    assert len(rank0[True]) >= 3 and not any(rank0[True])
    # to completion: the hook itself waits for its collectives
    assert len(rank0[False]) >= 3 and all(rank0[False])


# What _failing made, kept for the life of the rank: the rank's process ends without destructors
# (os._exit), which closes its connections, so the peer still blocked on it gets its error. Freed when
# _failing returned, DDP's Reducer destroyed its process groups in this thread, holding the GIL, joining
# gloo's threads while one of them waited for the GIL to run a Python callback of a collective still in
# flight: the rank hung, and its peer with it (about one world in three).
_KEPT: list = []


def _failing(rank: int, world: int, where: str, overlap: bool) -> str:
    """Rank 0's codec raises in encode (in the hook) or in decode (in a callback, when overlapped) at
    step 2; every rank returns what it raised."""
    torch.set_num_threads(1)
    model = make_mlp()
    ddp_model = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)
    state = ddp.comm_hook("qsgd", bits=4, overlap=overlap)
    state.register(ddp_model)
    _KEPT.append((ddp_model, state))
    codec = state.reducer.codec
    # the collectives encode and decode a bucket's tensors in one call
    original = getattr(codec, f"{where}_many")

    def broken(*args, **kwargs):
        if rank == 0 and state.reducer.step == 2:
            raise RuntimeError(f"{where} failed on purpose")
        return original(*args, **kwargs)

    setattr(codec, f"{where}_many", broken)
    x, y = mlp_data(rank)
    try:
        for t in range(4):
            F.cross_entropy(ddp_model(x[t * 32:(t + 1) * 32]), y[t * 32:(t + 1) * 32]).backward()
            dist.barrier()
    except Exception as error:
        # What a training loop does with an error: leave the group, so that peers blocked on this
        # rank get an error of their own instead of waiting for it.
        dist.destroy_process_group()
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # for the harness's finally
        return f"{type(error).__name__}: {error}"
    return "no error"


@slow
@pytest.mark.parametrize("where", ["encode", "decode"])
@pytest.mark.parametrize("overlap", [True, False])
def test_an_exception_in_one_ranks_hook_surfaces_on_every_rank(where, overlap):
    rank0, rank1 = run_ranks(2, _failing, where, overlap, timeout=90)
    assert f"{where} failed on purpose" in rank0
    assert rank1 != "no error", rank1


def _plain_and_hooked(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    out = {}
    for hooked in (False, True):
        model = make_mlp()
        ddp_model = DDP(model, bucket_cap_mb=BUCKET_CAP_MB)
        if hooked:
            ddp.comm_hook("fp32").register(ddp_model)
        clock = StepClock(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = mlp_data(rank)
        exposed = []
        for t in range(3):
            clock.start()
            opt.zero_grad()
            F.cross_entropy(ddp_model(x[t * 32:(t + 1) * 32]), y[t * 32:(t + 1) * 32]).backward()
            exposed.append(clock.exposed_s(time.perf_counter()))
            opt.step()
        out[hooked] = {"params": torch.cat([q.detach().reshape(-1) for q in model.parameters()]),
                       "hook": ddp_model._get_ddp_logging_data().get("comm_hook", ""), "exposed": exposed}
    return out


@slow
def test_plain_ddp_and_the_fp32_hook_agree_and_only_the_hook_is_registered():
    for r in (ok(res["plain_and_hooked"], "plain DDP and the fp32 hook") for res in results()):
        assert torch.equal(r[False]["params"], r[True]["params"])
        assert r[False]["hook"] == "" and "allreduce_hook" in r[True]["hook"]
        assert all(e >= 0 for e in r[False]["exposed"] + r[True]["exposed"])
