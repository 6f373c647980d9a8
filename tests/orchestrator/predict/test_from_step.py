"""Predicting from a step time (orchestrator/predict/from_step.py, `lowprec predict --model ...`): the gradient's
layout from the meta device, the configurations' one-worker times from codec speeds, the same predictions as
the folder path given the same inputs, the command line's refusals and its table."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from orchestrator import cli
from orchestrator.predict import from_step, measure, predictor
from orchestrator.predict.plan import cluster
from tests.orchestrator.predict.test_predictor import ONE, PROFILE, write_folder

MLP = from_step.Model("mlp", {"width": 64, "depth": 1}, (32,), 4, 8)
# qsgd's one-worker sra trial encodes and decodes its 2048 compressible floats twice: these speeds give the
# folder's 2 ms and 1 ms; fp16's cast of all 2372 floats, both ways, its 0.5 ms of exposed device work
TABLE_ROWS = [{"compressor": "qsgd", "params": {}, "impl": "numba", "op": "encode", "gbps": 2 * 4 * 2048 / 0.002 / 1e9},
              {"compressor": "qsgd", "params": {}, "impl": "numba", "op": "decode", "gbps": 2 * 4 * 2048 / 0.001 / 1e9},
              {"compressor": "qsgd", "params": {"bits": 4}, "impl": "numba", "op": "encode", "gbps": 99.0},
              {"compressor": "qsgd", "params": {}, "impl": "reference", "op": "encode", "gbps": 77.0},
              {"compressor": "fp16", "params": {}, "impl": "reference", "op": "encode", "gbps": 4 * 2372 / 0.00025 / 1e9},
              {"compressor": "fp16", "params": {}, "impl": "reference", "op": "decode", "gbps": 4 * 2372 / 0.00025 / 1e9}]


def codec_table(tmp_path):
    path = tmp_path / "codecs.json"
    path.write_text(json.dumps({"rows": TABLE_ROWS}))
    return path


def test_the_gradient_layout_comes_from_the_meta_device():
    assert from_step.gradient_shapes(MLP) == [(64, 32), (64,), (4, 64), (4,)]


def test_a_table_gives_the_default_parameters_numba_rows(tmp_path):
    rates = from_step.table_rates(codec_table(tmp_path))
    assert rates[("qsgd", "encode")] == pytest.approx(8.192e-3)  # not the bits=4 row, not the reference's
    with pytest.raises(ValueError, match="is not a JSON of benchmarks/compressor_bench.py"):
        from_step.table_rates(tmp_path)


def test_the_step_time_path_equals_the_folder_path_given_the_same_inputs(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = tmp_path / "results"
    folder.mkdir()
    write_folder(folder, [
        ({}, ONE),
        ({"compressor": "fp16"}, {**ONE, "exposed_comm_s": 0.0005}),
        ({"compressor": "qsgd", "algorithm": "sra"}, {**ONE, "encode_s": 0.002, "decode_s": 0.001}),
    ])
    for overlap, slowdown in ((True, 0.0), (True, 0.2), (False, 0.0)):
        by_folder, _ = predictor.predict(folder, 1e9, 8, 5e-6, overlap=overlap, prof=PROFILE,
                                         overlap_slowdown=slowdown)
        # the folder's compute_s (8 ms) is the step time; this machine's profile takes 4 ms, so the rate given
        # here is scaled by 4 / 8 to the folder's 1e9
        by_step, notes = from_step.predict_from_step(MLP, 0.008, ["fp16", "qsgd"], cluster(8, 1, 1e9, 5e-6, 1e9),
                                                     overlap, slowdown, codec_table(tmp_path), prof=PROFILE,
                                                     reduction_rate=2e9)
        assert list(by_step["compressor"]) == ["fp32", "fp16", "qsgd"]
        for column in ("predicted_step_time_s", "comm_s", "encode_s", "decode_s", "speedup_vs_fp32",
                       "speedup_vs_16bit", "break_even_bps", "speedup_bound"):
            assert list(by_step[column]) == pytest.approx(list(by_folder[column]), rel=1e-12, nan_ok=True), column
    assert notes[1] == f"codecs: encode and decode speeds from {tmp_path / 'codecs.json'}"


def test_codecs_measured_here_are_scaled_as_the_step_is(tmp_path, monkeypatch):
    monkeypatch.setattr(from_step, "measured_rates", lambda names, numel: {
        (n, op): 1.0 for n in names for op in ("encode", "decode")})
    table, notes = from_step.predict_from_step(MLP, 0.008, ["qsgd"], cluster(2, 1, 1e9, 0.0, 1e9), prof=PROFILE,
                                               reduction_rate=1e9)
    # 1 GB/s here, a step twice this machine's: 2 x 4 x 2048 B / 1 GB/s x 2, then sra's (1 + 1/2) / 2
    assert table["encode_s"].iloc[1] == pytest.approx(2 * 4 * 2048 / 1e9 * 2 * 0.75)
    assert "measured here on 2,372 floats, scaled as the step is" in notes[1]


def test_a_codec_of_its_own_algorithm_is_predicted_with_it(monkeypatch):
    monkeypatch.setattr(from_step, "measured_rates", lambda names, numel: {
        (n, op): 1.0 for n in names for op in ("encode", "decode")})
    table, _ = from_step.predict_from_step(MLP, 0.008, ["dgc"], cluster(2, 1, 1e9, 0.0, 1e9), prof=PROFILE,
                                           reduction_rate=1e9)
    dgc = table.iloc[1]
    # DGC averages by all_gather: its one-worker trial encodes and decodes the 2048 floats once (x 2: the step
    # twice this machine's); at 2 workers it decodes both payloads
    assert dgc["algorithm"] == "allgather"
    assert (dgc["encode_s"], dgc["decode_s"]) == pytest.approx((4 * 2048 / 1e9 * 2, 2 * 4 * 2048 / 1e9 * 2))


def run_cli(args, capsys):
    code = cli.main(["predict", *args])
    return code, capsys.readouterr()


STEP = ["--model", "mlp", "--model_options", "{width: 64, depth: 1}", "--input_shape", "32", "--num_classes", "4",
        "--batch_size", "8", "--step_time", "8ms", "--bandwidth", "1gbit", "--num_workers", "4"]


def test_predict_from_a_step_time_prints_and_saves_its_table(tmp_path, capsys):
    out = tmp_path / "p.csv"
    code, printed = run_cli([*STEP, "--compressors", "fp16,qsgd", "--codec_table", str(codec_table(tmp_path)),
                             "--out", str(out)], capsys)
    assert code == 0, printed.err
    assert printed.out.splitlines()[0].endswith("; mlp, batch 8, one device's step 8ms")
    saved = pd.read_csv(out)
    assert list(saved["configuration"]) == ["fp32", "fp16", "qsgd"]
    assert (saved["step_time_s"] == 0.008).all() and (saved["num_workers"] == 4).all()
    assert saved["speedup_vs_fp32"].iloc[0] == 1.0 and math.isnan(saved["break_even_bps"].iloc[0])


@pytest.mark.parametrize("change, message", [
    (["--step_time", None], "--step_time T is needed to predict from a step time"),
    (["--input_shape", "3,x"], "--input_shape must be a list of positive integers, got '3,x'"),
    (["--step_time", "0s"], "--step_time must be a time with a unit s, ms, us or ns (0.25s, 180ms), above 0, got '0s'"),
    (["--batch_size", "0"], "--batch_size must be an int in [1, inf), got '0'"),
    (["--compressors", "fp16,qsgdd"], "unknown compressor 'qsgdd'"),
    (["--compressors", "powersgd"], "powersgd runs as a hook or inside its optimizer"),
    (["--codec_table", "nowhere.json"], "--codec_table nowhere.json is not a file"),
    (["--compute_scale", "2"], "--compute_scale is for a results folder"),
    (["--overlap_slowdown", "0.2"], None),
])
def test_predict_from_a_step_time_refuses_bad_input_in_one_line(change, message, capsys):
    args = list(STEP)
    name, value = change
    at = args.index(name) if name in args else None
    if value is None:
        del args[at:at + 2]
    elif at is None:
        args += [name, value]
    else:
        args[at + 1] = value
    if message is None:  # valid alone; refused beside --overlap false
        args += ["--overlap", "false"]
        message = "--overlap_slowdown is for --overlap true"
    code, printed = run_cli(args, capsys)
    assert code == 2
    assert len(printed.err.strip().splitlines()) == 1 and message in printed.err


def test_step_options_with_a_results_folder_are_refused(tmp_path, capsys):
    code, printed = run_cli([str(tmp_path), "--bandwidth", "1gbit", "--num_workers", "4", "--step_time", "1s"], capsys)
    assert code == 2 and "--step_time is for a prediction from a step time, without a results folder" in printed.err
