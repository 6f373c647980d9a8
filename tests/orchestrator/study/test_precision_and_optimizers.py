"""The precision setting and the compressors that take the optimizer's steps (onebit_adam) in the training
loop: bf16 autocast trains with the gradients reaching DDP's hook as float32, fp16 is refused where it cannot
run, and 1-bit Adam's settings are refused where they cannot apply."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.distributed as dist

from compressors.ddp import hooks
from orchestrator.study import ddp_setup, settings, train_loop
from orchestrator.study.sweep_file import SweepFileError, load_sweep
from orchestrator.study.train_loop import train
from tests.helpers import SWEEP_HEADER as HEADER
from tests.helpers import write

TINY = {"model": "mlp", "width": 16, "depth": 1, "dataset": "synthetic", "num_samples": 256, "batch_size": 32,
        "epochs": 2, "max_steps_per_epoch": 4, "lr": 0.1}


def test_bf16_autocast_trains_and_the_hook_gets_float32_gradients(monkeypatch):
    seen: list[torch.dtype] = []
    original = hooks.ReducerHookState.hook

    def watched(state, bucket):
        seen.append(bucket.buffer().dtype)
        return original(state, bucket)

    monkeypatch.setattr(hooks.ReducerHookState, "hook", staticmethod(watched))
    outputs: list[torch.dtype] = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: outputs.append(out.dtype) if isinstance(module, torch.nn.Linear) else None)
    try:
        result = train({**TINY, "compressor": "qsgd", "precision": "bf16"})
    finally:
        handle.remove()
    assert result["status"] == "ok"
    assert result["history"][1]["train_loss"] < result["history"][0]["train_loss"] - 0.3  # it learns
    assert len(seen) == 8 and set(seen) == {torch.float32}  # a bucket a step
    assert set(outputs) == {torch.bfloat16}  # the forward passes, training's and evaluation's, ran in bf16
    assert [h["epoch"] for h in result["history"]] == [1, 2]


def test_one_worker_onebit_adam_trains_through_the_loop_with_its_warmup_then_its_codec():
    result = train({**TINY, "compressor": "onebit_adam", "compressor_params": {"warmup_steps": 5},
                    "optimizer": "adam", "lr": 0.01, "min_compress_numel": 0})
    assert result["status"] == "ok" and math.isfinite(result["final"]["test_loss"])
    # steps 6 to 8, in the second epoch, are compressed: it learns on
    assert result["history"][1]["train_loss"] < result["history"][0]["train_loss"] - 0.1


@pytest.mark.parametrize("given, key, words", [
    ({"precision": "fp16"}, "precision", "fp16 autocast with a gradient scaler is for GPUs"),
    ({"precision": "fp16", "use_gpu": True, "sync": "diloco", "inner_steps": 4}, "precision",
     "with sync diloco each worker's gradient scaler sees only its own gradients"),
    ({"precision": "fp16", "use_gpu": True, "compressor": "onebit_adam", "optimizer": "adam"}, "precision",
     "with onebit_adam each worker's gradient scaler"),
    ({"precision": "fp16", "use_gpu": True, "compressor": "topk"}, "precision",
     "topk keeps a residual of what it compressed, with fp16 the scaled gradients"),
    ({"precision": "fp16", "use_gpu": True, "compressor": "powersgd"}, "precision", "powersgd keeps a residual"),
    ({"compressor": "onebit_adam"}, "optimizer", "onebit_adam takes Adam's steps itself"),
    ({"compressor": "onebit_adam", "optimizer": "adamw", "warmup_epochs": 1, "epochs": 2}, "warmup_epochs",
     "onebit_adam has a warm-up of its own"),
    ({"compressor": "onebit_adam", "optimizer": "adam", "sync": "local_sgd", "inner_steps": 4}, "compressor",
     "onebit_adam averages inside every optimizer step"),
    ({"optimizer": "adamw", "momentum": 0.9}, "momentum", "adamw takes no momentum"),
    ({"compressor": "onebit_adam", "optimizer": "adam", "algorithm": "sra"}, "algorithm",
     "valid: none (it runs its own communication)"),
])
def test_a_setting_that_cannot_apply_is_refused_naming_it(given, key, words):
    with pytest.raises(ValueError, match=f"setting {key}: .*{re.escape(words)}"):
        settings.check_training(given)


def test_a_sweep_refuses_onebit_adam_with_sgd_at_its_line(tmp_path):
    path = write(tmp_path, HEADER + "sweep:\n  compressor:\n    - {name: onebit_adam, warmup_steps: 10}\n")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    assert str(caught.value).startswith(f"{path}:") and "use optimizer: adam or adamw" in str(caught.value)


def test_a_sweep_crosses_precision_and_keeps_onebit_adams_parameters(tmp_path):
    path = write(tmp_path, HEADER.replace("workload:\n", "workload:\n  optimizer: adam\n", 1) + """\
baselines: false
sweep:
  precision: [fp32, bf16]
  compressor:
    - fp32
    - {name: onebit_adam, warmup_steps: 10, codec: qsgd}
""")
    trials = load_sweep(path).trials
    assert sorted((t["compressor"], t["precision"]) for t in trials) == [
        ("fp32", "bf16"), ("fp32", "fp32"), ("onebit_adam", "bf16"), ("onebit_adam", "fp32")]
    onebit = [t for t in trials if t["compressor"] == "onebit_adam"]
    assert all(t["compressor_params"] == {"warmup_steps": 10, "codec": "qsgd"} and t["algorithm"] is None
               for t in onebit)


def test_the_fp16_path_trains_with_a_gradient_scaler_and_the_hook_gets_scaled_float32_gradients(monkeypatch):
    """fp16 is refused on CPUs (slow there), but torch runs its autocast and gradient scaler on CPUs too: the
    loop's fp16 path, the one GPUs take, run here past the refusal."""
    peaks: list[tuple[torch.dtype, float]] = []
    original = hooks.ReducerHookState.hook

    def watched(state, bucket):
        peaks.append((bucket.buffer().dtype, float(bucket.buffer().abs().max())))
        return original(state, bucket)

    monkeypatch.setattr(hooks.ReducerHookState, "hook", staticmethod(watched))
    config = {**settings.check_training({**TINY, "compressor": "qsgd"}), "precision": "fp16"}
    rank, world, device, made = ddp_setup.setup_distributed(config, None)
    try:
        result = train_loop._train(config, None, rank, world, device, None)
    finally:
        if made:
            dist.destroy_process_group()
    assert result["status"] == "ok"
    assert result["history"][1]["train_loss"] < result["history"][0]["train_loss"] - 0.3
    # the loss scaled by 2^16: the gradients the hook compresses are scaled too, and still float32
    assert {dtype for dtype, _ in peaks} == {torch.float32} and min(peak for _, peak in peaks) > 100
