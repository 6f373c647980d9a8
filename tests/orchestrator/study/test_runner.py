"""The sweep runner without Ray (orchestrator/study/runner.py): trial folder names, the results folder's
lock, resuming from the saved sweep file, one sweep per folder and an edited one's old records retired; the
recorder (orchestrator/study/recorder.py) across a worker group's restart, a record that cannot be written, a
failed trial's traceback, hopeless sweeps (orchestrator/study/hopeless.py); and Tune's resume advice dropped
(orchestrator/study/ray_output.py). On a local Ray: test_runner_on_ray.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

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

    def __init__(self, trial: dict, predictor_input: bool = False):
        self.trial_id, self.error_file = trial["trial_id"], None
        self.config = {"point": {"trial": trial, "predictor_input": predictor_input}}


def test_a_worker_group_restart_starts_the_history_again(tmp_path):
    import io
    import json

    from orchestrator.results.export import export
    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "results"
    recorder = Recorder(results, Progress(1, stream=io.StringIO()), refresh=lambda r: export(r, plots=False))
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


def test_a_predictor_inputs_record_goes_to_its_own_folder_and_table(tmp_path):
    import io

    from orchestrator.results.export import export
    from orchestrator.study.progress import Progress
    from orchestrator.study.records import read_records
    from orchestrator.study.recorder import Recorder

    grid, measuring = load_sweep(write(tmp_path, TINY_SWEEP)).trials[:2]
    results = tmp_path / "results"
    recorder = Recorder(results, Progress(2, stream=io.StringIO()), refresh=lambda r: export(r, plots=False),
                         refresh_every_s=0)
    for trial in (_Trial(grid), _Trial(measuring, predictor_input=True)):
        recorder.on_trial_start(0, [], trial)
        recorder.on_trial_result(0, [], trial, {"epoch_metrics": {"epoch": 1, "test_accuracy": 0.5}})
        recorder.on_trial_result(0, [], trial, {"outcome": {"status": "ok", "reason": None, "model_summary": None}})
        recorder.on_trial_complete(0, [], trial)
    assert [r["trial_id"] for r in read_records(results)] == [grid["trial_id"]]
    assert [r["trial_id"] for r in read_records(results / "predictor_inputs")] == [measuring["trial_id"]]
    import pandas as pd
    assert list(pd.read_csv(results / "trials.csv")["trial_id"]) == [grid["trial_id"]]
    assert list(pd.read_csv(results / "predictor_inputs" / "trials.csv")["trial_id"]) == [measuring["trial_id"]]


def test_the_tables_are_rebuilt_after_the_first_record_then_at_most_every_refresh_every_s(tmp_path, monkeypatch):
    import io

    from orchestrator.study import recorder as recording
    from orchestrator.study.progress import Progress

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "results"
    rebuilt, now = [], [0.0]
    monkeypatch.setattr(recording.time, "monotonic", lambda: now[0])
    recorder = recording.Recorder(results, Progress(3, stream=io.StringIO()), refresh=rebuilt.append,
                                  refresh_every_s=30)
    # the monotonic clock at each record: 0 s, 10 s, 31 s (the first trial again: its record anew)
    for n, (trial, now[0]) in enumerate(zip(map(_Trial, [*sweep.trials[:2], sweep.trials[0]]), (0.0, 10.0, 31.0))):
        recorder.on_trial_start(0, [], trial)
        recorder.on_trial_result(0, [], trial, {"outcome": {"status": "ok", "reason": None, "model_summary": None}})
        recorder.on_trial_complete(0, [], trial)
        assert (results / "trials" / f"{trial.trial_id}.json").is_file()  # every record, at once
        # the first record's rebuild; none 10 s later; one again 31 s after the last
        assert len(rebuilt) == [1, 1, 2][n]


# ---------------------------------------------------------------- interrupts


def test_tunes_resume_advice_is_dropped():
    import logging

    from orchestrator.study.ray_output import _NoTuneResumeAdvice

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, text, None, None)

    advice = record('Experiment has been interrupted, but the most recent state was saved.\n'
                    'Resume experiment with: Tuner.restore(path="/r", trainable=...)')
    assert not _NoTuneResumeAdvice().filter(advice)
    assert _NoTuneResumeAdvice().filter(record("Total run time: 3.00 seconds"))


def test_tunes_error_naming_the_trials_that_did_not_complete_is_dropped():
    # Progress says what became of each (FAILED, stopped, interrupted with the resume command)
    import logging

    from orchestrator.study.ray_output import _NoIncompleteTrials

    incomplete = logging.LogRecord("ray.tune.tune", logging.ERROR, __file__, 1, "Trials did not complete: %s",
                                   (["run_trial_1a2b3c"],), None)
    assert not _NoIncompleteTrials().filter(incomplete)
    other = logging.LogRecord("ray.tune.tune", logging.ERROR, __file__, 1, "Experiment state snapshotting failed:",
                              None, None)
    assert _NoIncompleteTrials().filter(other)


# ---------------------------------------------------------------- another sweep, or this one changed


def test_a_results_folder_takes_one_sweep_and_an_edited_one_retires_the_old_records(tmp_path):
    import io
    import json
    import re

    import pytest

    from orchestrator.study.records import read_records
    from orchestrator.study.runner import ResultsExist, run_sweep

    sweep, results = finished_sweep(tmp_path, TINY_SWEEP + "sweep:\n  seed: [0, 1]\n")  # 4 trials
    run_sweep(sweep, results, resume=True, stream=io.StringIO())  # marks the folder as sweep t's
    first = (results / "sweep.yaml").read_text()
    other = load_sweep(write(tmp_path, TINY_SWEEP.replace("name: t", "name: u"), "u.yaml"))
    for resume in (False, True):
        with pytest.raises(ResultsExist, match=re.escape(f"{results} holds the results of sweep 't', not 'u': ")):
            run_sweep(other, results, resume=resume)
    assert (results / "sweep.yaml").read_text() == first

    edited = load_sweep(write(tmp_path, TINY_SWEEP + "sweep:\n  seed: [0]\n", "edited.yaml"))  # 2 of the 4
    with pytest.raises(ResultsExist) as refused:
        run_sweep(edited, results)
    assert str(refused.value) == (
        f"{results} already holds 2 finished trial(s) of this sweep and 2 record(s) of trials this sweep does not "
        f"have (an earlier version of it): pass --resume to run only this sweep's unfinished trials (moving the 2 "
        f"record(s) it does not have to {results / 'retired'}), or choose another --results folder")
    out = io.StringIO()
    assert run_sweep(edited, results, resume=True, stream=out) == (results, 0)
    (retired,) = (results / "retired").iterdir()
    assert (f"note: 2 record(s) of trials this sweep no longer has (it changed since they ran) moved from "
            f"{results / 'trials'} to {retired}, with the sweep file they ran from; the tables here hold this "
            f"sweep's trials only (`lowprec export {retired}` rebuilds theirs)") in out.getvalue()
    assert {r["settings"]["seed"] for r in read_records(results)} == {0}
    assert {r["settings"]["seed"] for r in read_records(retired)} == {1}  # kept, out of this sweep's tables
    assert (retired / "sweep.yaml").read_text() == first
    assert json.loads((retired / ".lowprec").read_text()) == {"sweep": "t"}
    assert (results / "sweep.yaml").read_text() == edited.path.read_text()


# ---------------------------------------------------------------- a record that cannot be written


def test_a_record_that_cannot_be_written_stops_the_sweep_and_keeps_the_others(tmp_path, monkeypatch):
    import errno
    import io
    import os

    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "results"
    out = io.StringIO()
    recorder = Recorder(results, Progress(2, stream=out))
    full, after = (_Trial(t) for t in sweep.trials)
    for trial in (full, after):
        recorder.on_trial_start(0, [], trial)
        recorder.on_trial_result(0, [], trial, {"outcome": {"status": "ok", "reason": None, "model_summary": None}})

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    assert not recorder.stopper.stop_all()
    recorder.on_trial_complete(0, [], full)  # no exception reaches Tune
    monkeypatch.undo()
    recorder.on_trial_complete(0, [], after)  # the sweep is stopping: runs again on resume
    assert recorder.stopper.stop_all() and not recorder.stopper(after.trial_id, {})
    assert list((results / "trials").iterdir()) == []  # no record, no partial file
    name = sweep.trials[0]["name"]
    assert (f"warning: could not write the record of {name} in {results / 'trials'}: No space left on device; "
            "stopping the sweep (the records written so far are safe)") in out.getvalue()


def test_the_resume_command_is_quoted_for_the_shell():
    from pathlib import Path

    from orchestrator.study.runner import resume_command

    assert resume_command(Path("/my sweeps/a.yaml"), Path("/data/it's here")) == (
        "lowprec run '/my sweeps/a.yaml' --results '/data/it'\"'\"'s here' --resume")


def test_a_failed_trials_traceback_is_kept_in_its_record(tmp_path):
    import io
    import json

    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "results"
    out = io.StringIO()
    recorder = Recorder(results, Progress(1, stream=out))
    trial = _Trial(sweep.trials[0])
    outside = tmp_path / "ray-temp" / "error.txt"  # Tune's error file, in Ray's temporary folder
    outside.parent.mkdir()
    text = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nRuntimeError: boom at epoch 2\n'
    outside.write_text(text)
    trial.error_file = str(outside)
    recorder.on_trial_start(0, [], trial)
    recorder.on_trial_error(0, [], trial)
    path = results / "trials" / f"{trial.trial_id}.json"
    record = json.loads(path.read_text())
    assert (record["status"], record["reason"], record["traceback"]) == ("failed", "RuntimeError: boom at epoch 2",
                                                                         text)
    assert f'traceback of {sweep.trials[0]["name"]}: in its record {path} ("traceback")' in out.getvalue()
    assert str(outside) not in out.getvalue()


# ---------------------------------------------------------------- failures in the user's words, hopeless sweeps


def test_a_trials_reason_is_the_users_exception_not_the_last_line_of_the_traceback(tmp_path):
    import json

    import ray.exceptions

    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "results"
    recorder = Recorder(results, Progress(1, stream=__import__("io").StringIO()))
    trial = _Trial(sweep.trials[0])
    try:
        raise ValueError("hidden must be a power of two, got 8\nsecond line")
    except ValueError as error:
        wrapped = ray.exceptions.RayTaskError("run", "Traceback ...", error)
    trial.get_pickled_error = lambda: wrapped
    trial.error_file = str(tmp_path / "error.txt")
    (tmp_path / "error.txt").write_text("Traceback ...\n  File \".../threading.py\", line 1002, in _bootstrap\n")
    recorder.on_trial_start(0, [], trial)
    recorder.on_trial_error(0, [], trial)
    record = json.loads((results / "trials" / f"{trial.trial_id}.json").read_text())
    assert record["reason"] == "ValueError: hidden must be a power of two, got 8"


def test_a_workers_error_or_death_becomes_a_reason_with_the_workers_traceback():
    import ray.exceptions

    from orchestrator.study.gang import _failure

    try:
        raise KeyError("no such layer")
    except KeyError as error:
        raised = _failure(ray.exceptions.RayTaskError("run", "Traceback: File my_models.py, line 3", error), 1)
    assert raised.reason == "KeyError: 'no such layer'" and "my_models.py, line 3" in raised.detail
    died = _failure(ray.exceptions.ActorDiedError(), 1)
    assert died.reason.startswith("the worker of rank 1 died without a Python error: killed (the kernel's OOM killer")
    from orchestrator.study.failures import death_reason

    assert death_reason("Task was killed due to the node running low on memory.\n pid: 4321", 0) == (
        "the worker of rank 0 (pid 4321) was killed by Ray's memory monitor: its node ran low on memory")


def test_the_time_limits_say_which_passed():
    from orchestrator.study.gang import Limits

    limits = Limits(startup_s=0.0, trial_s=3600.0)
    assert limits.left() == 0.0 and limits.passed().startswith(
        "the first training step was not done within startup_timeout_s = 0 s")
    limits.started = True  # the first step done: only the trial's limit is left
    assert 3500 < limits.left() <= 3600
    assert Limits(trial_s=0.0).passed() == "the trial ran past trial_timeout_s = 0 s"
    assert Limits().left() is None


SWEEP_OF_FOUR = TINY_SWEEP + "sweep: {seed: [0, 1]}\n"


def _ended(recorder, trial, status, reason, in_workers=True):
    recorder.on_trial_start(0, [], trial)
    recorder.on_trial_result(0, [], trial, {"outcome": {"status": status, "reason": reason, "model_summary": None,
                                                         "in_workers": in_workers}})
    recorder.on_trial_complete(0, [], trial)


@pytest.mark.parametrize("outcomes, hopeless", [
    # fp16 seeds 0 and 1 (one configuration), then fp32 seed 0: two configurations failed alike
    ([("failed", "ValueError: x"), ("failed", "ValueError: x")], None),
    ([("failed", "ValueError: x"), ("failed", "ValueError: x"), ("failed", "ValueError: x")], "ValueError: x"),
    ([("failed", "ValueError: x"), ("failed", "ValueError: x"), ("failed", "ValueError: y")], None),
    ([("ok", None), ("failed", "ValueError: x"), ("failed", "ValueError: x")], None),
])
def test_a_sweep_stops_when_every_trial_that_ended_failed_alike_in_two_configurations(tmp_path, outcomes, hopeless):
    import io

    from orchestrator.study.progress import Progress
    from orchestrator.study.hopeless import configuration
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, SWEEP_OF_FOUR))
    order = [t for t in sweep.trials if t["compressor"] == "fp16"] + [t for t in sweep.trials if t["compressor"] == "fp32"]
    recorder = Recorder(tmp_path / "results", Progress(4, stream=io.StringIO()),
                         configurations=len({configuration(t) for t in sweep.trials}))
    for trial, (status, reason) in zip(order, outcomes):
        _ended(recorder, _Trial(trial), status, reason)
    assert recorder.hopeless == hopeless and recorder.stopper.stop_all() == (hopeless is not None)


def test_trials_that_could_not_run_say_nothing_of_the_others(tmp_path):
    import io

    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, SWEEP_OF_FOUR))
    recorder = Recorder(tmp_path / "results", Progress(4, stream=io.StringIO()), configurations=2)
    for trial in sweep.trials[::2][:2]:  # fp32 and fp16, neither placed
        _ended(recorder, _Trial(trial), "failed", "cannot place 2 workers", in_workers=False)
    assert recorder.hopeless is None and not recorder.stopper.stop_all()


def test_a_one_configuration_grid_stops_after_two_seeds_failed_alike(tmp_path):
    import io

    from orchestrator.study.progress import Progress
    from orchestrator.study.recorder import Recorder

    sweep = load_sweep(write(tmp_path, TINY_SWEEP.replace("name: t\n", "name: t\nbaselines: false\n")
                            + "sweep: {seed: [0, 1, 2]}\n"))
    recorder = Recorder(tmp_path / "results", Progress(3, stream=io.StringIO()), configurations=1)
    for trial in sweep.trials[:2]:
        _ended(recorder, _Trial(trial), "failed", "OSError: disk")
    assert recorder.hopeless == "OSError: disk"


def test_skipped_trials_are_recorded_with_the_reason_and_run_again_on_resume(tmp_path, capsys):
    import io

    from orchestrator.cli import main
    from orchestrator.study.progress import Progress
    from orchestrator.study.records import finished_ids, make_record, read_records, write_record
    from orchestrator.study.hopeless import skip_hopeless

    sweep = load_sweep(write(tmp_path, SWEEP_OF_FOUR))
    results = tmp_path / "results" / sweep.name
    for trial in sweep.trials[:2]:
        write_record(results, make_record(trial, "failed", "ValueError: x", []))
    out = io.StringIO()
    assert skip_hopeless("ValueError: x", results, sweep.trials, Progress(4, stream=out)) == 2
    assert "stopped: every trial that ended failed with the same reason (ValueError: x); 2 trial(s)" in out.getvalue()
    records = {r["trial_id"]: r for r in read_records(results)}
    assert sorted((r["status"], r["reason"]) for r in records.values()) == [
        ("failed", "ValueError: x")] * 2 + [("skipped", "ValueError: x")] * 2
    assert finished_ids(results) == {t["trial_id"] for t in sweep.trials[:2]}  # a resume runs the skipped ones
    # No trial ok: `run` exits 1 and says so (here every trial has a record of a run: nothing to run).
    for trial in sweep.trials[2:]:
        write_record(results, make_record(trial, "diverged", "loss became nan", []))
    capsys.readouterr()
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 1
    assert "no trial finished ok (exit status 1)" in capsys.readouterr().err
    write_record(results, make_record(sweep.trials[3], "ok", None, []))
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 0


MOVABLE = """\
name: mine
workload: {model: nets/my_models.py:tiny_mlp, dataset: synthetic, input_shape: [1, 4, 4], num_samples: 64,
           test_samples: 32, epochs: 1, target_accuracy: 0.5}
