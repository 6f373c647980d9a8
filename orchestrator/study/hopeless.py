"""When a sweep stops early because no trial would succeed, and what it records of the trials left.

Where every grid trial whose workers ran so far failed in them with one reason, at least two of them, of
two configurations (or of the grid's only one), the recorder stops the sweep (orchestrator.study.recorder):
the other trials would fail alike. The grid's trials without a record are then recorded as skipped, with
that reason; a resume runs them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .progress import Progress
from .records import SKIPPED, finished_ids, make_record, write_record

# A grid trial that ended: its configuration, status and reason.
Ended = tuple[str, str, str | None]


def configuration(trial: dict[str, Any]) -> str:
    """What tells a trial's configuration from another's: every setting but the seed."""
    return json.dumps({key: value for key, value in trial.items() if key not in ("name", "trial_id", "seed")},
                      sort_keys=True, default=str)


def hopeless(ended: list[Ended], configurations: int) -> str | None:
    """The reason every trial that ended failed with, where at least two ended, and they ran two
    configurations or the grid has one: then no other trial would do better. None otherwise."""
    reasons = {reason for _, status, reason in ended if status == "failed"}
    if len(ended) < 2 or len(reasons) != 1 or any(status != "failed" for _, status, _ in ended):
        return None
    if len({config for config, _, _ in ended}) < min(2, configurations):
        return None
    return reasons.pop()


def skip_hopeless(reason: str | None, results: Path, grid: list[dict[str, Any]], progress: Progress) -> int:
    """Where the sweep stopped because nothing could succeed (``reason``: why; None: it did not), record the
    grid's trials without a record as skipped, with that reason; how many."""
    if reason is None:
        return 0
    finished = finished_ids(results)
    left = [trial for trial in grid if trial["trial_id"] not in finished]
    for trial in left:
        write_record(results, make_record(trial, SKIPPED, reason, [], attempts=0))
    progress.note(f"stopped: every trial that ended failed with the same reason ({reason}); "
                  f"{len(left)} trial(s) that would fail alike recorded as skipped (a resume runs them)")
    return len(left)
