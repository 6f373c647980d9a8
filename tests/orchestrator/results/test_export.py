"""Exporting a results folder (orchestrator/results/export.py): trials.csv, history.csv, summary.md and the
plots from hand-written trial records (no Ray), the export command, unreadable records and unwritable
tables. Tables and summaries of records built in memory: test_tables.py."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.results.export import export
from orchestrator.results.tables import RESULT_COLUMNS
from orchestrator.study.records import make_record, read_records, write_record
from tests.helpers import epochs, finished_sweep, record

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
FAILED = ("onebit", 1, 1)  # (compressor, num_workers, seed) of the trial that raised
DIVERGED = ("onebit", 1, 0)


def history(compressor: str, seed: int, target: float) -> list[dict]:
    epoch_s, step_s, accuracies = PLAN[compressor]
    return epochs(epoch_s, step_s, accuracies[seed], target)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, int, str]:
    """A results folder of trial records only, then ``lowprec export`` of it: the folder, its exit status
    and what it printed."""
    import contextlib
    import io

    from orchestrator.cli import main
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
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["export", str(folder)])
    return folder, code, out.getvalue()


@pytest.fixture(scope="module")
def results(exported) -> Path:
    return exported[0]


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


def test_fp32_speedup_is_exactly_one_where_there_is_communication(trials):
    fp32 = trials[(trials.compressor == "fp32") & (trials.num_workers == 2)]
    assert (fp32.speedup_vs_fp32 == 1.0).all()
    assert (fp32.speedup_basis == "time_to_target").all()
    fp16 = trials[(trials.compressor == "fp16") & (trials.num_workers == 2)]
    assert (fp16.speedup_vs_16bit == 1.0).all()


def test_one_worker_gets_an_overhead_not_a_speedup(trials):
    one = trials[trials.num_workers == 1]
    assert one.speedup_vs_fp32.isna().all() and one.speedup_vs_16bit.isna().all()
    assert one.speedup_basis.isna().all()
    ok = one[one.status == "ok"].set_index(["compressor", "seed"]).overhead_vs_fp32
    assert ok["fp32"].tolist() == [1.0, 1.0]
    assert ok["qsgd", 0] == pytest.approx(0.005 / 0.010)  # a slower codec would be > 1
    assert trials[trials.num_workers == 2].overhead_vs_fp32.isna().all()


def test_speedup_uses_time_to_accuracy_or_falls_back_to_step_time(trials):
    qsgd = pick(trials, "qsgd", 2, 0)
    assert qsgd.time_to_target_s == 10.0 and qsgd.steps_to_target == 2000
    assert qsgd.speedup_vs_fp32 == pytest.approx(20.0 / 10.0)
    assert qsgd.speedup_basis == "time_to_target"
    assert qsgd.speedup_vs_16bit == pytest.approx(8.0 / 10.0)
    onebit = pick(trials, "onebit", 2, 0)
    assert math.isnan(onebit.time_to_target_s) and math.isnan(onebit.steps_to_target)
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
    assert fp32_row.count("1.00x ± 0.00 (n=2)") == 2  # overhead at 1 worker, speedup at 2
    assert summary.startswith("# e\n")  # the sweep's name
    assert "w=1 accuracy" in summary and "w=2 speedup vs fp32" in summary and "w=1 overhead vs fp32" in summary
    assert "w=1 speedup" not in summary
    assert "![accuracy change against speedup](plots/answer.png)" in summary
    assert "RuntimeError: boom at epoch 2" in summary
    assert "train loss became nan in epoch 2" in summary
    onebit_row = next(line for line in summary.splitlines() if line.startswith("| onebit"))
    assert "not reached" in onebit_row and "\\*" in onebit_row


def test_plots_are_png_files(results):
    for name in ("answer.png", "accuracy_vs_time.png", "bytes_sent.png", "speedup_vs_workers.png",
                 "step_time_breakdown.png"):
        data = (results / "plots" / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_the_export_command_builds_the_tables_and_plots_from_the_records(exported, tmp_path):
    from orchestrator.cli import main

    folder, code, out = exported
    assert code == 0 and "summary.md" in out
    assert (folder / "trials.csv").is_file() and (folder / "plots" / "speedup_vs_workers.png").is_file()
    assert main(["export", str(tmp_path)]) == 2  # no records


def test_a_refresh_during_a_sweep_rebuilds_the_tables_not_the_plots(results, tmp_path):
    import shutil

    from orchestrator.results.export import refresh

    folder = tmp_path / "e"
    shutil.copytree(results / "trials", folder / "trials")
    written = refresh(folder)
    assert set(written) == {"trials.csv", "trials.parquet", "history.csv", "summary.md"}
    assert (folder / "trials.csv").read_text() == (results / "trials.csv").read_text()
    assert not (folder / "plots").exists() and "![" not in (folder / "summary.md").read_text()


# ---------------------------------------------------------------- records that cannot be read, tables that cannot be written


def test_a_corrupt_record_is_skipped_with_a_warning_naming_it(tmp_path, capsys):
    from orchestrator.results.export import export
    from orchestrator.study.records import finished_ids

    sweep, results = finished_sweep(tmp_path)
    bad = results / "trials" / f"{sweep.trials[0]['trial_id']}.json"
    bad.write_text('{"trial_id": "trunc')
    export(results, plots=False)
    assert f"skipping unreadable trial record {bad}" in capsys.readouterr().err
    assert finished_ids(results) == {t["trial_id"] for t in sweep.trials[1:]}  # resume runs it again
    import pandas as pd
    assert len(pd.read_csv(results / "trials.csv")) == len(sweep.trials) - 1


def test_an_unwritable_table_warns_and_keeps_the_records(tmp_path):
    import io

    from orchestrator.results.export import export_or_warn

    sweep, results = finished_sweep(tmp_path)
    (results / "trials.csv").mkdir()  # a folder where the table goes: writing it fails
    out = io.StringIO()
    export_or_warn(results, out)
    assert "could not write the tables" in out.getvalue() and "lowprec export" in out.getvalue()
    assert len(list((results / "trials").glob("*.json"))) == len(sweep.trials)


# ---------------------------------------------------------------- a bandwidth sweep


@pytest.mark.slow  # draws every figure of its own study (the quick check draws them once)
def test_a_bandwidth_sweep_gets_a_speedup_against_bandwidth_plot(tmp_path, monkeypatch):
    records = []
    for rate, fp32_s, qsgd_s in (("100mbit", 4.0, 1.0), ("1gbit", 1.0, 0.8)):
        for compressor, step_s in (("fp32", fp32_s), ("qsgd", qsgd_s)):
            row = record(compressor, 0, epochs(step_s * 10, step_s, [0.5, 0.6], 0.9), workers=2,
                         algorithm="allreduce" if compressor == "fp32" else "sra")
            row["settings"]["bandwidth"] = rate
            row["trial_id"] = row["name"] = f"{compressor}-{rate}"
            records.append(row)
    for row in records:
        write_record(tmp_path, row)
    from orchestrator.results import plots

    drawn = []
    monkeypatch.setattr(plots, "_legend", lambda figure, axes: drawn.extend(
        name for ax in axes for name in ax.get_legend_handles_labels()[1]))
    export(tmp_path)
    trials = pd.read_csv(tmp_path / "trials.csv").set_index("name")
    assert trials.loc["qsgd-100mbit", "speedup_vs_fp32"] == 4.0
    assert trials.loc["qsgd-1gbit", "speedup_vs_fp32"] == 1.25
    assert (tmp_path / "plots" / "speedup_vs_bandwidth.png").read_bytes().startswith(b"\x89PNG")
    assert "fp32" in drawn and "qsgd" in drawn  # one line per configuration, bandwidth not in its name


# ---------------------------------------------------------------- what the tables say of the study


def test_the_summary_is_titled_with_the_sweep_and_names_the_study(tmp_path):
    for compressor in ("fp32", "qsgd"):
        row = record(compressor, 0, epochs(1.0, 0.01, [0.5, 0.95], 0.9), workers=2)
        row["settings"]["fail_at_epoch"] = None  # a test hook: kept in the record, not in the tables
        row["link"] = {"hosts": 2, "bandwidth": "100mbit", "calibrated_bps": None, "calibrated_latency_s": None}
        write_record(tmp_path / "folder", row)
    (tmp_path / "folder" / "sweep.yaml").write_text("name: the-study\n")
    export(tmp_path / "folder", plots=False)
    summary = (tmp_path / "folder" / "summary.md").read_text()
    assert summary.startswith("# the-study\n\n2 workers; links 100mbit (emulated).\n")
    trials = pd.read_csv(tmp_path / "folder" / "trials.csv")
    assert trials.bandwidth.tolist() == ["100mbit", "100mbit"]  # the cluster's links, joined with --address
    assert "fail_at_epoch" not in trials and "force_nan_at_step" not in trials
    assert "fail_at_epoch" in read_records(tmp_path / "folder")[0]["settings"]


def test_every_row_of_the_step_table_adds_up_as_printed(results):
    summary = (results / "summary.md").read_text()
    rows = summary.split("## Where a step's time went")[1].split("## Trials")[0]
    cells = [line.split(" | ")[1:4] for line in rows.splitlines() if line.startswith("| ") and "step |" not in line]
    assert len(cells) == 7  # four configurations at 2 workers, three at 1 (onebit's failed or diverged)
    for step, compute, exposed in cells:
        assert f"{float(compute) + float(exposed.removesuffix(' (hook)')):.2f}" == step
    # a world of one communicates nothing: its exposed part is the hook's own overhead, said so
    ones = [line for line in rows.splitlines() if "num_workers=1 |" in line]
    assert ones and all(line.split(" | ")[3].endswith(" (hook)") for line in ones)


# ---------------------------------------------------------------- a full disk; records and environment.json unusable


def test_a_full_disk_keeps_every_table_whole_and_exits_1_in_one_line(tmp_path, monkeypatch, capsys):
    import errno

    from orchestrator.cli import main

    sweep, results = finished_sweep(tmp_path)
    old = "trial_id,name,status\n" + "".join(f"{t['trial_id']},{t['name']},ok\n" for t in sweep.trials)
    (results / "trials.csv").write_text(old)

    def full_disk(frame, path, **kwargs):  # the disk fills up mid-row
        Path(path).write_text("trial_id,name,status\nabc,fp3")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    assert main(["export", str(results)]) == 1
    assert capsys.readouterr().err == (
        f"error: could not write the tables of {results}: No space left on device ({results / 'trials.csv'}); the "
        f"trial records are safe in {results / 'trials'}: fix the cause, then run `lowprec export {results}` again\n")
    assert (results / "trials.csv").read_text() == old
    assert sorted(p.name for p in results.iterdir()) == ["trials", "trials.csv"]  # no partial file beside it


def test_records_of_the_wrong_types_and_a_broken_environment_do_not_stop_export(tmp_path, capsys):
    from orchestrator.results.export import _cpu_count

    good = record("fp32", 0, epochs(1.0, 0.01, [0.5, 0.95], 0.9))
    write_record(tmp_path, good)
    for key, value in (("history", None), ("settings", None), ("name", 5), ("model_summary", "x")):
        bad = record("qsgd", len(key), [])
        bad[key] = value
        write_record(tmp_path, bad)
    bad = record("onebit", 0, [])
    bad["settings"]["num_workers"] = "two"
    write_record(tmp_path, bad)
    environment = tmp_path / "environment.json"
    environment.write_text('{"cpu_count": 2, "pyth')
    export(tmp_path, plots=False)
    err = capsys.readouterr().err
    assert err.count("warning: skipping unreadable trial record") == 5
    assert f"warning: ignoring unreadable {environment}: " in err
    assert pd.read_csv(tmp_path / "trials.csv").trial_id.tolist() == [good["trial_id"]]
    for text, count in (("[2]", None), ('{"cpu_count": "2"}', None), ('{"cpu_count": 2}', 2)):
        environment.write_text(text)
        assert _cpu_count(tmp_path) == count
    assert "ignoring unreadable" in capsys.readouterr().err  # the list; a string count is just not used


LM_SWEEP = """\
name: lm
workload: {model: gpt, dataset: python_source, epochs: 2, optimizer: adam, lr: 0.003,
           target: {metric: test_loss, value: 2.5}}
