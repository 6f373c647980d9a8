"""The sweep runner without Ray (orchestrator/study/runner.py): trial folder names, the results folder's
lock, resuming from the saved sweep file, the recorder across a worker group's restart, and Tune's
resume advice dropped. On a local Ray: test_runner_on_ray.py.
"""
from __future__ import annotations

from orchestrator.study.sweep_file import load_sweep
from tests.helpers import TINY_SWEEP, finished_sweep, write


# ---------------------------------------------------------------- trial folders and the results folder


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

    sweep, results = finished_sweep(tmp_path)
    held = _lock(results)
    try:
        assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 2
    finally:
        held.close()
    assert f"is in use by another run (pid {os.getpid()} on" in capsys.readouterr().err
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 0  # released


def test_resuming_from_the_saved_copy_of_the_sweep_file(tmp_path):
    from orchestrator.study.runner import run_sweep

    sweep, results = finished_sweep(tmp_path)
    run_sweep(sweep, results, resume=True)  # writes results/sweep.yaml
    again = load_sweep(results / "sweep.yaml")
    assert run_sweep(again, results, resume=True) == (results.resolve(), 0)


# ---------------------------------------------------------------- worker-group restarts


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

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
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


# ---------------------------------------------------------------- interrupts


def test_tunes_resume_advice_is_dropped():
    import logging

    from orchestrator.study.runner import _NoTuneResumeAdvice

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, text, None, None)

    advice = record('Experiment has been interrupted, but the most recent state was saved.\n'
                    'Resume experiment with: Tuner.restore(path="/r", trainable=...)')
    assert not _NoTuneResumeAdvice().filter(advice)
    assert _NoTuneResumeAdvice().filter(record("Total run time: 3.00 seconds"))
