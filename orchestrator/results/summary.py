"""summary.md: the answer of a sweep on one page, from its trials table (orchestrator.results.tables).

First the answer figure (plots/answer.png: accuracy change, or test-loss
change for a study whose target is a loss, against speedup), then the seed
papers' table: one row per configuration (labelled as
orchestrator.study.labels writes it), for each ``num_workers`` the final
accuracy (or test loss) and time to target, and the speedup vs fp32 from two workers on
(with one worker nothing is communicated: the overhead vs fp32's step instead),
as mean ± sample standard deviation over the "ok" trials (seeds) with their
number; then where a step's time went (``tables.step_time_table``); then the
trials that did not finish "ok": each distinct reason once, with how many trials it ended.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from ..study.intervals import measurable
from ..study.labels import format_value
from ..study.records import FINISHED, SKIPPED
from .tables import Quality, config_labels, numeric, quality, step_time_table, targets

__all__ = ["summary_markdown", "study_line", "BUSY_CORES"]

# What others may use of the cores before the timings are called disturbed: the sweep's driver and Ray's
# daemons take about a tenth of a core on a quiet machine; one spinning process, a whole one.
BUSY_CORES = 0.5


def study_line(trials: pd.DataFrame) -> str:
    """What was studied, in one line: workload, workers, links (the answer figure's title too). A model or
    dataset of the user's files is named by its file's name, not the folder it was run from."""
    def values(column: str) -> str:
        found = trials[column].dropna().tolist() if column in trials else []
        return ", ".join(_short(format_value(v)) for v in sorted(set(found), key=str))

    parts = [f"{values('model')} on {values('dataset')}" if "model" in trials else ""]
    parts.append(f"{values('num_workers')} workers")
    bandwidth = values("bandwidth")
    parts.append(f"links {bandwidth} (emulated)" if bandwidth else "links as they are (no emulation)")
    return "; ".join(p for p in parts if p)


def summary_markdown(trials: pd.DataFrame | list[dict[str, Any]], title: str, figure: str | None = None) -> str:
    """The summary as Markdown; ``trials`` is tables.trials_table (or its rows), ``title`` the sweep's
    name, ``figure`` the answer figure's path relative to the summary (None: none drawn)."""
    trials = pd.DataFrame(trials)
    if trials.empty:
        return f"# {title}\n\nNo trial has finished yet.\n"
    trials = trials.assign(label=config_labels(trials))
    judged = quality(trials)
    lines = _head_lines(trials, title, figure, judged)
    noise = _noise_lines(trials)
    lines += [*noise, ""] if noise else []
    lines += _table_lines(trials, judged)
    ok = trials[trials["status"] == "ok"]
    lines += _step_time_lines(ok.drop(columns="label"))
    lines += _not_ok_lines(trials[trials["status"] != "ok"])
    return "\n".join(lines) + "\n"


def _head_lines(trials: pd.DataFrame, title: str, figure: str | None, judged: Quality) -> list[str]:
    """The title, what was studied, how the trials ended and the target, the figure, how to read a cell."""
    counts = trials["status"].value_counts()
    goals = "; ".join(f"{metric} {'≥' if metric == 'test_accuracy' else '≤'} {format_value(value)}"
                      for metric, value in targets(trials))
    goals = f" Target: {goals}." if goals else ""
    lines = [f"# {title}", "", f"{study_line(trials)}.", "",
             f"{len(trials)} trials: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in
                                                   FINISHED if s != SKIPPED or counts.get(s, 0)) + f".{goals}", ""]
    if figure:
        lines += [f"![{judged.name} change against speedup]({figure})", ""]
    return lines + [
        "Cells: mean ± sample standard deviation over the \"ok\" trials (seeds), with n trials. "
        f"{judged.name.capitalize()}: after the last epoch. Time to target: seconds of training until the target "
        "(k/n: reached by k of n). Speedup: vs fp32 at the same number of workers, from 2 workers on; "
        "\\* = some compared step time because a run did not reach the target. With one worker nothing is "
        "communicated: overhead = step time / fp32's step time (what encoding, decoding and error feedback cost). "
        "[lo, hi]: the 95% interval of the mean speedup or overhead, a bootstrap over the steps of the runs "
        "compared and, where configurations ran more than once, over a rerun of each (docs/results.md); "
        "\"not measurable\": it includes 1, so this machine's noise covers the difference.",
        "",
    ]


def _table_lines(trials: pd.DataFrame, judged: Quality) -> list[str]:
    """The table of configurations: per worker count, the quality, the time to target and the speedup (the
    overhead with one worker) over the "ok" trials."""
    workers = sorted(set(trials["num_workers"].tolist()))
    header = ["configuration"]
    for w in workers:
        last = f"w={w} overhead vs fp32" if w == 1 else f"w={w} speedup vs fp32"
        header += [f"w={w} {judged.name}", f"w={w} time to target (s)", last]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    stats = _configuration_stats(trials[trials["status"] == "ok"], judged)
    for label in dict.fromkeys(trials["label"]):
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
            speedup = _cell(cell, "speedup", 2, "x") + _interval(cell) + ("\\*" if w > 1 and cell["star"] else "")
            cells += [_cell(cell, "quality", 4), time, speedup]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _configuration_stats(ok: pd.DataFrame, judged: Quality) -> pd.DataFrame:
    """Per configuration and worker count: mean, standard deviation and count of the quality, time to target
    and speedup (overhead with one worker), the trials, whether some speedup compares step times, and the
    interval."""
    values = pd.DataFrame({
        "quality": numeric(ok[judged.final]),
        "time": numeric(ok["time_to_target_s"]),
        "speedup": numeric(ok["speedup_vs_fp32"]).fillna(numeric(ok["overhead_vs_fp32"])),
        "lo": numeric(ok["speedup_vs_fp32_lo"]).fillna(numeric(ok["overhead_vs_fp32_lo"])),
        "hi": numeric(ok["speedup_vs_fp32_hi"]).fillna(numeric(ok["overhead_vs_fp32_hi"])),
    })
    values["star"] = values["speedup"].notna() & (ok["speedup_basis"] == "step_time")
    groups = values.groupby([ok["label"], ok["num_workers"]], sort=False)
    stats = groups[["quality", "time", "speedup"]].agg(["mean", "std", "count"])
    stats.columns = [f"{value}_{stat}" for value, stat in stats.columns]
    stats["n"] = groups.size()
    stats["star"] = groups["star"].any()
    stats["lo"], stats["hi"] = groups["lo"].min(), groups["hi"].max()  # the seeds share their mean's interval
    return stats


