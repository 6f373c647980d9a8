"""Exporting results folders a new user met (orchestrator/results/export.py, plots.py, writing.py): settings whose
valid value is an empty mapping (model_options: {}, dataset_options: {}), or a mapping parquet cannot hold as a
struct; a folder whose every trial failed (no metric at all: every figure says so, no warning); a table or
figure that cannot be made, which `lowprec export` reports in one line (no traceback). Records are built with
the helpers (no Ray)."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from orchestrator.results.export import export
from orchestrator.study.records import write_record
from tests.helpers import epochs, finished_sweep, record

TABLES = {"trials.csv", "trials.parquet", "history.csv", "summary.md"}


def with_settings(folder: Path, **settings) -> None:
    """fp32 and qsgd trials of one worker that reached the target, ``settings`` added to each."""
    for compressor in ("fp32", "qsgd"):
        row = record(compressor, 0, epochs(1.0, 0.01, [0.5, 0.95], 0.9))
        row["settings"].update(settings)
        write_record(folder, row)


# ---------------------------------------------------------------- empty mappings and other valid settings


def test_empty_model_and_dataset_options_write_every_table_and_plot(tmp_path):
    with_settings(tmp_path, model_options={}, dataset_options={})
    written = export(tmp_path)
    assert set(written) == TABLES | {"plots/answer.png", "plots/accuracy_vs_time.png",
                                     "plots/step_time_breakdown.png"}
    assert all(path.is_file() for path in written.values())
    parquet = pd.read_parquet(tmp_path / "trials.parquet")
    csv = pd.read_csv(tmp_path / "trials.csv")
    assert list(parquet.columns) == list(csv.columns)
    assert parquet.name.tolist() == csv.name.tolist() == ["fp32-lr0.1-w1-s0", "qsgd-lr0.1-w1-s0"]
    for column in ("model_options", "dataset_options"):
        assert parquet[column].tolist() == ["{}", "{}"]  # canonical JSON text: a struct needs a field
        assert [json.loads(text) for text in parquet[column]] == [{}, {}]
        assert csv[column].tolist() == ["{}", "{}"]
    history = pd.read_csv(tmp_path / "history.csv")
    assert history.model_options.tolist() == ["{}"] * 4
    assert parquet.final_accuracy.tolist() == [0.95, 0.95]
    summary = (tmp_path / "summary.md").read_text()
    assert "| fp32 | 0.9500 (n=1) | 2.0 (n=1) | 1.00x (n=1) |" in summary


@pytest.mark.parametrize(("values", "stored"), [
    ([{}, None], ["{}", None]),  # an empty mapping beside a trial without the setting
    ([{"a": {}}, {"a": {}}], ['{"a": {}}', '{"a": {}}']),  # an empty mapping inside one
    ([{"a": [{}]}, {"a": [{}]}], ['{"a": [{}]}', '{"a": [{}]}']),  # ... inside a list
    ([{"a": 1}, {"a": "x"}], ['{"a": 1}', '{"a": "x"}']),  # an option of two types
    ([{"size": 2 ** 70, "b": 1}, {"size": 1, "b": 2}], ['{"b": 1, "size": 1180591620717411303424}',
                                                       '{"b": 2, "size": 1}']),  # beyond 64 bits; keys sorted
], ids=["empty-and-null", "nested-empty", "empty-in-list", "two-types", "big-integer"])
def test_mappings_parquet_cannot_hold_as_structs_are_stored_as_json_text(tmp_path, values, stored):
    for compressor, value in zip(("fp32", "qsgd"), values):
        row = record(compressor, 0, epochs(1.0, 0.01, [0.5, 0.95], 0.9))
        row["settings"]["model_options"] = value
        write_record(tmp_path, row)
    assert set(export(tmp_path, plots=False)) == TABLES
    parquet = pd.read_parquet(tmp_path / "trials.parquet")
    assert [None if pd.isna(text) else text for text in parquet.model_options] == stored
    assert len(pd.read_csv(tmp_path / "trials.csv")) == 2


def test_mappings_parquet_holds_stay_structs(tmp_path):
    with_settings(tmp_path, model_options={"hidden": 64, "act": "relu"}, input_shape=[1, 28, 28],
                  target={"metric": "test_accuracy", "value": 0.9})
    export(tmp_path, plots=False)
    parquet = pd.read_parquet(tmp_path / "trials.parquet")
    assert parquet.model_options.tolist() == [{"hidden": 64, "act": "relu"}] * 2
    assert parquet.target.tolist() == [{"metric": "test_accuracy", "value": 0.9}] * 2
    assert [list(shape) for shape in parquet.input_shape] == [[1, 28, 28]] * 2
    schema = pa.parquet.read_schema(tmp_path / "trials.parquet")
    assert str(schema.field("model_options").type) == "struct<hidden: int64, act: string>"


def test_a_frame_parquet_holds_is_written_byte_for_byte_as_before():
    from orchestrator.results.export import parquet_frame

    frame = pd.DataFrame({"name": ["a", "b"], "lr": [0.1, None], "seed": [0, 1],
                          "model_options": [{"hidden": 64}, {"hidden": 32, "act": "relu"}],
                          "target": [None, None], "input_shape": [[1, 28, 28], [3, 32, 32]]})

    def parquet(table: pd.DataFrame) -> bytes:
        out = io.BytesIO()
        table.to_parquet(out, index=False)
        return out.getvalue()

    assert parquet(parquet_frame(frame)) == parquet(frame.convert_dtypes())


# ---------------------------------------------------------------- every trial failed


def test_a_folder_whose_every_trial_failed_writes_every_file_without_a_warning(tmp_path, monkeypatch, capsys):
    from orchestrator.results import plots

    for rate in ("100mbit", "1gbit"):
        for compressor in ("fp32", "qsgd"):
            nothing = [] if compressor == "fp32" else [{"epoch": 1, "train_time_s": None, "test_accuracy": None,
                                                       "test_loss": None, "status": "running"}]
            row = record(compressor, 0, nothing, workers=2, status="failed")
            row["settings"]["bandwidth"] = rate
            row["trial_id"] = row["name"] = f"{compressor}-{rate}"
            row["reason"] = "RuntimeError: boom"
            write_record(tmp_path, row)
    said = []
    say = plots._nothing_here
    monkeypatch.setattr(plots, "_nothing_here", lambda ax, why: (said.append(why), say(ax, why)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = export(tmp_path)
    assert [str(warning.message) for warning in caught] == []
    assert capsys.readouterr().err == ""
    assert set(written) == TABLES | {f"plots/{name}" for name in (
        "answer.png", "accuracy_vs_time.png", "bytes_sent.png", "speedup_vs_workers.png", "speedup_vs_bandwidth.png")}
    for path in written.values():
        assert path.is_file() and (path.suffix != ".png" or path.read_bytes().startswith(b"\x89PNG"))
    assert said == ['no "ok" trial with both its speedup and its accuracy change vs fp32',
                    "no trial reported a test accuracy",
                    'no "ok" trial of 2 or more workers sent bytes',
                    'no "ok" trial of 2 or more workers has a speedup vs fp32',
                    'no "ok" trial has a speedup vs fp32']
    trials = pd.read_csv(tmp_path / "trials.csv")
    assert trials.status.tolist() == ["failed"] * 4 and trials.final_accuracy.isna().all()
    assert trials.name.tolist() == ["fp32-100mbit", "fp32-1gbit", "qsgd-100mbit", "qsgd-1gbit"]
    assert trials.epochs_run.tolist() == [0, 0, 1, 1]
    assert len(pd.read_parquet(tmp_path / "trials.parquet")) == 4
    summary = (tmp_path / "summary.md").read_text()
    assert "4 trials: 0 ok, 0 unstable, 0 diverged, 4 failed." in summary
    assert "| fp32 bandwidth=100mbit | – | – | – |" in summary
    assert summary.count("- failed, 4 trials: RuntimeError: boom.") == 1  # each reason once, with its count


# ---------------------------------------------------------------- a file that cannot be made


def test_a_table_the_writer_refuses_exits_1_in_one_line_without_a_traceback(tmp_path, monkeypatch, capsys):
    from orchestrator.cli import main

    sweep, results = finished_sweep(tmp_path)

    def refuse(frame, path, **kwargs):
        raise pa.lib.ArrowNotImplementedError("Cannot write struct type 'model_options' with no child field to "
                                              "Parquet.\nConsider adding a dummy child field.")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", refuse)
    assert main(["export", str(results)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"error: could not write the tables of {results}: ArrowNotImplementedError: Cannot write struct type "
        f"'model_options' with no child field to Parquet. Consider adding a dummy child field. "
        f"({results / 'trials.parquet'}); the trial records are safe in {results / 'trials'}: fix the cause, then "
        f"run `lowprec export {results}` again\n")
    assert sorted(p.name for p in results.iterdir()) == ["trials", "trials.csv"]  # the table before it; no temporary


def test_a_figure_that_cannot_be_drawn_exits_1_naming_it(tmp_path, monkeypatch, capsys):
    from orchestrator.cli import main
    from orchestrator.results import plots

    sweep, results = finished_sweep(tmp_path)

    def cannot(*args):
        raise ValueError("Data cannot be log-scaled because all values are <= 0.")

    monkeypatch.setattr(plots, "_answer", cannot)
    assert main(["export", str(results)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not write the tables of {results}: ValueError: Data cannot be log-scaled "
                          f"because all values are <= 0. ({results / 'plots' / 'answer.png'}); the trial records")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert {"trials.csv", "trials.parquet", "history.csv"} <= {p.name for p in results.iterdir()}
    assert not (results / "summary.md").exists() and list((results / "plots").iterdir()) == []


def test_after_a_run_a_table_that_cannot_be_made_is_named_in_the_warning(tmp_path, monkeypatch):
    from orchestrator.results.export import export_or_warn

    sweep, results = finished_sweep(tmp_path)
    monkeypatch.setattr(pd.DataFrame, "to_parquet", lambda *args, **kwargs: 1 / 0)
    out = io.StringIO()
    export_or_warn(results, out)
    assert out.getvalue() == (
        f"warning: could not write the tables of {results}: ZeroDivisionError: division by zero "
        f"({results / 'trials.parquet'}); the trial records are safe in {results / 'trials'}: fix the cause, "
        f"then run `lowprec export {results}`\n")
