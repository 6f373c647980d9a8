"""The results folder of a sweep and its per-trial records (no Ray).

Layout of ``<results>/<sweep name>/``::

    sweep.yaml            copy of the sweep file that was run
    environment.json      versions, host, CPU and GPUs (orchestrator.study.env_info)
    trials/<trial_id>.json  one record per finished trial (written when it finishes)
    trials.csv, trials.parquet, history.csv, summary.md, plots/   (orchestrator.results.export)
    ray/                  Ray Tune and Ray Train storage (logs, per-run state)

A record is ``{"trial_id", "name", "settings", "status", "reason", "history",
"model_summary", "attempts", "worker_node_ips", "link", "finished_at"}``:
``status`` is "ok", "unstable", "diverged" or "failed", ``reason`` says why a trial did not
finish "ok", ``history`` holds the per-epoch metrics the training loop reported
in its last attempt (``attempts`` counts the starts of the trial's workers: a
restart under ``max_failures`` begins the epochs again), ``worker_node_ips`` the
node of each rank, ``link`` the emulated links (hosts, bandwidth, calibrated
rate; None off an emulated cluster). The records are the source of truth: every table and
plot is rebuilt from them, and ``--resume`` skips the trial ids they hold.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FINISHED = ("ok", "unstable", "diverged", "failed")


def trials_dir(results: Path) -> Path:
    return results / "trials"


def make_record(trial: dict[str, Any], status: str, reason: str | None,
                history: list[dict[str, Any]], model_summary: dict[str, Any] | None = None, *,
                attempts: int = 1, worker_node_ips: list[str] | None = None,
                link: dict[str, Any] | None = None) -> dict[str, Any]:
    """A record for ``trial`` (a flat dict from orchestrator.study.sweep_file) that ended in ``status``;
    ``model_summary`` is the training loop's (absent when the trial failed before it returned);
    ``attempts``: how many times its workers started (restarts under max_failures; 0 if never
    placed); ``history`` holds the last attempt's epochs."""
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
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_record(results: Path, record: dict[str, Any]) -> Path:
    """Write one record atomically, so a sweep killed mid-write leaves no half file."""
    folder = trials_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['trial_id']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=_jsonable))
    os.replace(tmp, path)
    return path


_KEYS = ("trial_id", "name", "settings", "status", "reason", "history", "finished_at")


def read_records(results: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """All readable records of a results folder, oldest first.

    A record that cannot be read (truncated, edited, not a record) is skipped with
    a warning naming its file (to stderr unless ``warn`` is given): its trial counts
    as unfinished, so ``--resume`` runs it again.
    """
    warn = warn or (lambda text: print(text, file=sys.stderr, flush=True))
    records = []
    for path in sorted(trials_dir(results).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict) or any(key not in record for key in _KEYS) \
                    or record["status"] not in FINISHED or path.stem != record["trial_id"]:
                raise ValueError("not a trial record")
        except (OSError, UnicodeDecodeError, ValueError) as error:
            warn(f"warning: skipping unreadable trial record {path}: {error}")
            continue
        records.append(record)
    return sorted(records, key=lambda r: str(r["finished_at"]))


def finished_ids(results: Path) -> set[str]:
    """Trial ids that have a record: a resumed sweep does not run them again."""
    return {r["trial_id"] for r in read_records(results)}


def _jsonable(value: Any) -> Any:
    # numpy / torch scalars reported by the training loop
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a trial record")