sweep: {num_workers: 2, compressor: [fp32, {name: qsgd, bits: 4}]}
"""


@pytest.mark.slow  # draws every figure of its own study (the quick check draws them once)
def test_a_study_with_a_loss_target_is_judged_by_its_loss(tmp_path):
    from orchestrator.study.sweep_file import load_sweep

    folder = tmp_path / "lm"
    sweep_file = tmp_path / "lm.yaml"
    sweep_file.write_text(LM_SWEEP)
    losses = {"fp32": [2.8, 2.4], "qsgd": [3.0, 2.6], "fp16": [2.8, 2.45]}
    for trial in load_sweep(sweep_file).trials:
        rows = epochs(10.0, 0.01, [0.3, 0.35], 1.0)
        for row, loss in zip(rows, losses[trial["compressor"]]):
            row.update(test_loss=loss, test_perplexity=math.exp(loss))
        if trial["compressor"] != "qsgd":  # crossed 2.5 in the second epoch
            rows[1].update(time_to_target_s=15.0, steps_to_target=1500)
        write_record(folder, make_record(trial, "ok", None, rows))
    export(folder)
    table = pd.read_csv(folder / "trials.csv").set_index("compressor")
    assert table.loc["qsgd", "final_loss"] == 2.6
    assert table.loc["qsgd", "loss_delta"] == pytest.approx(0.2, abs=1e-12)
    assert table.loc["fp16", "loss_delta"] == pytest.approx(0.05, abs=1e-12)
    assert table.loc["fp32", "time_to_target_s"] == 15.0 and math.isnan(table.loc["qsgd", "time_to_target_s"])
    summary = (folder / "summary.md").read_text()
    assert "Target: test_loss ≤ 2.5." in summary and "w=2 test loss" in summary
    assert "![test loss change against speedup](plots/answer.png)" in summary
    qsgd_row = next(line for line in summary.splitlines() if line.startswith("| qsgd"))
    assert "2.6000 (n=1)" in qsgd_row and "not reached" in qsgd_row
    assert (folder / "plots" / "loss_vs_time.png").read_bytes().startswith(b"\x89PNG")
    assert not (folder / "plots" / "accuracy_vs_time.png").exists()


def test_records_of_earlier_versions_still_export(tmp_path):
    older = record("fp32", 0, epochs(10.0, 0.01, [0.95], 0.9))
    for row in older["history"]:
        row["time_to_accuracy_s"] = row.pop("time_to_target_s")  # the column's name before targets on any metric
    write_record(tmp_path, older)
    export(tmp_path, plots=False)
    (row,) = pd.read_csv(tmp_path / "trials.csv").to_dict("records")
    assert row["time_to_target_s"] == 10.0
