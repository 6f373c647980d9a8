"""The command line (orchestrator/cli.py): ``validate`` and ``run --dry_run`` in a fresh interpreter
(the exit status, the located message, no Ray imported), and the outcome printed before any trial
finished. Each subcommand's own behaviour is tested with the code it runs.
"""
from __future__ import annotations

import pytest

from tests.helpers import SWEEP_HEADER as HEADER
from tests.helpers import run_mains, write


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``python -m orchestrator`` with a bad and a good sweep file, in one new interpreter."""
    tmp_path = tmp_path_factory.mktemp("cli")
    bad = write(tmp_path, HEADER + "sweep:\n  compressor: [{name: qsgd, bitz: 4}]\n", "x.yaml")
    good = write(tmp_path, HEADER + "sweep:\n  num_workers: [1, 2]\n")
    runs = run_mains("orchestrator", {"validate": ["validate", str(good)],
                                      "dry_run": ["run", str(good), "--dry_run", "--results", str(tmp_path / "r")],
                                      "bad": ["validate", str(bad)]})
    return tmp_path, bad, runs


def test_validate_exits_2_with_the_located_message(fresh):
    _, path, runs = fresh
    done = runs["bad"]
    assert done["returncode"] == 2
    assert f"{path}:9: unknown key 'bitz' in sweep.compressor[0] (did you mean 'bits'?)" in done["stderr"]
    assert done["stdout"] == ""


def test_validate_and_dry_run_list_trials_without_importing_ray(fresh):
    tmp_path, _, runs = fresh
    for key in ("validate", "dry_run"):
        assert runs[key]["returncode"] == 0, runs[key]["stderr"]
    assert "ray" not in runs["modules"], "ray was imported"
    stdout = runs["validate"]["stdout"] + runs["dry_run"]["stdout"]
    # printed twice (validate, dry run): a header and one row per trial (fp32, fp16 x 2 workers)
    assert stdout.count("t: 4 trials") == 2
    assert stdout.count("fp16 num_workers=2 seed=0") == 2
    assert not (tmp_path / "r").exists()


def test_no_summary_is_printed_before_any_trial_finished(tmp_path, capsys):
    from orchestrator.cli import _print_outcome
    from orchestrator.results.export import export

    (tmp_path / "trials").mkdir()
    export(tmp_path)
    _print_outcome(tmp_path)
    out = capsys.readouterr().out
    assert "no trial has finished yet" in out and "Target accuracy" not in out and "|" not in out
    assert (tmp_path / "summary.md").read_text() == f"# {tmp_path.name}\n\nNo trial has finished yet.\n"


def test_run_as_a_ray_job_refuses_a_relative_or_missing_results(tmp_path, monkeypatch, capsys):
    """A job's driver runs in Ray's temporary copy of --working-dir: a relative results folder would be
    lost with it. Ray marks a driver of `ray job submit` with RAY_JOB_CONFIG_JSON_ENV_VAR."""
    from pathlib import Path

    from orchestrator.cli import _job_results_problem, main

    sweep = write(tmp_path, HEADER + "sweep:\n  num_workers: 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", '{"metadata": {"job_submission_id": "raysubmit_1"}}')
    assert main(["run", str(sweep), "--results", "results/t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --results must be an absolute path under `ray job submit`, got 'results/t': ")
    assert err.count("\n") == 1 and "temporary copy of --working-dir" in err
    assert main(["run", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --results is required under `ray job submit`, as an absolute path: the default "
                          "results/t would be written into the job's temporary copy of --working-dir")
    assert err.count("\n") == 1
    assert not (tmp_path / "results").exists()
    assert _job_results_problem(tmp_path / "r", "t") is None
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR")
    assert _job_results_problem(Path("r"), "t") is None and _job_results_problem(None, "t") is None
