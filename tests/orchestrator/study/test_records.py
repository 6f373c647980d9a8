"""Trial records and the results folder (orchestrator/study/records.py): files written whole, records of the
wrong types skipped, which folders a run may write.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.study.records import make_record


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


# ---------------------------------------------------------------- writing files whole


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    import errno
    import os

    from orchestrator.study.records import atomic_path, write_atomic

    target = tmp_path / "trials.csv"
    target.write_text("the old table\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        write_atomic(target, "a new table, cut short")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(target))  # the file, not its temporary
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temporary:
            temporary.write_text("half a ro")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "the old table\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trials.csv"]
    monkeypatch.undo()
    write_atomic(target, "the new table\n")
    assert target.read_text() == "the new table\n" and [p.name for p in tmp_path.iterdir()] == ["trials.csv"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not a private temporary's mode


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_record_that_cannot_be_written_leaves_no_partial_file(tmp_path, monkeypatch):
    import errno
    import os

    from orchestrator.study.records import write_record

    (trial,) = _trials(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_record(tmp_path / "r", make_record(trial, "ok", None, []))
    assert list((tmp_path / "r" / "trials").iterdir()) == []


# ---------------------------------------------------------------- records of the wrong types


# (key, value, the end of the warning): a record with every key, one of them of the wrong type
WRONG = [
    ("history", None, "history must be a list"), ("settings", None, "settings must be an object"),
    ("name", 5, "name must be a string"), ("model_summary", "x", "model_summary must be an object or null"),
    ("reason", 3, "reason must be a string or null"), ("attempts", "1", "attempts must be an integer"),
    ("worker_node_ips", "10.0.0.1", "worker_node_ips must be a list or null"),
    ("link", [], "link must be an object or null"), ("traceback", 1, "traceback must be a string or null"),
    ("finished_at", None, "finished_at must be a string"), ("history", [1], "history must be a list of objects"),
    ("worker_node_ips", [1], "worker_node_ips must be a list of strings"),
    ("num_workers", "two", 'setting num_workers must be an integer, got "two"'),
    ("seed", 1.5, "setting seed must be an integer, got 1.5"),
    ("lr", "fast", 'setting lr must be a number, got "fast"'),
    ("compressor", 4, "setting compressor must be a string, got 4"),
    ("compressor_params", [], "setting compressor_params must be an object, got []"),
    ("overlap", "yes", 'setting overlap must be true or false, got "yes"'),
]


def test_records_of_the_wrong_types_are_skipped_with_a_warning_and_run_again(tmp_path):
    from orchestrator.study.records import finished_ids, read_records, write_record

    *trials, last = _trials(tmp_path, seeds=len(WRONG) + 1)
    results = tmp_path / "r"
    expected = {}
    for trial, (key, value, message) in zip(trials, WRONG):
        record = make_record(trial, "ok", None, [])
        if key in record:
            record[key] = value
        else:
            record["settings"][key] = value
        path = write_record(results, record)
        expected[path] = f"warning: skipping unreadable trial record {path}: {message}"
    good = make_record(last, "ok", None, [{"epoch": 1, "test_accuracy": 0.5}])
    write_record(results, good)
    warnings: list[str] = []
    assert read_records(results, warnings.append) == [good]
    assert sorted(warnings) == sorted(expected.values())
    assert finished_ids(results) == {good["trial_id"]}  # --resume runs the others again


def _trials(tmp_path: Path, seeds: int = 1) -> list[dict]:
    from orchestrator.study.sweep_file import load_sweep

    path = _single(tmp_path)
    path.write_text(path.read_text() + f"sweep:\n  seed: {list(range(seeds))}\n")
    return load_sweep(path).trials


# ---------------------------------------------------------------- which folders are ours


def test_only_new_empty_or_own_folders_of_the_same_sweep_may_be_written(tmp_path, monkeypatch):
    import os

    from orchestrator.study.records import MARKER, claim, folder_problem

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    assert folder_problem(Path("/"), "s") == ("/ is the filesystem root: give --results a folder of its own "
                                              "(default: results/<sweep name>)")
    assert folder_problem(tmp_path / "home", "s").startswith(f"{tmp_path / 'home'} is the home folder: ")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sweep.yaml").write_text("name: mine\n")
    assert folder_problem(mine, "s") == (
        f"{mine} is not empty and is not a results folder of lowprec (no .lowprec or trials/ in it): choose a new "
        "or empty folder, so nothing of yours is overwritten")
    (tmp_path / "file").write_text("x")
    assert folder_problem(tmp_path / "file", "s") == f"{tmp_path / 'file'} is a file, not a folder"
    assert folder_problem(tmp_path / "file" / "r", "s") == (
        f"{tmp_path / 'file' / 'r'} cannot be made: {tmp_path / 'file'} is a file, not a folder")
    for fine in (tmp_path / "new" / "r", tmp_path / "home" / "results"):
        assert folder_problem(fine, "s") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".lock").write_text("")  # left by a run that stopped before it wrote anything
    assert folder_problem(empty, "s") is None
    claim(empty, "s")
    assert json_of(empty / MARKER) == {"sweep": "s"}
    (empty / "summary.md").write_text("ours")
    assert folder_problem(empty, "s") is None
    assert folder_problem(empty, "u") == (f"{empty} holds the results of sweep 's', not 'u': choose another "
                                          "--results folder (one results folder per sweep)")
    older = tmp_path / "older"  # a results folder of an earlier version: records, no marker
    (older / "trials").mkdir(parents=True)
    (older / "sweep.yaml").write_text("name: s\n")
    assert folder_problem(older, "s") is None
    assert folder_problem(older, "u").startswith(f"{older} holds the results of sweep 's', not 'u'")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as on a read-only filesystem
    assert folder_problem(empty, "s") == f"{empty} cannot be written (a read-only filesystem, or no permission)"
    assert folder_problem(tmp_path / "new" / "r", "s") == (
        f"{tmp_path} cannot be written (a read-only filesystem, or no permission)")


def json_of(path: Path):
    import json

    return json.loads(path.read_text())
