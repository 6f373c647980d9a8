"""The results folder of a sweep and its per-trial records (no Ray).

Layout of ``<results>/<sweep name>/``::

    .lowprec              marks the folder as a results folder of this tool: {"sweep": its name}
    sweep.yaml            copy of the sweep file that was run
    code/                 copies of the user's .py files it names, at their paths relative to it ('..' as
                          __parent__, an absolute path under __root__): `run RESULTS/sweep.yaml --resume`
                          finds them here wherever the folder lies; code/.shipped/ what Ray ships to its nodes
    environment.json      versions, host, CPU and GPUs (orchestrator.study.env_info)
    trials/<trial_id>.json  one record per finished trial (written when it finishes)
    trials.csv, trials.parquet, history.csv, summary.md, plots/   (orchestrator.results.export)
    retired/<time>/       records of trials a resumed sweep no longer has, with the sweep file they ran from
    ray/                  Ray Tune's storage (logs, per-run state)

A run writes only into a new or empty folder, or one that is a results folder of
the same sweep (``folder_problem``): one holding ``.lowprec``, or a ``trials/``
folder of records (results folders of earlier versions have no ``.lowprec``).
Every file is written to a temporary file beside it and renamed (``atomic_path``),
so a full disk or a killed process leaves the old file or the new one, never a part.

A record is ``{"trial_id", "name", "settings", "status", "reason", "history",
"model_summary", "attempts", "worker_node_ips", "link", "traceback", "sources", "step_times_s", "finished_at"}``:
``status`` is "ok", "unstable", "diverged", "failed" or "skipped" (not run: the sweep stopped because
every trial that ended had failed with one reason, which its reason repeats; a resume runs it), ``reason``
says why a trial did not finish "ok", ``history`` holds the per-epoch metrics the training loop reported
in its last attempt (``attempts`` counts the starts of the trial's workers: a
restart under ``max_failures`` begins the epochs again), ``worker_node_ips`` the
node of each rank, ``link`` the emulated links (hosts, workers_per_host, bandwidth,
calibrated rate; None off an emulated cluster), ``traceback`` the error of a trial that raised (None
otherwise), ``step_times_s`` every training step's time in the last attempt, each the slowest rank's (None
where the loop did not return: the timings' intervals come from it). The records are the source of truth: every table and plot is rebuilt from them, and
``--resume`` skips the trial ids they hold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .settings import param

CODE = "code"
FINISHED = ("ok", "unstable", "diverged", "failed", "skipped")
SKIPPED = "skipped"
MARKER = ".lowprec"
# Errors that say a folder cannot be written at all (the folder chosen, not a passing failure).
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def trials_dir(results: Path) -> Path:
    return results / "trials"


def kept_code(results: Path, written: str) -> Path:
    """Where a results folder keeps its copy of the user's file ``written`` (as the sweep file names it)."""
    parts = Path(written).parts
    if Path(written).is_absolute():
        parts = ("__root__", *parts[1:])
    return results / CODE / Path(*("__parent__" if part == ".." else part for part in parts))


