"""Regression tests of failures found by trying to break the tool (issue 10), one or more per item.

Items that need Ray (trial folder names, placement, restarts, the lock, exposure,
interrupts, the final export) are in tests/test_sweep_ray.py; the others are here.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
import torch

import compressors
from orchestrator.study.sweep_file import ConfigError, load_sweep

HEADER = """\
name: t
workload: {model: mlp, width: 8, depth: 1, epochs: 2, target_accuracy: 0.9}
"""


def write(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def fails_at(path: Path, line: int, *words: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------- 1, 3: names


@pytest.mark.parametrize("name", [".", "..", "a" * 101, "a/b"])
def test_sweep_names_that_escape_or_overflow_the_results_folder_are_refused(tmp_path, name):
    fails_at(write(tmp_path, HEADER.replace("name: t", f"name: '{name}'")), 1, "name")


def test_a_100_character_sweep_name_is_valid(tmp_path):
    assert load_sweep(write(tmp_path, HEADER.replace("name: t", "name: " + "a" * 100))).name == "a" * 100


# ---------------------------------------------------------------- 6: alias bomb


def _bomb(level: int) -> str:
    """Nested aliases: 9**(level + 1) entries once expanded, a few hundred bytes written."""
    if level == 0:
        return "&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"
    return f"&a{level} [{_bomb(level - 1)}, " + ", ".join([f"*a{level - 1}"] * 8) + "]"


@pytest.mark.parametrize("where", ["workload", "sweep"])
def test_an_alias_bomb_in_a_value_gets_a_short_message(tmp_path, where):
    text = "name: t\nworkload:\n  model: mlp\n  target_accuracy: 0.9\n"
    text += f"  lr: {_bomb(9)}\n" if where == "workload" else f"sweep:\n  lr: [{_bomb(9)}]\n"
    assert len(text) < 1000
    message = fails_at(write(tmp_path, text), 5 if where == "workload" else 6, f"{where}.lr")
    assert len(message) < 300


# ---------------------------------------------------------------- 7: caught before Ray

BLOCK = "name: t\nworkload:\n  model: mlp\n  epochs: 2\n  target_accuracy: 0.9\n"  # what follows is line 6


@pytest.mark.parametrize("extra, line, words", [
    ("  lr: .nan\n", 6, ["workload.lr", "(0, inf)"]),
    ("  momentum: .nan\n", 6, ["workload.momentum"]),
    ("  weight_decay: .nan\n", 6, ["workload.weight_decay"]),
    ("sweep:\n  target_accuracy: [.nan]\n", 7, ["both workload and sweep"]),
    ("cluster: {cpus_per_worker: .nan}\n", 6, ["cluster.cpus_per_worker"]),
    ("cluster: {gpus_per_worker: .nan}\n", 6, ["cluster.gpus_per_worker"]),
    ("sweep:\n  compressor: [{name: adaptive, pi: .nan}]\n", 7, ["pi"]),
    ("sweep:\n  seed: [4294967296]\n", 7, ["sweep.seed[0]", "4294967295"]),
    ("cluster: {backend: nccl}\n", 6, ["nccl needs GPUs"]),
    ("  dataset: synthetic\n  data_dir: somewhere\n", 7, ["data_dir"]),
    ("  data_dir: /no/such/folder\n", 6, ["data_dir", "is not a folder here"]),
    ("  warmup_epochs: 2\n", 6, ["warmup_epochs=2 must be < epochs=2"]),
    ("sweep:\n  compressor: [{name: fp32, workload: {model: lenet5, width: 8}}]\n", 7,
     ["lenet5", "takes no option 'width'"]),
    ("sweep:\n  lr: [0.1, 0.2, 0.3, 0.4, 0.5]\n  seed: [0, 1]\nmax_trials: 19\n", 9,
     ["20 trials", "max_trials=19"]),
])
def test_bad_values_are_caught_before_ray(tmp_path, extra, line, words):
    fails_at(write(tmp_path, BLOCK + extra), line, *words)


def test_a_grid_beyond_the_default_limit_is_refused_at_once(tmp_path):
    seeds = ", ".join(str(i) for i in range(101))
    sizes = ", ".join(str(i) for i in range(1, 101))
    text = HEADER + f"sweep:\n  seed: [{seeds}]\n  batch_size: [{sizes}]\n"
    # 2 baselines x 101 seeds x 100 batch sizes
    fails_at(write(tmp_path, text), 3, "20200 trials", "max_trials=10000")


# ---------------------------------------------------------------- 8: bad YAML


@pytest.mark.parametrize("text, line, words", [
    (HEADER + "sweep:\n  lr: [0.1]\x07\n", 4, ["invalid YAML", "not allowed"]),
    (HEADER.encode() + b"sweep:\n  lr: [0.1] # caf\xe9\n", 4, ["not UTF-8", "0xe9"]),
    (HEADER + "sweep:\n  ? [a, b]\n  : 1\n", 4, ["a key must be a plain name"]),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", 1, ["nested too deeply"]),
])
def test_bad_yaml_exits_with_file_and_line(tmp_path, text, line, words):
    fails_at(write(tmp_path, text), line, *words)


def test_merge_keys_may_be_overridden(tmp_path):
    text = textwrap.dedent("""\
        name: t
        base: &base {model: mlp, width: 8, depth: 1, epochs: 1, target_accuracy: 0.9}
        workload:
          <<: *base
          epochs: 2
        """)
    # 'base' is not a key of a sweep file: a merge source must live where its keys are valid
    fails_at(write(tmp_path, text), 2, "unknown key 'base'")
    text = textwrap.dedent("""\
        name: t
        workload:
          <<: {model: mlp, width: 8, depth: 1, epochs: 1, target_accuracy: 0.9}
          epochs: 2
        sweep:
          compressor:
            - &q {name: qsgd, bits: 4}
            - {<<: *q, bits: 2}
        """)
    trials = load_sweep(write(tmp_path, text)).trials
    assert {t["epochs"] for t in trials} == {2}
    assert sorted(t["compressor_params"]["bits"] for t in trials if t["compressor"] == "qsgd") == [2, 4]
    fails_at(write(tmp_path, text.replace("  epochs: 2\n", "  epochs: 2\n  epochs: 3\n")), 5, "duplicate key 'epochs'")


# ---------------------------------------------------------------- 9, 17: compressors


def test_qsgd_work_follows_the_tensor_not_the_bucket(monkeypatch):
    padded = []
    pad = torch.nn.functional.pad

    def recording_pad(x, widths, *args, **kwargs):
        out = pad(x, widths, *args, **kwargs)
        padded.append(out.numel())
        return out

    monkeypatch.setattr(torch.nn.functional, "pad", recording_pad)
    x = torch.randn(10)
    small = compressors.get("qsgd", bucket=16, impl="reference")  # the torch code pads; the kernels never do
    for bucket in (2**20, 2**26, 2**31 - 1):
        c = compressors.get("qsgd", bucket=bucket, impl="reference")
        y = c.decode(c.encode(x, step=1))
        assert torch.equal(y, small.decode(small.encode(x, step=1)))  # one bucket either way
    assert max(padded) <= 16


def test_linear8_refuses_code_255():
    c = compressors.get("linear8")
    payload = c.encode(torch.randn(100))
    payload[-1] = 255
    with pytest.raises(compressors.PayloadError, match="code 255"):
        c.decode(payload)


# ---------------------------------------------------------------- 10: non-finite at the end


def test_a_non_finite_update_on_the_last_step_marks_the_trial_diverged():
    from orchestrator.study.train_loop import train

    # one step whose loss is finite and whose update overflows the weights
    result = train({"model": "mlp", "width": 16, "depth": 1, "lr": 1e37, "momentum": 0.0,
                    "epochs": 1, "max_steps_per_epoch": 1})
    assert math.isfinite(result["final"]["train_loss"])
    assert result["status"] == "diverged", result
    assert result["reason"] == "test loss became nan in epoch 1"


# ---------------------------------------------------------------- 1, 5, 11, 12, 13: the results folder


def _finished_sweep(tmp_path: Path, text: str = HEADER):
    """A sweep whose every trial already has a record, so run_sweep never needs Ray."""
    from orchestrator.study.records import make_record, write_record

    sweep = load_sweep(write(tmp_path, text))
    results = tmp_path / "results" / sweep.name
    for trial in sweep.trials:
        write_record(results, make_record(trial, "ok", None, []))
    return sweep, results


def test_trial_folder_names_are_safe_short_and_unique():
    from orchestrator.study.runner import trial_dirname

    long = {"name": "fp32 data_dir=a/x " + "lr=0.1 " * 60, "trial_id": "0123456789ab"}
    name = trial_dirname(long)
    assert "/" not in name and " " not in name and len(name) <= 100 and name.endswith("-0123456789ab")
    assert trial_dirname({"name": "///", "trial_id": "0123456789ab"}) == "0123456789ab"
    assert trial_dirname({**long, "trial_id": "ffffffffffff"}) != name


def test_a_second_run_into_the_same_results_exits_2_naming_the_holder(tmp_path, capsys):
    import os

    from orchestrator.cli import main
    from orchestrator.study.runner import _lock

    sweep, results = _finished_sweep(tmp_path)
    held = _lock(results)
    try:
        assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 2
    finally:
        held.close()
    assert f"is in use by another run (pid {os.getpid()} on" in capsys.readouterr().err
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 0  # released


def test_resuming_from_the_saved_copy_of_the_sweep_file(tmp_path):
    from orchestrator.study.runner import run_sweep

    sweep, results = _finished_sweep(tmp_path)
    run_sweep(sweep, results, resume=True)  # writes results/sweep.yaml
    again = load_sweep(results / "sweep.yaml")
    assert run_sweep(again, results, resume=True) == (results.resolve(), 0)


def test_a_corrupt_record_is_skipped_with_a_warning_naming_it(tmp_path, capsys):
    from orchestrator.results.export import export
    from orchestrator.study.records import finished_ids

    sweep, results = _finished_sweep(tmp_path)
    bad = results / "trials" / f"{sweep.trials[0]['trial_id']}.json"
    bad.write_text('{"trial_id": "trunc')
    export(results)
    assert f"skipping unreadable trial record {bad}" in capsys.readouterr().err
    assert finished_ids(results) == {t["trial_id"] for t in sweep.trials[1:]}  # resume runs it again
    import pandas as pd
    assert len(pd.read_csv(results / "trials.csv")) == len(sweep.trials) - 1


def test_an_unwritable_table_warns_and_keeps_the_records(tmp_path):
    import io

    from orchestrator.results.export import export_or_warn

    sweep, results = _finished_sweep(tmp_path)
    (results / "trials.csv").mkdir()  # a folder where the table goes: writing it fails
    out = io.StringIO()
    export_or_warn(results, out)
    assert "could not write the tables" in out.getvalue() and "lowprec export" in out.getvalue()
    assert len(list((results / "trials").glob("*.json"))) == len(sweep.trials)


# ---------------------------------------------------------------- 2: placement


def test_workers_that_fit_count_whole_bundles_per_node():
    from orchestrator.study.placement import workers_that_fit

    assert workers_that_fit({"CPU": 0.49}, [{"CPU": 1.99}]) == 4  # Ray's 1e-4 units: 4 * 0.49 <= 1.99
    assert workers_that_fit({"CPU": 2.0}, [{"CPU": 1.5}, {"CPU": 1.5}]) == 0  # 3 CPUs, no node holds 2
    assert workers_that_fit({"CPU": 1.0, "GPU": 1.0}, [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0}]) == 2
    assert workers_that_fit({"CPU": 1.0}, []) == 0


@pytest.mark.parametrize("num_workers, per_worker, words", [
    (10_000, {"CPU": 1.0}, ["cannot place 10000 workers of {CPU 1} each", "at most 2 such workers",
                            "in all: CPU 2"]),
    (1, {"CPU": 1.0, "GPU": 1.0}, ["cannot place 1 workers of {CPU 1, GPU 1}", "at most 0", "GPU 0"]),
])
def test_an_unplaceable_request_is_named_with_what_the_cluster_has(num_workers, per_worker, words):
    from orchestrator.study.placement import placement_problem

    problem = placement_problem(num_workers, per_worker, [{"CPU": 2.0, "memory": 1e9}])
    for word in words:
        assert word in problem, problem
    assert placement_problem(2, {"CPU": 1.0}, [{"CPU": 2.0}]) is None


def test_placement_timeout_is_a_checked_setting(tmp_path):
    fails_at(write(tmp_path, HEADER + "cluster: {placement_timeout_s: .nan}\n"), 3, "placement_timeout_s")
    sweep = load_sweep(write(tmp_path, HEADER + "cluster: {placement_timeout_s: null}\n"))
    assert sweep.cluster["placement_timeout_s"] is None
    assert load_sweep(write(tmp_path, HEADER)).cluster["placement_timeout_s"] == 600.0


# ---------------------------------------------------------------- 4: worker-group restarts


class _Trial:
    """What the recorder reads of a Tune trial."""

    def __init__(self, trial: dict):
        self.trial_id, self.config, self.error_file = trial["trial_id"], {"trial": trial}, None


def test_a_worker_group_restart_starts_the_history_again(tmp_path):
    import io
    import json

    from orchestrator.results.export import export
    from orchestrator.study.progress import Progress
    from orchestrator.study.runner import _recorder

    sweep = load_sweep(write(tmp_path, HEADER))
    results = tmp_path / "results"
    recorder = _recorder(results, Progress(1, stream=io.StringIO()), refresh=export)
    trial = _Trial(sweep.trials[0])
    recorder.on_trial_start(0, [], trial)
    for epochs in (3, 2):  # the first attempt dies after epoch 3, the second runs both epochs
        recorder.on_trial_result(0, [], trial, {"attempt_started": True})
        for epoch in range(1, epochs + 1):
            recorder.on_trial_result(0, [], trial, {"epoch_metrics": {"epoch": epoch, "test_accuracy": 0.5}})
    recorder.on_trial_result(0, [], trial, {"outcome": {"status": "ok", "reason": None, "model_summary": None}})
    recorder.on_trial_complete(0, [], trial)
    record = json.loads((results / "trials" / f"{trial.trial_id}.json").read_text())
    assert [e["epoch"] for e in record["history"]] == [1, 2]
    assert record["attempts"] == 2
    import pandas as pd
    trials = pd.read_csv(results / "trials.csv")
    assert trials.loc[0, "epochs_run"] == 2 and trials.loc[0, "attempts"] == 2


# ---------------------------------------------------------------- 16: interrupts


def test_tunes_resume_advice_is_dropped():
    import logging

    from orchestrator.study.runner import _NoTuneResumeAdvice

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, text, None, None)

    advice = record('Experiment has been interrupted, but the most recent state was saved.\n'
                    'Resume experiment with: Tuner.restore(path="/r", trainable=...)')
    assert not _NoTuneResumeAdvice().filter(advice)
    assert _NoTuneResumeAdvice().filter(record("Total run time: 3.00 seconds"))


def test_no_summary_is_printed_before_any_trial_finished(tmp_path, capsys):
    from orchestrator.cli import _print_outcome
    from orchestrator.results.export import export

    (tmp_path / "trials").mkdir()
    export(tmp_path)
    _print_outcome(tmp_path)
    out = capsys.readouterr().out
    assert "no trial has finished yet" in out and "Target accuracy" not in out and "|" not in out
    assert (tmp_path / "summary.md").read_text() == f"# {tmp_path.name}\n\nNo trial has finished yet.\n"
