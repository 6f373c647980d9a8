"""DDP training through the communication hooks (compressors/ddp) on one and two gloo ranks (spawned once
per world size): the same parameters on every rank, fp32's hook as native DDP, 8-bit QSGD close to it,
the loss going down, one StepStats per step, PowerSGD's rank and options, and the HookSwitch.
"""
from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from compressors import ddp
from tests.distributed import guard, make_mlp, mlp_data, ok, run_ranks
from tests.helpers import ring

slow = pytest.mark.slow  # every test that spawns processes
SPAWN_TIMEOUT = 150

DDP_STEPS = 20
DDP_RUNS = {
    "native": None,
    "fp32": ("fp32", {}),
    "qsgd8": ("qsgd", {"bits": 8}),
    "onebit": ("onebit", {}),
    "adaptive": ("adaptive", {"pi": 0.05}),
    "powersgd": ("powersgd", {"matrix_rank": 2}),
    "powersgd_options": ("powersgd", {"matrix_rank": 2, "start_iter": 3, "min_compression_rate": 4.0,
                                      "use_error_feedback": False, "warm_start": False}),
}


def _train(rank, run):
    model = make_mlp()
    ddp_model = DDP(model)
    state = None
    if DDP_RUNS[run] is not None:
        name, p = DDP_RUNS[run]
        state = ddp.comm_hook(name, **p)
        state.register(ddp_model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = mlp_data(rank)
    losses, ranks = [], []
    for t in range(DDP_STEPS):
        batch = slice((t * 32) % 256, (t * 32) % 256 + 32)
        opt.zero_grad()
        loss = F.cross_entropy(ddp_model(x[batch]), y[batch])
        loss.backward()
        # the rank of the two larger weights' averaged gradients (PowerSGD: at most matrix_rank once it compresses)
        ranks.append([int(torch.linalg.matrix_rank(model[i].weight.grad)) for i in (0, 2)])
        opt.step()
        with torch.no_grad():
            losses.append(float(F.cross_entropy(model(x), y)))
    params = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    history = None if state is None else [(s.bytes_sent, s.numel, s.bytes_inter) for s in state.history]
    extra = {}
    if run.startswith("powersgd"):
        extra["compression_stats"] = state.powersgd.compression_stats()
    if run == "powersgd":
        saved = state.state_dict()
        fresh = ddp.comm_hook("powersgd", **DDP_RUNS[run][1])
        fresh.load_state_dict(saved)
        extra["restored"] = (fresh.step, fresh.powersgd.iter, sorted(fresh.powersgd.error_dict))
        extra["saved"] = (state.step, state.powersgd.iter, sorted(state.powersgd.error_dict))
    return {"losses": losses, "params": params, "history": history, "grad_ranks": ranks, **extra}


def _switch(rank):
    """HookSwitch over fp32 then qsgd: the switch hands the buckets to the active state only."""
    model = make_mlp()
    ddp_model = DDP(model)
    warm, main = ddp.comm_hook("fp32"), ddp.comm_hook("qsgd", bits=8)
    switch = ddp.HookSwitch(warm)
    switch.register(ddp_model, [warm, main])
    x, y = mlp_data(rank)
    counts = []
    for t in range(4):
        switch.active = warm if t < 2 else main
        F.cross_entropy(ddp_model(x[:32]), y[:32]).backward()
        counts.append((len(warm.history), len(main.history)))
    try:
        switch.active = ddp.comm_hook("fp32")
        refused = None
    except ValueError as err:
        refused = str(err)
    return {"counts": counts, "refused": refused, "bound": len(main.param_index)}


def ddp_training(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    out = {run: guard(_train, rank, run) for run in DDP_RUNS}
    out["switch"] = guard(_switch, rank)
    return out


@functools.lru_cache(maxsize=None)
def ddp_results(world: int) -> list[dict]:
    return run_ranks(world, ddp_training, timeout=SPAWN_TIMEOUT)


def ddp_run(run: str, world: int) -> list[dict]:
    return [ok(r[run], f"DDP {run} (world {world})") for r in ddp_results(world)]


# One worker trains as DDP over a one-process group: every method goes through its hook.
DDP_WORLDS = pytest.mark.parametrize("world", [1, 2])
NUMEL = sum(q.numel() for q in make_mlp().parameters())


@slow
@DDP_WORLDS
@pytest.mark.parametrize("run", list(DDP_RUNS))
def test_ddp_parameters_identical_on_every_rank(run, world):
    res = ddp_run(run, world)
    assert len(res) == world
    for r in res[1:]:
        assert torch.equal(r["params"], res[0]["params"])


@slow
@DDP_WORLDS
def test_ddp_hook_fp32_matches_native_ddp(world):
    native = ddp_run("native", world)[0]["params"]
    ours = ddp_run("fp32", world)[0]["params"]
    if world == 1:  # nothing to average: both hand the gradients back unchanged
        assert torch.equal(ours, native)
    else:
        torch.testing.assert_close(ours, native, rtol=1e-5, atol=1e-6)


@slow
@DDP_WORLDS
def test_ddp_hook_qsgd8_stays_close_to_native(world):
    init = torch.cat([q.detach().reshape(-1) for q in make_mlp().parameters()])
    native = ddp_run("native", world)[0]["params"]
    ours = ddp_run("qsgd8", world)[0]["params"]
    assert not torch.equal(ours, native)  # it did quantize, with one worker too
    assert float((ours - native).norm() / native.norm()) < 0.02
    # and small against how far training moved the parameters
    assert float((ours - native).norm() / (native - init).norm()) < 0.05


@slow
@DDP_WORLDS
@pytest.mark.parametrize("run", list(DDP_RUNS))
def test_ddp_loss_decreases(run, world):
    losses = [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in ddp_run(run, world)))]
    assert losses[-1] < 0.9 * losses[0], losses


