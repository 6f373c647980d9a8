"""What a study's configurations reached, from its trials with the most workers: the target, the steps to
it, and the change against fp32 of what the study is judged by (``orchestrator.study.quality.quality``: the
metric of its target; accuracy in points, or for a target on test_loss or test_perplexity, test loss in nats).
Also how far each one-worker step is known against fp32's, which bounds a predicted speedup.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..study.columns import TARGET_METRICS
from ..study.quality import Quality, quality
from ..study.settings import TARGET_KEYS
from .trials import Key, step_key

# How a study without a target on a loss is judged (quality of no trials).
ACCURACY = quality(pd.DataFrame())


def judged_by(records: list[dict[str, Any]]) -> Quality:
    """What the study of the trial ``records`` is judged by: ``quality`` of their targets."""
    return quality(pd.DataFrame([{key: r["settings"].get(key) for key in TARGET_KEYS} for r in records],
                                columns=list(TARGET_KEYS)))


def delta_column(judged: Quality) -> str:
    """The predictions' column of the change against fp32 of what the study is judged by, named with its unit:
    accuracy_delta_points, loss_delta_nats."""
    return f"{judged.delta}_{judged.unit}"


def worse_is_higher(judged: Quality) -> bool:
    """Whether a positive change against fp32 is worse (a loss) rather than better (an accuracy)."""
    return TARGET_METRICS[judged.metric] == "lower"


@dataclass(frozen=True)
class Outcome:
    """What a configuration's training reached, from its trials with the most workers (seeds, repeats)."""
    num_workers: int
    steps: float  # mean steps_to_target; NaN: unknown (not reached by every trial, or not recorded)
    reached: bool  # every one of those trials finished ok and reached the target
    # the mean change against fp32 of what the study is judged by (its Quality: trials.csv's accuracy_delta in
    # percentage points, or loss_delta in nats, positive: worse); NaN: no fp32 to compare
    delta: float
    not_ok: tuple[str, ...]  # the statuses other than ok among those trials (unstable, diverged, failed)


def outcomes(records: list[dict[str, Any]], table: pd.DataFrame,
             judged: Quality = ACCURACY) -> dict[Key, Outcome]:
    """Per configuration (``step_key``), its ``Outcome`` from the trials.csv rows of its trials with the most
    workers, whatever their status: a configuration that collapsed with the most workers did not reach the
    target, even where a trial with fewer did. Where trials.csv has no ``steps_to_target`` (a folder from
    before that column), reaching the target is a finite ``time_to_target_s`` and the steps are unknown.
    The change against fp32 is that of what the study is ``judged`` by."""
    rows = table.set_index("trial_id")
    counted = "steps_to_target" in table.columns
    runs: dict[Key, list[tuple[dict[str, Any], pd.Series]]] = {}
    for record in records:
        runs.setdefault(step_key(record["settings"]), []).append((record, rows.loc[record["trial_id"]]))
    found = {}
    for key, trials in runs.items():
        most = max(record["settings"]["num_workers"] for record, _ in trials)
        top = [(record, row) for record, row in trials if record["settings"]["num_workers"] == most]
        ok = [row for record, row in top if record["status"] == "ok"]
        not_ok = tuple(sorted({record["status"] for record, _ in top if record["status"] != "ok"}))
        crossed = [float(row["steps_to_target"] if counted else row["time_to_target_s"]) for row in ok]
        reached = not not_ok and all(math.isfinite(v) for v in crossed)
        deltas = [float(row.get(judged.delta, math.nan)) for row in ok]
        # in the unit shown (accuracy_delta, a share of the test set, in points), rounded where the float
        # arithmetic leaves noise (-0.005 is 0.5 points exactly, not 0.5000000000000001; a loss of 3.05 against
        # 3.0 is 0.05 nats, not 0.04999999999999982) so a limit of 0.5 points or 0.05 nats admits it
        delta = round(judged.scale * statistics.fmean(deltas), 9) if ok else math.nan
        steps = statistics.fmean(crossed) if counted and reached else math.nan
        found[key] = Outcome(most, steps, reached, delta, not_ok)
    return found


def noise(records: list[dict[str, Any]], table: pd.DataFrame) -> dict[Key, tuple[float, float]]:
    """Per configuration (``step_key``), how far its one-worker step is known against fp32's: the factors
    ``(lo, hi)`` by which trials.csv's 95% interval of overhead_vs_fp32 spans its value: the interval of the
    mean over the configuration's ok seeds (which they share) over that mean; none where the folder has no
    interval. The step times the predictions start from are no surer."""
    if not {"overhead_vs_fp32_lo", "overhead_vs_fp32_hi"} <= set(table.columns):
        return {}
    rows = table.set_index("trial_id")
    seeds: dict[Key, list[tuple[float, float, float]]] = {}
    for record in records:
        if record["settings"]["num_workers"] != 1 or record["status"] != "ok":
            continue
        row = rows.loc[record["trial_id"]]
        value, lo, hi = (float(pd.to_numeric(row[c], errors="coerce")) for c in
                         ("overhead_vs_fp32", "overhead_vs_fp32_lo", "overhead_vs_fp32_hi"))
        if value > 0 and math.isfinite(lo) and math.isfinite(hi):
            seeds.setdefault(step_key(record["settings"]), []).append((value, lo, hi))
    spans = {}
    for key, found in seeds.items():
        mean = sum(value for value, _, _ in found) / len(found)
        spans[key] = (min(lo for _, lo, _ in found) / mean, max(hi for _, _, hi in found) / mean)
    return spans


def interval(speedup: float, span: tuple[float, float]) -> dict[str, float]:
    """A predicted speedup's 95% interval from its one-worker step's (``noise``): a step known within
    [lo, hi] of its value puts the speedup within [speedup / hi, speedup / lo] (at most: communication,
    which the model adds, is no less sure)."""
    lo, hi = span
    return {"tta_speedup_lo": speedup / hi, "tta_speedup_hi": speedup / lo}

