"""The step-cost benchmark's settings, token files and bookkeeping (with a stand-in training loop), and a
real run of the small GPT on the CPU."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import step_costs


def test_settings_of_each_model_and_size(tmp_path: Path) -> None:
    assert step_costs.settings_for("resnet50", "full", "qsgd", 10, True, tmp_path) == {
        "model": "resnet50", "dataset": "synthetic", "input_shape": [3, 224, 224], "num_classes": 1000,
        "batch_size": 32, "num_samples": 320, "test_samples": 32, "compressor": "qsgd", "epochs": 1,
        "max_steps_per_epoch": 10, "optimizer": "sgd", "lr": 0.001, "overlap": False, "use_gpu": True, "seed": 0}
    assert step_costs.settings_for("gpt2", "small", "fp8", 3, False, tmp_path) == {
        "model": "gpt", "dataset": "tokens", "n_layer": 2, "n_head": 2, "n_embd": 64, "seq_len": 64,
        "vocab_size": 50257, "batch_size": 2, "data_dir": str(tmp_path), "dropout": 0.0, "compressor": "fp8",
        "epochs": 1, "max_steps_per_epoch": 3, "optimizer": "sgd", "lr": 0.001, "overlap": False, "use_gpu": False,
        "seed": 0}
    full = step_costs.MODELS["gpt2"]["full"]
    assert (full["n_layer"], full["n_head"], full["n_embd"], full["seq_len"]) == (12, 12, 768, 1024)


def test_token_files_hold_whole_windows_below_the_vocabulary(tmp_path: Path) -> None:
    step_costs.write_tokens(tmp_path, seq_len=16, windows=5)
    train = np.fromfile(tmp_path / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "val.bin", dtype=np.uint16)
    assert len(train) == 5 * 16 + 1 and len(val) == 16 + 1
    assert int(train.max()) < 50257 and int(val.max()) < 50257


def _result(encode_s: float) -> dict:
    final = {"step_time_s": 0.5, "compute_s": 0.25, "exposed_comm_s": 0.25, "encode_s": encode_s,
             "comm_s": math.nan, "decode_s": 0.125}
    return {"status": "ok", "reason": None, "model_summary": {"parameters": 7}, "final": final}


def test_a_run_records_the_median_steps_parts_and_no_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_costs.train_loop, "train", lambda config: _result(0.0625))
    assert step_costs.run_one("gpt2", "qsgd", {}) == {
        "model": "gpt2", "compressor": "qsgd", "status": "ok", "reason": None, "parameters": 7, "step_time_s": 0.5,
        "compute_s": 0.25, "exposed_comm_s": 0.25, "encode_s": 0.0625, "comm_s": None, "decode_s": 0.125}


def test_a_run_that_raises_is_recorded_and_the_next_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def train(config: dict) -> dict:
        if config["compressor"] == "topk":
            raise RuntimeError("CUDA out of memory\nTried to allocate")
        return _result(0.0625)

    monkeypatch.setattr(step_costs.train_loop, "train", train)
    out = tmp_path / "costs.json"
    code = step_costs.main(["--device", "cpu", "--size", "small", "--models", "resnet50", "--compressors",
                            "qsgd,topk,fp8", "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 1
    assert [(r["compressor"], r["status"]) for r in record["rows"]] == [("qsgd", "ok"), ("topk", "failed"),
                                                                         ("fp8", "ok")]
    assert record["rows"][1]["reason"] == "RuntimeError: CUDA out of memory"
    assert record["not_measured"] == 0 and record["command"].startswith("python -m benchmarks.step_costs --device cpu")


def test_the_budget_stops_new_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    def train(config: dict) -> dict:  # the first run ends past the budget
        clock[0] = 10.0
        return _result(0.0625)

    monkeypatch.setattr(step_costs.train_loop, "train", train)
    out = tmp_path / "costs.json"
    assert step_costs.main(["--device", "cpu", "--size", "small", "--compressors", "qsgd,fp8", "--budget-s", "5",
                            "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["model"], r["compressor"]) for r in record["rows"]] == [("resnet50", "qsgd")]
    assert record["not_measured"] == 3


@pytest.mark.parametrize("argv, message", [
    (["--models", "resnet18"], "--models: a comma separated subset of resnet50, gpt2"),
    (["--compressors", "qsgd,nope"], "--compressors: a comma separated subset of"),
    (["--steps", "0"], "--steps: an integer in [1, 1000]"),
    (["--budget-s", "inf"], "--budget-s: a number of seconds > 0"),
])
def test_bad_arguments_exit_2_naming_the_option(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        step_costs.parse_args(["--device", "cpu", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_the_small_gpt_trains_with_every_kind_of_hook_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    assert step_costs.main(["--device", "cpu", "--size", "small", "--models", "gpt2", "--compressors",
                            "fp32,fp16,qsgd,powersgd", "--steps", "2", "--json", str(out)]) == 0
    rows = {r["compressor"]: r for r in json.loads(out.read_text())["rows"]}
    assert all(r["status"] == "ok" for r in rows.values())
    assert {r["parameters"] for r in rows.values()} == {3_320_640}
    # the Reducer's hook times its encode and decode; PyTorch's (the casts, PowerSGD) only their whole
    assert rows["qsgd"]["encode_s"] > 0 and rows["qsgd"]["decode_s"] > 0
    assert rows["fp16"]["encode_s"] == 0 and rows["fp16"]["exposed_comm_s"] > 0
    assert rows["fp32"]["comm_s"] is None