"""


def test_a_study_naming_its_own_model_file_resumes_from_its_results_folder_moved_anywhere(tmp_path, monkeypatch):
    import shutil

    from orchestrator.cli import main
    from orchestrator.study.records import make_record, write_record
    from orchestrator.study.runner import run_sweep

    first = tmp_path / "first"
    (first / "nets").mkdir(parents=True)
    (first / "nets" / "my_models.py").write_text((Path(__file__).parent.parent / "data" / "my_models.py").read_text())
    sweep = load_sweep(write(first, MOVABLE))
    results = first / "results" / "mine"
    for trial in sweep.trials:
        write_record(results, make_record(trial, "ok", None, []))
    run_sweep(sweep, results, resume=True)  # nothing to run: keeps the sweep file and the model file
    assert (results / "code" / "nets" / "my_models.py").read_text() == (first / "nets" / "my_models.py").read_text()
    moved = tmp_path / "elsewhere" / "mine"
    moved.parent.mkdir()
    shutil.move(results, moved)
    shutil.rmtree(first)  # the original files are gone
    monkeypatch.chdir(tmp_path)
    again = load_sweep(moved / "sweep.yaml")
    assert [t["trial_id"] for t in again.trials] == [t["trial_id"] for t in sweep.trials]  # ids from contents
    assert again.trials[0]["model"] == f"{moved / 'code' / 'nets' / 'my_models.py'}:tiny_mlp"
    assert main(["run", str(moved / "sweep.yaml"), "--resume"]) == 0  # its own folder by default
    assert not (tmp_path / "results").exists()


def test_an_edited_model_file_changes_the_trial_ids(tmp_path):
    model = tmp_path / "nets" / "my_models.py"
    model.parent.mkdir()
    model.write_text((Path(__file__).parent.parent / "data" / "my_models.py").read_text())
    before = [t["trial_id"] for t in load_sweep(write(tmp_path, MOVABLE)).trials]
    model.write_text(model.read_text() + "\n# tuned\n")
    assert not set(before) & {t["trial_id"] for t in load_sweep(write(tmp_path, MOVABLE)).trials}


def test_the_loser_of_two_runs_starting_on_a_new_folder_is_told_it_is_in_use(tmp_path, capsys):
    import os

    from orchestrator.cli import main
    from orchestrator.study.runner import _lock

    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = tmp_path / "new"
    results.mkdir()
    held = _lock(results)  # the winner, before it marked the folder as its own
    (results / ".sweep.yaml.0000.tmp").write_text("")
    try:
        assert main(["run", str(sweep.path), "--results", str(results)]) == 2
    finally:
        held.close()
    err = capsys.readouterr().err
    assert f"is in use by another run (pid {os.getpid()} on" in err and "not a results folder" not in err
