"""The training loop (orchestrator/study/train_loop.py): one worker in-process, two workers on gloo
(spawned), and its command line."""
from __future__ import annotations

import functools
import math
import re

import pytest

from orchestrator.study import settings
from orchestrator.study.env_info import cpu_ticks
from orchestrator.study.train_loop import _parse_args, train
from tests.distributed import run_ranks
from tests.helpers import ROOT
from tests.mains import run_main

SMALL_MLP = {"dataset": "mnist", "model": "mlp", "width": 128, "depth": 2, "batch_size": 64,
             "optimizer": "sgd", "lr": 0.05, "seed": 0}


def _train_each_on_rank(rank: int, world: int, configs: dict[str, dict]) -> dict[str, dict]:
    """Every configuration trained in turn in one world (a spawned world costs seconds to start)."""
    return {key: train(config) for key, config in configs.items()}


# The two-worker runs of the slow tests, by name: one world trains them all.
TWO_WORKERS = {
    "doubled": {**SMALL_MLP, "epochs": 6, "max_steps_per_epoch": 1, "compressor": "fp32"},
    "fp32": {**SMALL_MLP, "epochs": 2, "compressor": "fp32"},
    "qsgd": {**SMALL_MLP, "epochs": 2, "compressor": "qsgd", "compressor_params": {"bits": 8}},
    "dynamic8": {**SMALL_MLP, "epochs": 2, "compressor": "dynamic8", "compressor_params": {}},
    "onebit": {**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 40, "compressor": "onebit", "compressor_params": {}},
    "adaptive": {**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 40, "compressor": "adaptive",
                 "compressor_params": {"pi": 0.05}},
    "warmup": {**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 3, "warmup_epochs": 1, "compressor": "qsgd",
               "compressor_params": {"bits": 4}},
}


@functools.lru_cache(maxsize=None)
def two_workers() -> tuple[dict[str, dict], ...]:
    """Each rank's results of TWO_WORKERS."""
    return tuple(run_ranks(2, _train_each_on_rank, TWO_WORKERS, timeout=600))


@pytest.mark.slow
def test_mlp_reaches_93_percent_on_builtin_mnist_with_one_worker():
    reports = []
    result = train({**SMALL_MLP, "width": 256, "epochs": 3, "target_accuracy": 0.93}, report=reports.append)
    assert result["status"] == "ok"
    assert [m["epoch"] for m in reports] == [1, 2, 3]
    assert result["final"]["test_accuracy"] >= 0.93
    assert result["final"]["time_to_target_s"] is not None
    assert 0 < result["final"]["time_to_target_s"] <= result["final"]["train_time_s"]
    # Train time only grows, and one worker sends nothing.
    times = [m["train_time_s"] for m in reports]
    assert times == sorted(times) and times[0] > 0
    assert all(m["bytes_sent"] == 0 for m in reports)
    assert math.isnan(result["final"]["compression_ratio"])
    weights, biases = 784 * 256 + 256 * 256 + 256 * 10, 256 + 256 + 10
    assert result["model_summary"] == {"parameters": weights + biases, "grad_bytes_fp32": 4 * (weights + biases),
                                       "compressible_share": pytest.approx(weights / (weights + biases))}


@pytest.mark.slow
def test_two_workers_with_fp32_match_one_worker_with_the_doubled_batch():
    # One step per epoch, so the per-epoch train loss is the per-step loss curve.
    single = train({**TWO_WORKERS["doubled"], "batch_size": 128})
    double = [ranked["doubled"] for ranked in two_workers()]
    for ranked in double:
        assert [m["train_loss"] for m in ranked["history"]] == pytest.approx(
            [m["train_loss"] for m in single["history"]], rel=1e-5)
        assert [m["test_accuracy"] for m in ranked["history"]] == pytest.approx(
            [m["test_accuracy"] for m in single["history"]], abs=1e-3)
    # fp32 ring all_reduce of every gradient: 2 (N-1) / N * 4 bytes per element.
    numel = 784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10
    assert double[0]["final"]["bytes_sent"] == pytest.approx(4 * numel)
    assert double[0]["final"]["compression_ratio"] == pytest.approx(1.0)
    # plain DDP: no hook, so its collectives' own time is not observable; what backward left exposed is
    final = double[0]["final"]
    assert math.isnan(final["comm_s"]) and final["encode_s"] == final["decode_s"] == 0.0
    assert final["exposed_comm_s"] >= 0 and 0 < final["compute_s"] <= final["step_time_s"]
    # the machine's CPU shares, agreed over the ranks (steal: the most; idle: the least)
    for share in ("cpu_steal_share", "cpu_idle_share"):
        values = [ranked["final"][share] for ranked in double]
        if cpu_ticks() is None:
            assert all(math.isnan(v) for v in values)
        else:
            assert values[0] == values[1] and 0.0 <= values[0] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("compressor", ["qsgd", "dynamic8"])
def test_8bit_methods_end_within_one_point_of_fp32(compressor):
    base, low = two_workers()[0]["fp32"], two_workers()[0][compressor]
    assert low["status"] == "ok"
    assert abs(low["final"]["test_accuracy"] - base["final"]["test_accuracy"]) <= 0.01
    assert low["final"]["compression_ratio"] > 3.0


