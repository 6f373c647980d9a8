"""The command line (orchestrator/cli.py): ``validate`` and ``run`` refusing a sweep file (the exit status,
the located message), ``validate`` and ``run --dry_run`` in a fresh interpreter (no Ray imported), the help
texts as a terminal shows them, and the outcome printed before any trial finished. Each subcommand's own
behaviour is tested with the code it runs.
"""
from __future__ import annotations

import pytest

from tests.helpers import SWEEP_HEADER as HEADER
from tests.helpers import run_mains, write
from tests.mains import run_main


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``python -m orchestrator`` validating a sweep file and listing its trials, in one new interpreter."""
    tmp_path = tmp_path_factory.mktemp("cli")
    good = write(tmp_path, HEADER + "sweep:\n  num_workers: [1, 2]\n")
    runs = run_mains("orchestrator", {"validate": ["validate", str(good)],
                                      "dry_run": ["run", str(good), "--dry_run", "--results", str(tmp_path / "r")]})
    return tmp_path, runs


def test_validate_exits_2_with_the_located_message(tmp_path):
    path = write(tmp_path, HEADER + "sweep:\n  compressor: [{name: qsgd, bitz: 4}]\n", "x.yaml")
    done = run_main("orchestrator", ["validate", str(path)])
    assert done["returncode"] == 2
    assert f"{path}:9: unknown key 'bitz' in sweep.compressor[0] (did you mean 'bits'?)" in done["stderr"]
    assert done["stdout"] == ""


def test_a_model_file_that_cannot_be_imported_exits_2_before_ray_in_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("import nowhere_to_be_found\n")
    reference = write(tmp_path, HEADER.replace("model: mlp", "model: broken.py:build"), "reference.yaml")
    done = run_main("orchestrator", ["run", str(reference), "--results", str(tmp_path / "r2")])
    assert done["returncode"] == 2 and done["stdout"] == ""
    assert done["stderr"] == (f"error: {reference}:3: model: cannot import {tmp_path / 'broken.py'}: "
                              "no module named 'nowhere_to_be_found'\n")
    assert not (tmp_path / "r2").exists()


@pytest.mark.slow  # a new interpreter: what it imported
def test_validate_and_dry_run_list_trials_without_importing_ray(fresh):
    tmp_path, runs = fresh
    for key in ("validate", "dry_run"):
        assert runs[key]["returncode"] == 0, runs[key]["stderr"]
    assert "ray" not in runs["modules"], "ray was imported"
    stdout = runs["validate"]["stdout"] + runs["dry_run"]["stdout"]
    # printed twice (validate, dry run): a header and one row per trial (fp32, fp16 x 2 workers)
    assert stdout.count("t: 4 trials") == 2
    assert stdout.count("fp16 num_workers=2 seed=0") == 2
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", [[], ["validate"], ["run"], ["export"], ["predict"], ["advise"], ["cluster"],
                                     ["cluster", "up"], ["cluster", "shape"], ["cluster", "exec"]])
def test_help_reads_as_a_terminal_shows_it(command, capsys):
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: lowprec") and "`" not in text  # no markup of the docs' sources


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


# ---------------------------------------------------------------- results folders that are not ours to write


def test_run_refuses_a_folder_that_is_not_a_results_folder_and_touches_nothing(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from orchestrator.cli import main

    sweep = write(tmp_path, HEADER + "sweep:\n  num_workers: 1\n", "t.yaml")
    theirs = tmp_path / "mine"
    theirs.mkdir()
    files = {"sweep.yaml": b"name: mine\n", "trials.csv": b"a,b\n1,2\n", "summary.md": b"# mine\n",
             "plots/answer.png": b"\x89PNG mine"}
    for name, data in files.items():
        (theirs / name).parent.mkdir(exist_ok=True)
        (theirs / name).write_bytes(data)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cases = {theirs: f"error: {theirs} is not empty and is not a results folder of lowprec (no .lowprec or trials/ in "
                     "it): choose a new or empty folder, so nothing of yours is overwritten\n",
             Path("/"): "error: / is the filesystem root: give --results a folder of its own (default: "
                        "results/<sweep name>)\n",
             home: f"error: {home} is the home folder: give --results a folder of its own (default: "
                   "results/<sweep name>)\n"}
    for folder, message in cases.items():
        for resume in ([], ["--resume"]):
            assert main(["run", str(sweep), "--results", str(folder), *resume]) == 2
            assert capsys.readouterr().err == message
    assert {p.relative_to(theirs).as_posix(): p.read_bytes() for p in theirs.rglob("*") if p.is_file()} == files
    assert list(home.iterdir()) == []


def test_results_that_are_a_file_or_cannot_be_written_exit_2_in_one_line(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from orchestrator.cli import main
    from tests.helpers import finished_sweep

    sweep, results = finished_sweep(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for folder, message in ((a_file, f"{a_file} is a file, not a folder"),
                            (a_file / "r", f"{a_file / 'r'} cannot be made: {a_file} is a file, not a folder")):
        assert main(["run", str(sweep.path), "--results", str(folder)]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"
    assert main(["export", str(a_file)]) == 2
    assert capsys.readouterr().err == f"error: {a_file} has no trials/ folder of trial records\n"

    def read_only(*args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)  # the folder turns read-only after the checks
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 2
    assert capsys.readouterr().err == (f"error: cannot write the results in {results}: Read-only file system "
                                       f"({results / '.lowprec'})\n")
    assert main(["export", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not write the tables of {results}: Read-only file system "
                          f"({results / 'trials.csv'}); the trial records are safe in {results / 'trials'}")
    assert err.count("\n") == 1
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as a read-only filesystem says before writing
    for argv in (["run", str(sweep.path), "--results", str(results), "--resume"], ["export", str(results)]):
        assert main(argv) == 2
        assert capsys.readouterr().err == (f"error: {results} cannot be written (a read-only filesystem, or no "
                                           "permission)\n")
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_joined_emulated_cluster_refuses_a_rate_its_links_cannot_carry_before_ray_starts(tmp_path):
    from types import SimpleNamespace

    from orchestrator.cli import _emulation_problem
    from orchestrator.cluster.emulation import Cluster
    from orchestrator.study.sweep_file import load_sweep

    sweep = load_sweep(write(tmp_path, HEADER + "sweep: {bandwidth: [100mbit, 10gbit]}\n"))
    carried = {"unshaped": {"measured_bps": 2e9}}
    cluster = SimpleNamespace(hosts=2, workers_per_host=1, calibrations=carried,
                              rate_problem=lambda rate: Cluster.rate_problem(SimpleNamespace(calibrations=carried), rate))
    assert _emulation_problem(sweep, cluster, None).startswith("this machine cannot emulate 10gbit: unshaped, "
                                                               "its links carried only 2")
    sweep = load_sweep(write(tmp_path, HEADER + "sweep: {bandwidth: [100mbit]}\n", "ok.yaml"))
    assert _emulation_problem(sweep, cluster, None) is None


def test_a_joined_emulated_cluster_holds_hosts_times_workers_per_host_workers(tmp_path):
    from types import SimpleNamespace

    from orchestrator.cli import _emulation_problem
    from orchestrator.study.sweep_file import load_sweep

    cluster = SimpleNamespace(hosts=2, workers_per_host=2, calibrations={}, rate_problem=lambda rate: None)
    fits = load_sweep(write(tmp_path, HEADER + "sweep: {num_workers: [2, 4]}\n", "fits.yaml"))
    assert _emulation_problem(fits, cluster, None) is None
    more = load_sweep(write(tmp_path, HEADER + "sweep: {num_workers: [4, 5]}\n", "more.yaml"))
    assert _emulation_problem(more, cluster, None) == ("num_workers 5 is more than the 4 workers the emulated cluster "
                                                       "holds (2 hosts x 2 workers per host)")