@slow
@DDP_WORLDS
@pytest.mark.parametrize("run", [r for r in DDP_RUNS if r != "native"])
def test_ddp_history_has_one_stepstats_per_step(run, world):
    for r in ddp_run(run, world):
        hist = r["history"]
        assert len(hist) == DDP_STEPS
        assert all(n == NUMEL for _, n, _ in hist)
        # Every rank a host of its own (no topology given): whatever is sent crosses hosts, PyTorch's hooks too.
        assert all(inter == b for b, _, inter in hist)
        if world == 1:  # nothing is sent
            assert all(b == 0.0 for b, _, _ in hist)
        elif run == "fp32":
            assert all(b == pytest.approx(ring(4 * NUMEL, 2)) for b, _, _ in hist)
        else:  # compressed: fewer bytes than fp32 once compression is on
            assert all(b > 0 for b, _, _ in hist) and hist[-1][0] < ring(4 * NUMEL, 2)


@slow
@DDP_WORLDS
def test_powersgd_compresses_from_its_third_step(world):
    """PowerSGD averages in fp32 for two steps, then sends rank-2 factors of the two larger
    weights' gradients: their averaged gradients have rank 2 from then on, with one worker too."""
    native = ddp_run("native", world)[0]["grad_ranks"]
    assert all(min(ranks) > 2 for ranks in native)
    for r in ddp_run("powersgd", world):
        assert all(min(ranks) > 2 for ranks in r["grad_ranks"][:2]), r["grad_ranks"]
        assert all(ranks == [2, 2] for ranks in r["grad_ranks"][2:]), r["grad_ranks"]
        # torch's own count: elements before and after compression, over the compressing steps
        rate, before, after = r["compression_stats"]
        assert before == (DDP_STEPS - 2) * NUMEL
        assert after == (DDP_STEPS - 2) * (NUMEL - 64 * 32 - 64 * 64 + (64 + 32) * 2 + (64 + 64) * 2)
        assert r["restored"] == r["saved"] and r["saved"][:2] == (DDP_STEPS, DDP_STEPS)
        if world == 2:  # the factors and the uncompressed tensors travel in three ring all_reduces
            assert r["history"][0][0] == ring(4 * NUMEL, 2)
            assert r["history"][-1][0] == ring(4 * (after // (DDP_STEPS - 2)), 2)


@slow
@DDP_WORLDS
def test_powersgd_options_reach_pytorchs_state(world):
    """start_iter 3: three fp32 steps; min_compression_rate 4: the 64 x 32 weight ((64 + 32) 2 x 4 = 768 <
    2048) and the 64 x 64 one (1024 < 4096) are still compressed, nothing else (error feedback and warm
    start off)."""
    for r in ddp_run("powersgd_options", world):
        rate, before, after = r["compression_stats"]
        assert before == (DDP_STEPS - 3) * NUMEL
        assert after == (DDP_STEPS - 3) * (NUMEL - 64 * 32 - 64 * 64 + (64 + 32) * 2 + (64 + 64) * 2)
        assert all(min(ranks) > 2 for ranks in r["grad_ranks"][:3])
        assert all(ranks == [2, 2] for ranks in r["grad_ranks"][3:])
        if world == 2:
            assert [h[0] for h in r["history"][:3]] == [ring(4 * NUMEL, 2)] * 3


@slow
@DDP_WORLDS
def test_hook_switch_hands_buckets_to_the_active_state(world):
    for r in ddp_run("switch", world):
        assert r["counts"] == [(1, 0), (2, 0), (2, 1), (2, 2)]
        assert "was not registered with this HookSwitch" in r["refused"]
        assert r["bound"] == len(list(make_mlp().parameters()))