def _short(reference: str) -> str:
    """``file.py:name`` of a reference ``some/folder/file.py:name``; anything else as it is."""
    file, colon, name = reference.rpartition(":")
    return f"{Path(file).name}:{name}" if colon and file.endswith(".py") else reference


def _interval(cell: pd.Series) -> str:
    """`` [lo, hi]`` of a speedup or overhead cell, and "not measurable" where it includes 1 (nothing where the
    interval is unknown)."""
    lo, hi = float(cell["lo"]), float(cell["hi"])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    return f" [{lo:.2f}, {hi:.2f}]" + ("" if measurable(lo, hi) else " not measurable")


def _noise_lines(trials: pd.DataFrame) -> list[str]:
    """What the timings stand on: one seed or several, how much runs differed, and where other processes
    competed for the cores."""
    lines = []
    seeds = trials.groupby(trials["label"].astype(str) + trials["num_workers"].astype(str))["seed"].nunique() \
        if "seed" in trials else pd.Series([1])
    if int(seeds.max()) <= 1:
        lines.append("One seed per configuration: each interval covers the noise between the steps of one run; a "
                     "second seed (sweep: {seed: [0, 1]}) would add the differences between runs.")
    else:
        between = numeric(trials.get("between_runs_sd", pd.Series(dtype=float))).dropna()
        if not between.empty:
            lines.append(f"Runs of one configuration differed by {between.min():.0%}"
                         + (f" to {between.max():.0%}" if round(between.max(), 2) > round(between.min(), 2) else "")
                         + " in median step time (standard deviation between seeds): every interval includes a "
                         "rerun's difference.")
    others = numeric(trials.get("others_cpu_cores", pd.Series(dtype=float)))
    busy = others >= BUSY_CORES
    if busy.any():
        cores = numeric(trials.get("cores", pd.Series(dtype=float))).max()
        of = f" of {int(cores)}" if pd.notna(cores) else ""
        lines.append(f"Other processes than the trials' workers used {BUSY_CORES} of a core or more during "
                     f"{int(busy.sum())} of {len(trials)} trials (up to {others.max():.1f}{of} cores): their "
                     "timings are noisy, their intervals wide.")
    return lines


def _not_ok_lines(not_ok: pd.DataFrame, shown: int = 3) -> list[str]:
    """Each distinct status and reason of the trials that did not finish ok, once, with how many trials it
    ended and the first ``shown`` of them."""
    if not_ok.empty:
        return []
    reasons = not_ok["reason"].map(lambda r: r if isinstance(r, str) and r else "no reason given")
    lines = ["", "## Trials that did not finish ok", ""]
    for (status, reason), group in not_ok.groupby([not_ok["status"], reasons], sort=False):
        names = [f"`{name}` ({trial_id})" for name, trial_id in zip(group["name"], group["trial_id"])]
        more = f", and {len(names) - shown} more" if len(names) > shown else ""
        lines.append(f"- {status}, {len(names)} trial{'s' if len(names) > 1 else ''}: {reason}. "
                     f"{', '.join(names[:shown])}{more}")
    return lines


def _periodic(trials: pd.DataFrame) -> bool:
    """Whether some trial exchanged every inner_steps steps (sync local_sgd or diloco)."""
    return "sync" in trials and bool(trials["sync"].isin(("local_sgd", "diloco")).any())


def _step_time_lines(ok: pd.DataFrame) -> list[str]:
    table = step_time_table(ok) if not ok.empty else pd.DataFrame()
    if table.empty:
        return []
    lines = ["", "## Where a step's time went", "",
             "Milliseconds per step: the median step (of the slowest rank, in the median epoch; mean over seeds). "
             "step = compute + exposed comm, the communication backward did not hide. encode, comm, decode: the "
             "hook's own phases, which overlap the step (comm: wall time of its collectives; – for plain DDP, "
             "which has no hook to time them). With one worker nothing crosses a link: its exposed comm is the "
             "hook's own overhead (encoding, decoding, a collective over a group of one), marked \"(hook)\"."
             + (" With sync local_sgd or diloco a step is the mean of each run of inner_steps steps, and exposed comm "
                "the wait for its exchanges (docs/sync.md)." if _periodic(ok) else ""),
             "", "| configuration | step | compute | exposed comm | encode | comm | decode |", "|" + "---|" * 7]
    for label, row in table.iterrows():
        # compute is shown as step - exposed comm after rounding, so every row adds up as printed
        step, exposed = round(float(row["step_time"]), 2), round(float(row["exposed_comm"]), 2)
        shown = {**row.to_dict(), "step_time": step, "exposed_comm": exposed, "compute": step - exposed}
        cells = ["–" if pd.isna(shown[c]) else f"{shown[c]:.2f}" for c in table.columns]
        if label.endswith("num_workers=1"):  # a world of one: overhead, not communication
            cells[list(table.columns).index("exposed_comm")] += " (hook)"
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
