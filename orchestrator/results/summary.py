"""summary.md: the seed papers' table of a sweep, from its trials table (orchestrator.results.tables).

One row per configuration (labelled as orchestrator.study.labels writes it), for each
``num_workers`` the final accuracy, time to accuracy and speedup vs fp32 as
mean ± sample standard deviation over the "ok" trials (seeds) with their
number; then where a step's time went (``tables.step_time_table``); then the
trials that did not finish "ok", with their reason.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..study.labels import format_value
from .tables import config_labels, numeric, step_time_table

__all__ = ["summary_markdown"]


def summary_markdown(trials: pd.DataFrame | list[dict[str, Any]], title: str) -> str:
    """The seed papers' table as Markdown; ``trials`` is tables.trials_table (or its rows)."""
    trials = pd.DataFrame(trials)
    if trials.empty:
        return f"# {title}\n\nNo trial has finished yet.\n"
    trials = trials.assign(label=config_labels(trials))
    labels = list(dict.fromkeys(trials["label"]))
    workers = sorted(set(trials["num_workers"].tolist()))
    counts = trials["status"].value_counts()
    targets = ", ".join(format_value(t) for t in sorted(set(trials["target_accuracy"].dropna().tolist())))
    targets = f" Target accuracy {targets}." if targets else ""
    lines = [
        f"# {title}",
        "",
        f"{len(trials)} trials: {counts.get('ok', 0)} ok, {counts.get('diverged', 0)} diverged, "
        f"{counts.get('failed', 0)} failed.{targets}",
        "",
        "Cells: mean ± sample standard deviation over the \"ok\" trials (seeds), with n trials. "
        "Accuracy: final test accuracy. Time to accuracy: seconds of training until the target "
        "(k/n: reached by k of n). Speedup: vs fp32 at the same number of workers; "
        "\\* = some compared median step time because a run did not reach the target.",
        "",
    ]
    header = ["configuration"]
    for w in workers:
        header += [f"w={w} accuracy", f"w={w} time to accuracy (s)", f"w={w} speedup vs fp32"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    ok = trials[trials["status"] == "ok"]
    values = pd.DataFrame({
        "accuracy": numeric(ok["final_accuracy"]),
        "time": numeric(ok["time_to_accuracy_s"]),
        "speedup": numeric(ok["speedup_vs_fp32"]),
    })
    values["star"] = values["speedup"].notna() & (ok["speedup_basis"] == "step_time")
    groups = values.groupby([ok["label"], ok["num_workers"]], sort=False)
    stats = groups[["accuracy", "time", "speedup"]].agg(["mean", "std", "count"])
    stats.columns = [f"{value}_{stat}" for value, stat in stats.columns]
    stats["n"] = groups.size()
    stats["star"] = groups["star"].any()
    for label in labels:
        cells = [label]
        for w in workers:
            if (label, w) not in stats.index:  # no "ok" trial of this configuration at w workers
                cells += ["–", "–", "–"]
                continue
            cell = stats.loc[(label, w)]
            reached, n = int(cell["time_count"]), int(cell["n"])
            time = _cell(cell, "time", 1) if reached else "not reached"
            if reached < n:
                time += f" ({reached}/{n} reached)"
            speedup = _cell(cell, "speedup", 2, "x") + ("\\*" if cell["star"] else "")
            cells += [_cell(cell, "accuracy", 4), time, speedup]
        lines.append("| " + " | ".join(cells) + " |")

    lines += _step_time_lines(ok.drop(columns="label"))
    not_ok = trials[trials["status"] != "ok"]
    if not not_ok.empty:
        lines += ["", "## Trials that did not finish ok", ""]
        lines += [f"- `{r['name']}` ({r['trial_id']}): {r['status']}: "
                  f"{r['reason'] if isinstance(r['reason'], str) and r['reason'] else 'no reason given'}"
                  for r in not_ok.to_dict("records")]
    return "\n".join(lines) + "\n"


def _step_time_lines(ok: pd.DataFrame) -> list[str]:
    table = step_time_table(ok) if not ok.empty else pd.DataFrame()
    if table.empty:
        return []
    lines = ["", "## Where a step's time went", "",
             "Milliseconds per step (median over epochs, mean over seeds). step = compute + exposed comm: the "
             "communication backward did not hide. encode, comm, decode: the hook's own phases, which overlap "
             "the step (comm: wall time of its collectives; – for plain DDP, which has no hook to time them).",
             "", "| configuration | step | compute | exposed comm | encode | comm | decode |", "|" + "---|" * 7]
    for label, row in table.iterrows():
        cells = ["–" if pd.isna(v) else f"{v:.2f}" for v in row.to_numpy()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _cell(stats: pd.Series, value: str, digits: int, unit: str = "") -> str:
    """mean ± sample standard deviation (n) of ``value`` over a group; one trial has no spread."""
    n = int(stats[f"{value}_count"])
    if n == 0:
        return "–"
    mean = f"{stats[f'{value}_mean']:.{digits}f}{unit}"
    if n == 1:
        return f"{mean} (n=1)"
    return f"{mean} ± {stats[f'{value}_std']:.{digits}f} (n={n})"
