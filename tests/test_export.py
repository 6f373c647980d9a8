"""Tests of orchestrator.export and plots: tables, summary and figures from hand-written trial records (no Ray)."""

from __future__ import annotations

import math
import statistics
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli import main
from orchestrator.config import load_sweep
from orchestrator.export import RESULT_COLUMNS, export
from orchestrator.records import make_record, read_records, write_record

SWEEP = """\
name: e
workload: {model: mlp, width: 8, depth: 1, epochs: 2, target_accuracy: 0.9}
sweep:
  num_workers: [1, 2]
  seed: [0, 1]
  compressor: [none, fp16, {name: qsgd, bits: 4}, onebit]
"""

# Per compressor: seconds of training per epoch, median step time, test accuracy per epoch (by seed).
PLAN = {
    "none": (10.0, 0.010, {0: [0.85, 0.92], 1: [0.85, 0.94]}),
    "fp16": (8.0, 0.008, {0: [0.91, 0.93], 1: [0.91, 0.93]}),
    "qsgd": (5.0, 0.005, {0: [0.80, 0.91], 1: [0.80, 0.91]}),
    "onebit": (4.0, 0.004, {0: [0.50, 0.60], 1: [0.50, 0.60]}),  # never reaches the target
}
FAILED = ("onebit", 2, 1)  # (compressor, num_workers, seed) of the trial that raised
DIVERGED = ("onebit", 2, 0)


def history(compressor: str, seed: int, target: float) -> list[dict]:
    epoch_s, step_s, accuracies = PLAN[compressor]
    rows, reached = [], None
    for epoch, accuracy in enumerate(accuracies[seed], 1):
        if reached is None and accuracy >= target:
            reached = epoch * epoch_s
        rows.append({
            "epoch": epoch, "train_time_s": epoch * epoch_s, "test_accuracy": accuracy, "test_loss": 0.3,
            "train_loss": 0.3, "step_time_s": step_s, "samples_per_s": 64 / step_s,
            "compute_s": step_s / 2, "encode_s": step_s / 8, "comm_s": step_s / 4, "decode_s": step_s / 8,
            "bytes_per_step": 1000.0, "compression_ratio": 4.0, "time_to_accuracy_s": reached,
            "status": "running" if epoch < len(accuracies[seed]) else "ok",
        })
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
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
    assert pick(trials, "none", 1, 1).final_accuracy == 0.94
    assert pick(trials, "fp16", 1, 0).best_accuracy == 0.93
    # vs the mean final accuracy of fp32 over both seeds at the same workload and scale
    assert pick(trials, "qsgd", 2, 0).accuracy_delta == pytest.approx(0.91 - 0.93)
    assert pick(trials, "none", 1, 0).accuracy_delta == pytest.approx(0.92 - 0.93)


def test_fp32_speedup_is_exactly_one(trials):
    fp32 = trials[trials.compressor == "none"]
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
    assert row.compute_s + row.encode_s + row.comm_s + row.decode_s == pytest.approx(0.005)
    assert row.bytes_per_step == 1000.0 and row.compression_ratio == 4.0
    assert row.train_time_s == 10.0 and row.epochs_run == 2


def test_history_has_one_row_per_trial_and_epoch(results):
    history = pd.read_csv(results / "history.csv")
    assert len(history) == 15 * 2 + 1
    assert {"trial_id", "name", "compressor", "num_workers", "epoch", "test_accuracy", "train_time_s",
            "bytes_per_step", "status"} <= set(history.columns)
    assert history.test_accuracy.between(0, 1).all()


def test_summary_shows_mean_and_spread_over_seeds_and_failures(results):
    summary = (results / "summary.md").read_text()
    fp32_row = next(line for line in summary.splitlines() if line.startswith("| fp32 (none)"))
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
    (results / "trials.csv").unlink()
    (results / "plots" / "speedup_vs_workers.png").unlink()
    assert main(["export", str(results)]) == 0
    assert (results / "trials.csv").is_file()
    assert (results / "plots" / "speedup_vs_workers.png").is_file()
    assert "summary.md" in capsys.readouterr().out
    assert main(["export", str(tmp_path)]) == 2


def test_records_reject_unknown_status(tmp_path):
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
