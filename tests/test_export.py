"""Tests of the results code (orchestrator.results.tables, summary, plots, export): tables, summary and figures
from hand-written trial records (no Ray)."""

from __future__ import annotations

import ast
import math
import statistics
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.results.export import export
from orchestrator.study.records import make_record, read_records, write_record
from orchestrator.results.summary import summary_markdown
from orchestrator.study.settings import FP32, SIXTEEN_BIT
from orchestrator.results.tables import RESULT_COLUMNS, trials_table, varying_settings

SWEEP = """\
name: e
workload: {model: mlp, width: 8, depth: 1, epochs: 2, target_accuracy: 0.9}
sweep:
  num_workers: [1, 2]
  seed: [0, 1]
  compressor: [fp32, fp16, {name: qsgd, bits: 4}, onebit]
"""

# Per compressor: seconds of training per epoch, median step time, test accuracy per epoch (by seed).
PLAN = {
    "fp32": (10.0, 0.010, {0: [0.85, 0.92], 1: [0.85, 0.94]}),
    "fp16": (8.0, 0.008, {0: [0.91, 0.93], 1: [0.91, 0.93]}),
    "qsgd": (5.0, 0.005, {0: [0.80, 0.91], 1: [0.80, 0.91]}),
    "onebit": (4.0, 0.004, {0: [0.50, 0.60], 1: [0.50, 0.60]}),  # never reaches the target
}
FAILED = ("onebit", 2, 1)  # (compressor, num_workers, seed) of the trial that raised
DIVERGED = ("onebit", 2, 0)


def history(compressor: str, seed: int, target: float) -> list[dict]:
    epoch_s, step_s, accuracies = PLAN[compressor]
    return epochs(epoch_s, step_s, accuracies[seed], target)


def epochs(epoch_s: float, step_s: float, accuracies: list[float], target: float) -> list[dict]:
    """The per-epoch metrics the training loop reports, for these accuracies."""
    rows, reached = [], None
    for epoch, accuracy in enumerate(accuracies, 1):
        if reached is None and accuracy >= target:
            reached = epoch * epoch_s
        rows.append({
            "epoch": epoch, "train_time_s": epoch * epoch_s, "test_accuracy": accuracy, "test_loss": 0.3,
            "train_loss": 0.3, "step_time_s": step_s, "samples_per_s": 64 / step_s,
            "compute_s": step_s * 3 / 4, "exposed_comm_s": step_s / 4,
            "encode_s": step_s / 8, "comm_s": step_s / 2, "decode_s": step_s / 8,
            "bytes_sent": 1000.0, "compression_ratio": 4.0, "time_to_accuracy_s": reached,
            "status": "running" if epoch < len(accuracies) else "ok",
        })
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    from orchestrator.study.sweep_file import load_sweep

    folder = tmp_path_factory.mktemp("results") / "e"
    sweep_file = folder.parent / "e.yaml"
    sweep_file.write_text(SWEEP)
    for trial in load_sweep(sweep_file).trials:
        key = (trial["compressor"], trial["num_workers"], trial["seed"])
        rows = history(trial["compressor"], trial["seed"], trial["target_accuracy"])
        if key == FAILED:
            record = make_record(trial, "failed", "RuntimeError: boom at epoch 2", rows[:1])
        elif key == DIVERGED:
            rows[-1]["status"] = "diverged"
            record = make_record(trial, "diverged", "train loss became nan in epoch 2", rows)
        else:
            record = make_record(trial, "ok", None, rows)
        write_record(folder, record)
    export(folder)
    return folder


@pytest.fixture(scope="module")
def trials(results) -> pd.DataFrame:
    return pd.read_csv(results / "trials.csv")