@pytest.mark.slow
@pytest.mark.parametrize("compressor", ["onebit", "adaptive"])
def test_biased_methods_with_error_feedback_still_train(compressor):
    result = two_workers()[0][compressor]
    losses = [m["train_loss"] for m in result["history"]]
    assert result["status"] == "ok"
    assert losses[1] < losses[0] < math.log(10)
    assert result["final"]["test_accuracy"] > 0.5


@pytest.mark.slow
def test_fp32_warmup_epochs_send_fp32_then_compressed_bytes():
    history = two_workers()[0]["warmup"]["history"]
    assert history[0]["compression_ratio"] == pytest.approx(1.0)
    assert history[1]["compression_ratio"] > 4.0
    # fp32 warm-up runs through PyTorch's allreduce_hook, whose collectives are timed
    assert all(m["comm_s"] > 0 and m["exposed_comm_s"] >= 0 for m in history)


def test_a_forced_nan_ends_the_run_as_diverged():
    reports = []
    result = train({**SMALL_MLP, "epochs": 3, "max_steps_per_epoch": 5, "force_nan_at_step": 2},
                   report=reports.append)
    assert result["status"] == "diverged"
    assert "epoch 1" in result["reason"]
    assert len(result["history"]) == 1 and reports[-1]["status"] == "diverged"


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_largest_lr_and_weight_decay_end_diverged_not_in_torch(optimizer):
    # beyond these bounds torch refuses the optimizer's float32 scalars and the step raises
    top = settings.OPTIMIZER_SCALAR_MAX
    result = train({"model": "mlp", "width": 16, "depth": 1, "optimizer": optimizer, "lr": top, "weight_decay": top,
                    "epochs": 1, "max_steps_per_epoch": 1})
    assert result["status"] == "diverged", result


def test_fail_at_epoch_raises_and_unknown_settings_are_rejected():
    with pytest.raises(RuntimeError, match="fail_at_epoch"):
        train({**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 1, "fail_at_epoch": 2})
    with pytest.raises(ValueError, match="bitz"):
        train({**SMALL_MLP, "bitz": 4})
    with pytest.raises(ValueError, match="unknown parameter 'bitz'"):
        train({**SMALL_MLP, "compressor": "qsgd", "compressor_params": {"bitz": 4}})


@pytest.mark.parametrize("compressor, params", [("powersgd", {"matrix_rank": 1}), ("onebit", {})])
def test_one_worker_runs_the_compressor_through_the_ddp_hook(compressor, params):
    # powersgd (after its fp32 start iterations) and onebit change the update; fp32 does not
    config = {**SMALL_MLP, "epochs": 1, "max_steps_per_epoch": 4}
    base = train({**config, "compressor": "fp32"})
    low = train({**config, "compressor": compressor, "compressor_params": params})
    assert low["status"] == "ok"
    assert low["final"]["train_loss"] != base["final"]["train_loss"]
    assert low["final"]["bytes_sent"] == 0  # nothing leaves a one-process group
    for share in ("cpu_steal_share", "cpu_idle_share"):
        value = low["final"][share]
        assert math.isnan(value) if cpu_ticks() is None else 0.0 <= value <= 1.0


def test_a_non_finite_update_on_the_last_step_marks_the_trial_diverged():
    # one step whose loss is finite and whose update overflows the weights
    result = train({"model": "mlp", "width": 16, "depth": 1, "lr": 1e37, "momentum": 0.0,
                    "epochs": 1, "max_steps_per_epoch": 1})
    assert math.isfinite(result["final"]["train_loss"])
    assert result["status"] == "diverged", result
    assert result["reason"] == "test loss became nan in epoch 1"


def _scripted_accuracies(monkeypatch, accuracies: list[float]) -> list[int]:
    """Make the loop's evaluations return ``accuracies`` in turn; returns the list of steps evaluated at."""
    from orchestrator.study import evaluation, step_timer

    steps: list[int] = []
    script = iter(accuracies)
    clock = step_timer.StepClock  # the steps run so far: one StepClock.start per step

    class Counting(clock):
        started = -1  # its constructor starts it once before the first step

        def start(self) -> None:
            Counting.started += 1
            super().start()

    monkeypatch.setattr(step_timer, "StepClock", Counting)

    def evaluate(*args, **kwargs):
        steps.append(Counting.started)
        return {"test_accuracy": next(script), "test_loss": 0.5, "test_perplexity": None}

    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    return steps


def test_the_target_is_found_at_the_step_of_the_first_crossing(monkeypatch):
    evaluated = _scripted_accuracies(monkeypatch, [0.5, 0.8, 0.95, 0.96, 0.97])
    result = train({**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 20, "eval_every_steps": 5,
                    "target_accuracy": 0.9})
    # every 5 steps until the crossing at step 15, then only at the ends of the epochs
    assert evaluated == [5, 10, 15, 20, 40]
    first, second = result["history"]
    assert first["steps_to_target"] == second["steps_to_target"] == 15
    assert 0 < first["time_to_target_s"] < first["train_time_s"]  # three quarters of the epoch's steps
    assert second["time_to_target_s"] == first["time_to_target_s"]