def make_record(trial: dict[str, Any], status: str, reason: str | None,
                history: list[dict[str, Any]], model_summary: dict[str, Any] | None = None, *,
                attempts: int = 1, worker_node_ips: list[str] | None = None,
                link: dict[str, Any] | None = None, traceback: str | None = None,
                sources: list[dict[str, Any]] | None = None,
                step_times: list[float] | None = None) -> dict[str, Any]:
    """A record for ``trial`` (a flat dict from orchestrator.study.sweep_file) that ended in ``status``;
    ``model_summary`` is the training loop's (absent when the trial failed before it returned);
    ``attempts``: how many times its workers started (restarts under max_failures; 0 if never
    placed); ``history`` holds the last attempt's epochs; ``traceback``: the error of a trial that raised;
    ``sources``: the file and sha256 of each module of the user's code the workers ran."""
    if status not in FINISHED:
        raise ValueError(f"status must be one of {FINISHED}, got {status!r}")
    settings = {k: v for k, v in trial.items() if k not in ("name", "trial_id")}
    return {
        "trial_id": trial["trial_id"],
        "name": trial["name"],
        "settings": settings,
        "status": status,
        "reason": reason,
        "history": history,
        "model_summary": model_summary,
        "attempts": attempts,
        "worker_node_ips": worker_node_ips,
        "link": link,
        "traceback": traceback,
        "sources": sources,
        "step_times_s": step_times,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` when the block ends, removed if
    it raises. A reader, or a write running at the same time, sees the old file or the new one, never a
    part (a full disk included: the old file stays). OSError where it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    # created here (not by mkstemp, whose files are private) so the result has the usual permissions
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        yield temporary
        with temporary.open("rb") as written:  # on disk before the rename, or a crash may leave it empty
            os.fsync(written.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno is not None:  # name the file, not its temporary
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through ``atomic_path``."""
    with atomic_path(path) as temporary:
        if isinstance(data, str):
            temporary.write_text(data)
        else:
            temporary.write_bytes(data)


def write_record(results: Path, record: dict[str, Any]) -> Path:
    """Write one record atomically, so a sweep killed mid-write, or a full disk, leaves no half file."""
    path = trials_dir(results) / f"{record['trial_id']}.json"
    write_atomic(path, json.dumps(record, indent=1, default=_jsonable))
    return path


_KEYS = ("trial_id", "name", "settings", "status", "reason", "history", "finished_at")
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
               list: "a list", type(None): "null"}


def _record_problem(record: Any, stem: str) -> str | None:
    """What makes ``record`` (read from ``trials/<stem>.json``) not a record the tables can use, or None."""
    if not isinstance(record, dict):
        return "not a trial record (not a JSON object)"
    missing = [key for key in _KEYS if key not in record]
    if missing:
        return f"not a trial record (no {', '.join(missing)})"
    if record["trial_id"] != stem:
        return f"trial_id {record['trial_id']!r} is not the file's name"
    if record["status"] not in FINISHED:
        return f"status must be one of {list(FINISHED)}, got {record['status']!r}"
    expected = {"name": (str,), "settings": (dict,), "finished_at": (str,), "history": (list,),
                "reason": (str, type(None)), "model_summary": (dict, type(None)), "link": (dict, type(None)),
                "worker_node_ips": (list, type(None)), "traceback": (str, type(None)), "attempts": (int,),
                "sources": (list, type(None)), "step_times_s": (list, type(None))}
    for key, types in expected.items():
        if key in record and (not isinstance(record[key], types) or isinstance(record[key], bool)):
            return f"{key} must be {' or '.join(_TYPE_NAMES[t] for t in types)}"
    if not all(isinstance(epoch, dict) for epoch in record["history"]):
        return "history must be a list of objects"
    if not all(isinstance(ip, str) for ip in record.get("worker_node_ips") or []):
        return "worker_node_ips must be a list of strings"
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in record.get("step_times_s") or []):
        return "step_times_s must be a list of numbers"
    for key, value in record["settings"].items():
        kind = _setting_type_problem(key, value)
        if kind:
            return f"setting {key} must be {kind}, got {json.dumps(value)[:40]}"
    return None


def _setting_type_problem(key: str, value: Any) -> str | None:
    """The type a recorded setting must have where its value is not of it, else None. Only the type: a record
    may come from a version with other ranges or compressors; a setting this version does not declare passes."""
    try:
        declared = param(key)
    except KeyError:
        return None
    if dataclasses.replace(declared, choices=None, low=None, high=None, low_open=False).problem(value) is None:
        return None
    return _TYPE_NAMES.get(declared.kind) or declared.describe()


def read_records(results: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """All readable records of a results folder, oldest first.

    A record that cannot be read or used (truncated, edited, not a record, a value of the
    wrong type) is skipped with a warning naming its file (to stderr unless ``warn`` is
    given): its trial counts as unfinished, so ``--resume`` runs it again.
    """
    warn = warn or (lambda text: print(text, file=sys.stderr, flush=True))
    records = []
    for path in sorted(trials_dir(results).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            problem = _record_problem(record, path.stem)
            if problem:
                raise ValueError(problem)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            warn(f"warning: skipping unreadable trial record {path}: {error}")
            continue
        records.append(_current(record))
    return sorted(records, key=lambda r: str(r["finished_at"]))


# Columns earlier versions named otherwise: old results folders still export.
RENAMED = {"time_to_accuracy_s": "time_to_target_s"}


def _current(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the column names of this version."""
    for epoch in record["history"]:
        for old, new in RENAMED.items():
            if old in epoch:
                epoch.setdefault(new, epoch.pop(old))
    return record


def finished_ids(results: Path) -> set[str]:
    """Trial ids that have a record of a run (not of a skipped trial): a resumed sweep does not run them again."""
    return {r["trial_id"] for r in read_records(results) if r["status"] != SKIPPED}


# ---------------------------------------------------------------- the folder


def is_results_folder(folder: Path) -> bool:
    """Whether ``folder`` is a results folder of this tool: it holds MARKER, or ``trials/`` (earlier versions)."""
    return (folder / MARKER).is_file() or trials_dir(folder).is_dir()


def folder_sweep(folder: Path) -> str | None:
    """The name of the sweep a results folder holds: from MARKER, else from its copy of the sweep file
    (folders of earlier versions); None where neither says."""
    try:
        name = json.loads((folder / MARKER).read_text()).get("sweep")
    except (OSError, ValueError, AttributeError, RecursionError):
        try:
            name = yaml.safe_load((folder / "sweep.yaml").read_text()).get("name")
        except (OSError, ValueError, yaml.YAMLError, AttributeError, RecursionError):
            name = None
    return name if isinstance(name, str) and name else None


def folder_problem(folder: Path, sweep: str | None = None) -> str | None:
    """Why ``folder`` cannot be written as the results folder (of sweep ``sweep``, where given), or None.

    Refused: the filesystem root and the home folder; a file, or a folder under a file; a folder that
    cannot be written (read-only filesystem, no permission); a folder that holds anything (but the lock of
    a run) and is not a results folder (``is_results_folder``): never write over what is not ours; the
    results folder of another sweep. Nothing is written here.
    """
    folder = folder.resolve()
    if folder == Path(folder.anchor) or folder == Path.home().resolve():
        where = "the filesystem root" if folder == Path(folder.anchor) else "the home folder"
        return f"{folder} is {where}: give --results a folder of its own (default: results/<sweep name>)"
    existing = next(p for p in (folder, *folder.parents) if os.path.lexists(p))
    if not existing.is_dir():
        return (f"{folder} is a file, not a folder" if existing == folder
                else f"{folder} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written (a read-only filesystem, or no permission)"
    if existing != folder or is_results_folder(folder):
        theirs = folder_sweep(folder) if existing == folder else None
        if sweep is not None and theirs is not None and theirs != sweep:
            return (f"{folder} holds the results of sweep {theirs!r}, not {sweep!r}: choose another --results "
                    "folder (one results folder per sweep)")
        return None
    try:
        others = [entry.name for entry in folder.iterdir() if entry.name != ".lock"]
    except OSError as error:
        return f"{folder} cannot be read: {error.strerror or error}"
    if others:
        return (f"{folder} is not empty and is not a results folder of lowprec (no {MARKER} or trials/ in it): "
                "choose a new or empty folder, so nothing of yours is overwritten")
    return None


def in_use(folder: Path) -> str | None:
    """Why another run holds ``folder`` (its ``.lock``, with who holds it), or None; nothing is created."""
    import fcntl

    try:
        handle = (folder / ".lock").open("r")
    except OSError:  # no lock file: no run has held it
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = handle.read().strip() or "another process"
            return (f"{folder} is in use by another run ({holder}); wait for it, or choose another --results "
                    "folder")
    return None


def claim(folder: Path, sweep: str) -> None:
    """Mark ``folder`` (made if needed) as the results folder of ``sweep``; call once ``folder_problem``
    found nothing. OSError where it cannot be written."""
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / MARKER, json.dumps({"sweep": sweep}) + "\n")


def retire(results: Path, trial_ids: list[str], sweep: str, keep_sweep_file: bool = True) -> Path:
    """Move the records of ``trial_ids`` out of the tables into ``results/retired/<time>/``, a results
    folder of its own (``lowprec export`` rebuilds its tables), with copies of the sweep file they ran
    from (unless ``keep_sweep_file`` is false: it was edited in place) and of ``environment.json``.
    Each record is moved by a rename, so it is always in one folder or the other. Returns the folder."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = results / "retired" / stamp
    claim(folder, sweep)
    names = ["environment.json", *(["sweep.yaml"] if keep_sweep_file else [])]
    for name in names:
        if (results / name).is_file():
            with atomic_path(folder / name) as temporary:
                shutil.copyfile(results / name, temporary)
    trials_dir(folder).mkdir(exist_ok=True)
    for trial_id in trial_ids:
        os.replace(trials_dir(results) / f"{trial_id}.json", trials_dir(folder) / f"{trial_id}.json")
    return folder


def _jsonable(value: Any) -> Any:
    # numpy / torch scalars reported by the training loop
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a trial record")
