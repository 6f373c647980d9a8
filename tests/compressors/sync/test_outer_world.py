"""The outer loop on two ranks (gloo): through the training loop, local SGD with H = 1 is every-step fp32
averaging, DiLoCo with outer lr 1 and no momentum is local SGD exactly, an exchange's bytes are the
codec's payloads, and Streaming DiLoCo's overlapped fragments keep every rank's global parameters equal."""
from __future__ import annotations

import functools

import pytest
import torch
import torch.distributed as dist

import compressors as C
import workloads
from compressors.comm import accounting
from compressors.sync import OuterSync
from orchestrator.study.train_loop import train
from tests.distributed import gen, guard, make_mlp, ok, run_ranks

slow = pytest.mark.slow

PLAIN = {"dataset": "mnist", "model": "mlp", "width": 128, "depth": 2, "batch_size": 32, "optimizer": "sgd",
         "lr": 0.05, "momentum": 0.0, "seed": 0, "epochs": 1, "max_steps_per_epoch": 8, "eval_samples": 500}
CONFIGS = {
    "every_step": {**PLAIN, "compressor": "fp32"},
    "local_1": {**PLAIN, "compressor": "fp32", "sync": "local_sgd", "inner_steps": 1},
    "local_4": {**PLAIN, "compressor": "fp16", "sync": "local_sgd", "inner_steps": 4},
    "diloco_lr1": {**PLAIN, "compressor": "fp16", "sync": "diloco", "inner_steps": 4, "outer_lr": 1.0,
                   "outer_momentum": 0.0},
    "diloco_q4": {**PLAIN, "compressor": "qsgd", "compressor_params": {"bits": 4}, "sync": "diloco",
                  "inner_steps": 4},
    # epochs of 6 steps, runs of 4: a run the first epoch leaves unfinished ends in the second
    "windows": {**PLAIN, "compressor": "fp16", "sync": "local_sgd", "inner_steps": 4, "epochs": 2,
                "max_steps_per_epoch": 6},
    "streaming": {**PLAIN, "compressor": "qsgd", "compressor_params": {"bits": 4}, "sync": "diloco",
                  "inner_steps": 4, "fragments": 2, "overlap_steps": 1},
}
QSGD = {"bits": 4, "bucket": 128}


def _exchange_bytes(rank: int, world: int) -> dict:
    """One blocking exchange of qsgd over allgather, every tensor compressed: its statistics and shapes."""
    model = make_mlp()
    params = list(model.parameters())
    sync = OuterSync(params, C.Reducer("qsgd", "allgather", min_compress_numel=0, **QSGD), inner_steps=1)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=gen(rank, p.numel())))
    sync.after_step()
    return {"bytes_sent": sync.history[-1].bytes_sent, "shapes": [tuple(p.shape) for p in params]}


def _streaming_globals(rank: int, world: int) -> list[torch.Tensor]:
    """Each rank's global parameters after Streaming DiLoCo's overlapped fragments, gathered."""
    model = make_mlp()
    params = list(model.parameters())
    from compressors.comm.reducer import phase_group
    sync = OuterSync(params, C.Reducer("qsgd", group=phase_group(None), bits=4), inner_steps=4, fragments=2,
                     overlap_steps=1, outer_lr=0.7, outer_momentum=0.9)
    inner = torch.optim.SGD(params, lr=0.1)
    for step in range(11):
        x = torch.randn(16, 32, generator=gen(rank, step))
        loss = model(x).pow(2).mean()
        inner.zero_grad()
        loss.backward()
        inner.step()
        sync.after_step()
        dist.barrier()  # the default group's collectives meanwhile, as the training loop's
    sync.close()
    flat = torch.cat([g.flatten() for g in sync.global_params])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    return gathered


def battery(rank: int, world: int) -> dict:
    return {"trained": {key: guard(train, config, None, 1) for key, config in CONFIGS.items()},
            "bytes": guard(_exchange_bytes, rank, world), "streaming": guard(_streaming_globals, rank, world)}


@functools.lru_cache(maxsize=None)
def results() -> tuple[dict, ...]:
    return tuple(run_ranks(2, battery, timeout=600))


def _final(key: str) -> dict:
    return ok(results()[0]["trained"][key], key)["final"]


@slow
def test_local_sgd_every_step_is_every_step_fp32_averaging():
    every, local = _final("every_step"), _final("local_1")
    assert local["test_loss"] == pytest.approx(every["test_loss"], rel=1e-5, abs=0)
    assert local["train_loss"] == pytest.approx(every["train_loss"], rel=1e-5, abs=0)


@slow
def test_diloco_with_outer_lr_1_and_no_momentum_is_local_sgd_exactly():
    local, diloco = _final("local_4"), _final("diloco_lr1")
    for key in ("test_loss", "test_accuracy", "train_loss", "bytes_sent", "peak_bytes_sent"):
        assert diloco[key] == local[key], key


@slow
def test_an_exchange_sends_the_codecs_payloads_and_bytes_per_step_average_over_the_inner_steps():
    for rank in ok(results()[0]["bytes"], "bytes"), ok(results()[1]["bytes"], "bytes"):
        codec = C.get("qsgd", **QSGD)
        assert rank["bytes_sent"] == sum(accounting.allgather_bytes(codec.payload_nbytes(s), 2) for s in rank["shapes"])
    # fp16 over a ring: the large tensors in 2 bytes, the small ones (< min_compress_numel) in 4; two
    # exchanges in 8 steps
    model = workloads.build_model("mlp", (1, 28, 28), 10, width=128, depth=2)
    numels = [p.numel() for p in model.parameters()]
    exchange = sum(2 * n if n >= 1024 else 4 * n for n in numels)  # ring of 2 ranks: each sends its bytes once
    local = _final("local_4")
    assert local["peak_bytes_sent"] == exchange
    assert local["bytes_sent"] == exchange * 2 / 8
    assert local["compression_ratio"] == pytest.approx(4 * sum(numels) / (exchange * 2 / 8))


@slow
def test_streaming_diloco_keeps_every_ranks_global_parameters_equal_and_trains():
    gathered = ok(results()[0]["streaming"], "streaming")
    assert torch.equal(gathered[0], gathered[1])
    streaming = _final("streaming")
    assert streaming["status"] == "ok" and streaming["peak_bytes_sent"] > 0
    # each exchange sends one of two fragments: its peak is below the whole model's
    assert 0 < streaming["peak_bytes_sent"] < _final("diloco_q4")["peak_bytes_sent"]


@slow
def test_a_step_time_is_the_mean_of_each_finished_run_of_inner_steps_steps_across_epochs():
    result = ok(results()[0]["trained"]["windows"], "windows")
    first, second = result["history"]
    # steps 1-4 finish a run in epoch 1; 5-8 (begun in epoch 1) and 9-12 in epoch 2
    assert len(result["step_times_s"]) == 3
    # each finished run holds one exchange: bytes per step are the same in both epochs
    assert first["bytes_sent"] == second["bytes_sent"] == _final("local_4")["peak_bytes_sent"] / 4
    for epoch in (first, second):
        assert epoch["exposed_comm_s"] > 0  # the exchange's wait, a quarter of it per step
        assert epoch["compute_s"] + epoch["exposed_comm_s"] == pytest.approx(epoch["step_time_s"], rel=1e-12)