def test_the_default_evaluates_ten_times_an_epoch_and_not_at_all_without_a_target(monkeypatch):
    evaluated = _scripted_accuracies(monkeypatch, [0.1] * 11)
    result = train({**SMALL_MLP, "epochs": 1, "max_steps_per_epoch": 20, "target_accuracy": 0.9})
    assert evaluated == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert result["final"]["steps_to_target"] is None and result["final"]["time_to_target_s"] is None
    evaluated = _scripted_accuracies(monkeypatch, [0.1])
    train({**SMALL_MLP, "epochs": 1, "max_steps_per_epoch": 20})
    assert evaluated == [20]


def test_training_that_collapses_without_a_nan_ends_unstable(monkeypatch):
    # the accuracy of a run that learned, then fell back to chance (MNIST: about 0.11 for a constant guess)
    _scripted_accuracies(monkeypatch, [0.8, 0.5, 0.12])
    reports = []
    result = train({**SMALL_MLP, "epochs": 3, "max_steps_per_epoch": 2, "eval_every_steps": 100},
                   report=reports.append)
    assert result["status"] == "unstable" == reports[-1]["status"]
    assert [r["status"] for r in reports[:-1]] == ["running", "running"]
    assert result["reason"].startswith("the test accuracy fell to 0.1200, where always predicting the most "
                                       "frequent class scores 0.")


# ---------------------------------------------------------------- the command line


CLI_CASES = [
    (["--epochs", "abc"], ["argument --epochs", "an int in [1, 100000]", "'abc'"]),
    (["--lr", "nan"], ["argument --lr", "(0, 1e+37]"]),
    (["--lr", "1e400"], ["argument --lr: must be a float in (0, 1e+37], got '1e400'"]),
    (["--json", "no_such_folder/out.json"],
     ["argument --json: cannot write 'no_such_folder/out.json': no folder 'no_such_folder'"]),
    (["--json", "tests"], ["argument --json: cannot write 'tests': not a file name"]),
    (["--num_workers", "4"], ["unrecognized arguments: --num_workers 4"]),
    (["--cpus_per_worker", "7"], ["unrecognized arguments: --cpus_per_worker 7"]),
    (["--optimizer", "adam", "--momentum", "0.9"], ["adam takes no momentum"]),
    (["--precision", "fp16"], ["setting precision: fp16 autocast with a gradient scaler is for GPUs", "use precision: bf16"]),
    (["--compressor", "onebit_adam"], ["setting optimizer: onebit_adam takes Adam's steps itself"]),
    (["--compressor", "qsgd", "--compressor_params", "{bits: 1}"], ["bits", "[2, 8]"]),
]


@pytest.fixture
def cli(monkeypatch):
    """``python -m orchestrator.study.train_loop *argv``, run here from the checkout: its exit status and output."""
    monkeypatch.chdir(ROOT)
    return lambda argv: run_main("orchestrator.study.train_loop", argv)


@pytest.mark.parametrize("args, words", CLI_CASES)
def test_training_cli_exits_2_naming_the_flag(cli, args, words):
    done = cli(args)
    assert done["returncode"] == 2, done["stderr"]
    assert "Traceback" not in done["stderr"]
    for word in words:
        assert word in done["stderr"], done["stderr"]


def test_training_cli_takes_a_float_without_a_dot_and_leaves_the_json_path_alone(tmp_path):
    # PyYAML reads 1e-3 as a string; the --json check creates nothing and truncates nothing
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    for out in (existing, tmp_path / "new.json"):
        args = _parse_args(["--lr", "1e-3", "--weight_decay", "5E-4", "--compressor", "topk",
                            "--compressor_params", "{pi: 1e-2}", "--json", str(out)])
        assert args == {"config": {"lr": 0.001, "weight_decay": 0.0005, "compressor": "topk",
                                   "compressor_params": {"pi": 0.01}}, "json": str(out)}
    assert existing.read_text() == "{}" and not (tmp_path / "new.json").exists()


def test_training_cli_help_lists_only_training_settings(cli):
    text = cli(["--help"])["stdout"]
    flags = set(re.findall(r"^\s+(?:-h, )?--(\w+)", text, re.M))
    assert flags == {*settings.TRAINING_KEYS, "help", "json"}


def test_every_steps_time_and_the_machines_load_are_recorded():
    import os

    import torch

    # Epochs of 20 steps: long enough for the kernel's CPU clock to tick (100 Hz) during each, whatever the
    # machine (without a tick others_cpu_cores is undefined, NaN).
    result = train({**SMALL_MLP, "epochs": 2, "max_steps_per_epoch": 20})
    assert len(result["step_times_s"]) == 40 and all(t > 0 for t in result["step_times_s"])
    for epoch in result["history"]:
        assert epoch["cores"] == os.cpu_count() and epoch["threads"] == torch.get_num_threads()
        assert epoch["load_avg"] == epoch["load_avg"]  # a number where the system has a load average
        assert epoch["others_cpu_cores"] >= 0.0  # one rank on this machine: what others used is known