def pick(trials: pd.DataFrame, compressor: str, workers: int, seed: int) -> pd.Series:
    rows = trials[(trials.compressor == compressor) & (trials.num_workers == workers) & (trials.seed == seed)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_one_row_per_trial_with_every_documented_column(results, trials):
    assert len(trials) == 16 == len(read_records(results))
    expected = ["trial_id", "name", "status", "reason", "compressor", "bits", "bucket", "algorithm",
                "num_workers", "seed", "lr", "target_accuracy", *RESULT_COLUMNS]
    assert set(expected) <= set(trials.columns)
    assert trials.trial_id.is_unique
    parquet = pd.read_parquet(results / "trials.parquet")
    assert list(parquet.columns) == list(trials.columns)
    assert len(parquet) == 16


def test_statuses_and_reasons(trials):
    assert sorted(trials.status.value_counts().items()) == [("diverged", 1), ("failed", 1), ("ok", 14)]
    assert pick(trials, *FAILED).reason == "RuntimeError: boom at epoch 2"
    assert pick(trials, *FAILED).epochs_run == 1
    assert trials[trials.status == "ok"].reason.isna().all()


def test_accuracy_columns(trials):
    for column in ("final_accuracy", "best_accuracy"):
        assert trials[column].between(0, 1).all()
    assert pick(trials, "fp32", 1, 1).final_accuracy == 0.94
    assert pick(trials, "fp16", 1, 0).best_accuracy == 0.93
    # vs the mean final accuracy of fp32 over both seeds at the same workload and scale
    assert pick(trials, "qsgd", 2, 0).accuracy_delta == pytest.approx(0.91 - 0.93)
    assert pick(trials, "fp32", 1, 0).accuracy_delta == pytest.approx(0.92 - 0.93)


def test_fp32_speedup_is_exactly_one(trials):
    fp32 = trials[trials.compressor == "fp32"]
    assert (fp32.speedup_vs_fp32 == 1.0).all()
    assert (fp32.speedup_basis == "time_to_accuracy").all()
    assert (trials[trials.compressor == "fp16"].speedup_vs_16bit == 1.0).all()


def test_speedup_uses_time_to_accuracy_or_falls_back_to_step_time(trials):
    qsgd = pick(trials, "qsgd", 1, 0)
    assert qsgd.time_to_accuracy_s == 10.0
    assert qsgd.speedup_vs_fp32 == pytest.approx(20.0 / 10.0)
    assert qsgd.speedup_basis == "time_to_accuracy"
    assert qsgd.speedup_vs_16bit == pytest.approx(8.0 / 10.0)
    onebit = pick(trials, "onebit", 1, 0)
    assert math.isnan(onebit.time_to_accuracy_s)
    assert onebit.speedup_vs_fp32 == pytest.approx(0.010 / 0.004)
    assert onebit.speedup_basis == "step_time"
    assert onebit.speedup_vs_16bit_basis == "step_time"
    # trials that did not finish ok get no speedup
    assert trials[trials.status != "ok"].speedup_vs_fp32.isna().all()


def test_step_metrics_are_carried(trials):
    row = pick(trials, "qsgd", 2, 1)
    assert row.step_time_s == 0.005
    assert row.compute_s + row.exposed_comm_s == pytest.approx(0.005)
    assert (row.encode_s, row.comm_s, row.decode_s) == pytest.approx((0.005 / 8, 0.005 / 2, 0.005 / 8))
    assert row.bytes_sent == 1000.0 and row.compression_ratio == 4.0
    assert row.train_time_s == 10.0 and row.epochs_run == 2


def test_history_has_one_row_per_trial_and_epoch(results):
    history = pd.read_csv(results / "history.csv")
    assert len(history) == 15 * 2 + 1
    assert {"trial_id", "name", "compressor", "num_workers", "epoch", "test_accuracy", "train_time_s",
            "bits", "bytes_sent", "status"} <= set(history.columns)
    assert history.test_accuracy.between(0, 1).all()


def test_summary_shows_mean_and_spread_over_seeds_and_failures(results):
    summary = (results / "summary.md").read_text()
    fp32_row = next(line for line in summary.splitlines() if line.startswith("| fp32 |"))
    spread = statistics.stdev([0.92, 0.94])
    assert f"0.9300 ± {spread:.4f} (n=2)" in fp32_row
    assert "20.0 ± 0.0 (n=2)" in fp32_row  # time to accuracy
    assert "1.00x ± 0.00 (n=2)" in fp32_row
    assert "w=1 accuracy" in summary and "w=2 speedup vs fp32" in summary
    assert "RuntimeError: boom at epoch 2" in summary
    assert "train loss became nan in epoch 2" in summary
    onebit_row = next(line for line in summary.splitlines() if line.startswith("| onebit"))
    assert "not reached" in onebit_row and "\\*" in onebit_row


def test_plots_are_png_files(results):
    for name in ("accuracy_vs_time.png", "speedup_vs_workers.png", "step_time_breakdown.png"):
        data = (results / "plots" / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_export_command_rebuilds_from_the_records(results, tmp_path, capsys):
    from orchestrator.cli import main

    (results / "trials.csv").unlink()
    (results / "plots" / "speedup_vs_workers.png").unlink()
    assert main(["export", str(results)]) == 0
    assert (results / "trials.csv").is_file()
    assert (results / "plots" / "speedup_vs_workers.png").is_file()
    assert "summary.md" in capsys.readouterr().out
    assert main(["export", str(tmp_path)]) == 2


def test_records_reject_unknown_status(tmp_path):
    from orchestrator.study.sweep_file import load_sweep

    (trial,) = load_sweep(_single(tmp_path)).trials
    with pytest.raises(ValueError, match="status"):
        make_record(trial, "running", None, [])


def _single(tmp_path: Path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(textwrap.dedent("""\
        name: one
        workload: {target_accuracy: 0.5}
        baselines: false
        """))
    return path


# ---------------------------------------------------------------- tables from records built here (no sweep file)


def record(compressor: str, seed: int, history: list[dict], workers: int = 1, lr: float = 0.1,
           params: dict | None = None, algorithm: str | None = "allreduce", status: str = "ok") -> dict:
    settings = {"compressor": compressor, "compressor_params": params or {}, "algorithm": algorithm,
                "num_workers": workers, "seed": seed, "lr": lr, "target_accuracy": 0.9}
    name = f"{compressor}-lr{lr}-w{workers}-s{seed}"
    return make_record({"name": name, "trial_id": name, **settings}, status, None, history)


@pytest.fixture(scope="module")
def direct() -> pd.DataFrame:
    qsgd = {"params": {"bits": 4, "bucket": 512}, "algorithm": "sra"}
    records = [
        record("fp32", 0, epochs(10.0, 0.010, [0.85, 0.92], 0.9)),  # reaches 0.9 at 20 s
        record("fp32", 1, epochs(12.0, 0.012, [0.85, 0.96], 0.9)),  # at 24 s
        record("fp32", 0, epochs(100.0, 0.1, [0.95, 0.95], 0.9), lr=0.05),  # another workload
        record("bf16", 0, epochs(8.0, 0.008, [0.91, 0.93], 0.9)),  # the 16-bit baseline: no fp16 trials
        record("qsgd", 0, epochs(5.0, 0.005, [0.80, 0.91], 0.9), **qsgd),  # at 10 s
        record("qsgd", 2, epochs(6.0, 0.006, [0.80, 0.50], 0.9), **qsgd),  # never; no baseline of seed 2
        record("qsgd", 0, epochs(5.0, 0.005, [0.80, 0.91], 0.9), workers=2, **qsgd),  # no baseline at 2 workers
    ]
    return trials_table(records).set_index("name")


def test_baseline_names_are_defined_once():
    assert FP32 == "fp32" and SIXTEEN_BIT == ("fp16", "bf16")


def test_compressor_params_become_columns_and_rows_start_with_the_baselines(direct):
    assert list(direct.compressor) == ["fp32", "fp32", "fp32", "bf16", "qsgd", "qsgd", "qsgd"]
    assert direct.loc["qsgd-lr0.1-w1-s0", "bits"] == 4 and direct.loc["qsgd-lr0.1-w1-s0", "bucket"] == 512
    assert direct.loc["fp32-lr0.1-w1-s0", ["bits", "bucket"]].isna().all()
    assert "compressor_params" not in direct.columns


def test_speedup_and_delta_against_the_same_seed_else_the_mean_over_seeds(direct):
    same_seed = direct.loc["qsgd-lr0.1-w1-s0"]
    assert same_seed.speedup_vs_fp32 == pytest.approx(20.0 / 10.0)
    assert same_seed.speedup_basis == "time_to_accuracy"
    assert same_seed.accuracy_delta == pytest.approx(0.91 - (0.92 + 0.96) / 2)  # not the lr=0.05 trial
    other_seeds = direct.loc["qsgd-lr0.1-w1-s2"]
    assert other_seeds.speedup_vs_fp32 == pytest.approx((0.010 + 0.012) / 2 / 0.006)
    assert other_seeds.speedup_basis == "step_time"
    assert other_seeds.accuracy_delta == pytest.approx(0.50 - (0.92 + 0.96) / 2)
    alone = direct.loc["qsgd-lr0.1-w2-s0"]
    assert pd.isna(alone[["speedup_vs_fp32", "speedup_basis", "accuracy_delta"]]).all()
    assert (direct[direct.compressor == "fp32"].speedup_vs_fp32 == 1.0).all()


def test_the_16bit_baseline_is_bf16_where_there_is_no_fp16(direct):
    assert direct.loc["bf16-lr0.1-w1-s0", "speedup_vs_16bit"] == 1.0
    assert direct.loc["qsgd-lr0.1-w1-s0", "speedup_vs_16bit"] == pytest.approx(8.0 / 10.0)
    assert direct.loc["qsgd-lr0.1-w1-s2", "speedup_vs_16bit"] == pytest.approx(0.008 / 0.006)
    assert direct.loc["qsgd-lr0.1-w1-s2", "speedup_vs_16bit_basis"] == "step_time"


def test_summary_labels_configurations_in_the_one_label_format(direct):
    text = summary_markdown(direct.reset_index(), "direct")
    papers, steps = text.split("## Where a step's time went")
    lines = papers.splitlines()
    rows = [line.split(" | ")[0].removeprefix("| ") for line in lines if line.startswith("| ")][1:]
    assert rows == ["fp32 lr=0.05", "fp32 lr=0.1",
                    "bf16 lr=0.1", "qsgd bits=4 bucket=512 lr=0.1"]
    # the step-time table: ms, step = compute + exposed comm; fp32 lr=0.1 averages its 10 and 12 ms seeds
    assert "| fp32 lr=0.1 num_workers=1 | 11.00 | 8.25 | 2.75 | 1.38 | 5.50 | 1.38 |" in steps
    qsgd = next(line for line in lines if line.startswith("| qsgd"))
    # w=1: seeds 0 and 2 (one reached the target; one speedup compared step times); w=2: one trial
    assert f"0.7050 ± {statistics.stdev([0.91, 0.50]):.4f} (n=2)" in qsgd
    assert "10.0 (n=1) (1/2 reached)" in qsgd
    assert "0.9100 (n=1) | 10.0 (n=1) | – |" in qsgd
    assert f"{statistics.fmean([2.0, 0.011 / 0.006]):.2f}x ±" in qsgd and "\\*" in qsgd


def test_the_predicted_step_time_is_a_result_never_a_setting(direct):
    """export fills predicted_step_time_s per trial: it differs between trials, yet must not become a
    label key or a speedup's grouping key (it once named every configuration of an emulated run)."""
    trials = direct.reset_index()
    assert trials["predicted_step_time_s"].isna().all()
    trials["predicted_step_time_s"] = [0.01 * i for i in range(len(trials))]
    assert "predicted_step_time_s" not in varying_settings(trials)
    assert summary_markdown(trials, "direct") == summary_markdown(direct.reset_index(), "direct")


def test_step_time_table_is_milliseconds_per_configuration_and_worker_count(direct):
    from orchestrator.results.tables import step_time_table

    bars = step_time_table(direct.reset_index())
    assert list(bars.columns) == ["step_time", "compute", "exposed_comm", "encode", "comm", "decode"]
    assert list(bars.index) == [
        "fp32 lr=0.05 num_workers=1", "fp32 lr=0.1 num_workers=1",
        "bf16 lr=0.1 num_workers=1", "qsgd bits=4 bucket=512 lr=0.1 num_workers=1",
        "qsgd bits=4 bucket=512 lr=0.1 num_workers=2"]
    # fp32 at lr=0.1: seeds with 10 ms and 12 ms steps, three quarters of each in compute
    assert bars.loc["fp32 lr=0.1 num_workers=1", "compute"] == pytest.approx(8.25)
    assert bars[["compute", "exposed_comm"]].sum(axis=1).iloc[-1] == pytest.approx(bars["step_time"].iloc[-1])


def test_a_bandwidth_sweep_gets_a_speedup_against_bandwidth_plot(tmp_path, monkeypatch):
    records = []
    for rate, fp32_s, qsgd_s in (("100mbit", 4.0, 1.0), ("1gbit", 1.0, 0.8)):
        for compressor, step_s in (("fp32", fp32_s), ("qsgd", qsgd_s)):
            row = record(compressor, 0, epochs(step_s * 10, step_s, [0.5, 0.6], 0.9))
            row["settings"]["bandwidth"] = rate
            row["trial_id"] = row["name"] = f"{compressor}-{rate}"
            records.append(row)
    for row in records:
        write_record(tmp_path, row)
    export(tmp_path)
    trials = pd.read_csv(tmp_path / "trials.csv").set_index("name")
    assert trials.loc["qsgd-100mbit", "speedup_vs_fp32"] == 4.0
    assert trials.loc["qsgd-1gbit", "speedup_vs_fp32"] == 1.25
    assert (tmp_path / "plots" / "speedup_vs_bandwidth.png").read_bytes().startswith(b"\x89PNG")
    from orchestrator.results import plots

    drawn = []
    monkeypatch.setattr(plots, "_legend", lambda figure, axes: drawn.extend(
        name for ax in axes for name in ax.get_legend_handles_labels()[1]))
    plots.write_plots(trials.reset_index(), pd.read_csv(tmp_path / "history.csv"), tmp_path / "again")
    assert "fp32" in drawn and "qsgd" in drawn  # one line per configuration, bandwidth not in its name
