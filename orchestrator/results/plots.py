"""Figures of a sweep (matplotlib, Agg backend; no display needed), from its tables (orchestrator.results.tables).

Configurations are labelled as orchestrator.study.labels writes them, in legends and bar ticks; every
figure's title names the sweep, the workload, the workers and the links (``summary.study_line``).

- ``answer.png``: the question's answer: per configuration, the accuracy change vs fp32
  (``accuracy_delta``, points; ``loss_delta``, nats, where the study's target is a loss: tables.quality)
  against the speedup vs fp32, means over seeds with their standard
  deviations as error bars; a panel per ``num_workers`` (and per ``bandwidth`` where it varies);
  hollow markers where the target was not reached (the speedup compares step times); fp32 at
  (1, 0). With one worker nothing is communicated: that panel shows the overhead (step time /
  fp32's) instead.
- ``accuracy_vs_time.png`` (``loss_vs_time.png`` where the target is a loss): the target's metric
  against ``train_time_s``, one line per trial coloured by configuration, one panel per
  ``num_workers``; the dashed line is the target, an x marks where a trial first reached it
  (``time_to_target_s``, at step resolution).
- ``bytes_sent.png``: bytes one worker sends per step, per configuration and worker count (two or
  more; log axis).
- ``speedup_vs_workers.png``: mean ``speedup_vs_fp32`` over seeds against ``num_workers`` (two or
  more), one line per configuration; hollow markers where the target was not reached.
- ``step_time_breakdown.png``: milliseconds per step (``tables.step_time_table``): a stacked bar of
  compute and exposed communication, which add up to the step, and beside it the hook's own phases
  (encode, comm, decode), which overlap the step; one group per configuration and ``num_workers``.
- ``speedup_vs_bandwidth.png`` (where the emulated links' ``bandwidth`` varies):
  mean ``speedup_vs_fp32`` over seeds against the bandwidth (log axis), one line
  per configuration, one panel per ``num_workers``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from compressors.core.params import rate_bps

from ..study.intervals import measurable
from ..study.records import atomic_path
from .summary import study_line
from .tables import config_labels, numeric, quality, step_time_table, targets
from .writing import making

__all__ = ["warm", "write_plots"]

# Stacked, they make the step: what communication left of it is the exposed part.
_PARTS = ("compute", "exposed_comm")
# The hook's own phases: they overlap the step, so they stand beside it.
_PHASES = ("encode", "comm", "decode")


def warm() -> None:
    """Import matplotlib and load its fonts by drawing a small figure in memory: a second or two that a
    sweep spends while its trials run, not after them."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="0")
    ax.legend()
    figure.suptitle("0")
    figure.savefig(io.BytesIO(), format="png")
    plt.close(figure)


def write_plots(trials: pd.DataFrame, history: pd.DataFrame, folder: Path, title: str = "") -> list[Path]:
    """Draw the figures from tables.trials_table and tables.history_table into ``folder``; ``title``:
    the sweep's name. Each is written to a temporary file and renamed. A panel with nothing to draw (no
    "ok" trial there: every trial failed) says so in words. A figure that cannot be drawn raises an
    OSError naming it (writing.making), as one that cannot be written does."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, also inside Ray
    import matplotlib.pyplot as plt

    if trials.empty:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    with making(folder):
        bars = step_time_table(trials)
        trials = trials.assign(label=config_labels(trials))
        labels = list(dict.fromkeys(trials["label"]))
        cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
        colours = {label: cmap(i % 20) for i, label in enumerate(labels)}
        workers = sorted(set(trials["num_workers"].tolist()))
        several = [w for w in workers if w > 1]
        heading = f"{title}: {study_line(trials)}" if title else study_line(trials)
        judged = quality(trials)
    figures = [("answer.png", lambda: _answer(plt, trials, colours, workers, judged)),
               (f"{judged.short}_vs_time.png", lambda: _metric_vs_time(plt, trials, history, colours, workers, judged))]
    if several:
        figures += [("bytes_sent.png", lambda: _bytes_sent(plt, trials, labels, several)),
                    ("speedup_vs_workers.png", lambda: _speedup_vs_workers(plt, trials, colours, several))]
    if not bars.empty:
        figures.append(("step_time_breakdown.png", lambda: _breakdown(plt, bars)))
    if several and "bandwidth" in trials and trials["bandwidth"].dropna().nunique() > 1:
        figures.append(("speedup_vs_bandwidth.png", lambda: _speedup_vs_bandwidth(plt, trials, cmap, several)))
    paths = []
    for name, draw in figures:
        path = folder / name
        with making(path):
            figure = draw()
            try:
                figure.suptitle(heading, fontsize=9, y=1.02)
                with atomic_path(path) as temporary:
                    figure.savefig(temporary, format="png", dpi=110, bbox_inches="tight")
            finally:
                plt.close(figure)
        paths.append(path)
    return paths


def _nothing_here(ax, why: str) -> None:
    """Say in the panel ``ax`` that it has nothing to draw, and why."""
    ax.text(0.5, 0.5, f"nothing to draw:\n{why}", transform=ax.transAxes, ha="center", va="center", fontsize=9,
            color="grey")


def _answer(plt, trials, colours, workers, judged):
    """Accuracy change (points), or test-loss change (nats), against speedup vs fp32 (overhead with one
    worker), per panel."""
    ok = trials[trials["status"] == "ok"]
    varies = "bandwidth" in ok and ok["bandwidth"].dropna().nunique() > 1
    panels = [(w, b) for w in workers for b in (sorted(set(ok.loc[ok["num_workers"] == w, "bandwidth"].dropna()),
                                                       key=rate_bps) if varies else [None])]
    figure, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.6), squeeze=False)
    for ax, (w, bandwidth) in zip(axes[0], panels):
        here = ok[(ok["num_workers"] == w) & ((ok["bandwidth"] == bandwidth) if bandwidth else True)]
        frame = _answer_points(here, w, judged)
        if frame.empty:
            _nothing_here(ax, f"no \"ok\" trial with both its {'overhead' if w == 1 else 'speedup'} and its "
                              f"{judged.name} change vs fp32")
        _draw_answer_points(ax, frame, colours)
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.axhline(0.0, color="grey", linestyle="--", linewidth=0.8)
        if w == 1:
            ax.set_title("1 worker: nothing communicated, overhead only")
            ax.set_xlabel("overhead vs fp32 (step time / fp32's; > 1: slower)\nbar: 95% interval", fontsize=9)
        else:
            ax.set_title(f"{w} workers" + (f", links {bandwidth}" if bandwidth else ""))
            ax.set_xlabel("speedup vs fp32 (> 1: faster)\nbar: 95% interval; faint: not measurable; hollow: "
                          "target not reached, step time", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{judged.name} change vs fp32 ({judged.unit}"
                          + ("; lower is better)" if judged.delta == "loss_delta" else ")"))
    figure.tight_layout()
    _legend(figure, axes[0])
    return figure


def _answer_points(here: pd.DataFrame, workers: int, judged) -> pd.DataFrame:
    """One panel's points: per configuration, the mean ratio (overhead with one worker) and change, their
    bars, whether the target was reached and whether the ratio is measurable."""
    ratio = "overhead_vs_fp32" if workers == 1 else "speedup_vs_fp32"
    hollow = (here["speedup_basis"] == "step_time") if workers > 1 else pd.Series(False, index=here.index)
    frame = pd.DataFrame({"x": numeric(here[ratio]), "y": numeric(here[judged.delta]) * judged.scale,
                          "hollow": hollow, "label": here["label"],
                          "lo": numeric(here.get(f"{ratio}_lo", pd.Series(index=here.index, dtype=float))),
                          "hi": numeric(here.get(f"{ratio}_hi", pd.Series(index=here.index, dtype=float)))}
                         ).dropna(subset=["x", "y"])
    rows = []
    for label, group in frame.groupby("label", sort=False):
        x, lo, hi = group["x"].mean(), group["lo"].min(), group["hi"].max()
        # the x bar: the 95% interval of the timing (its seeds share it); else the spread over seeds;
        # one seed without an interval has no bar rather than a NaN one
        known = pd.notna(lo) and pd.notna(hi)
        rows.append({"label": label, "x": x, "y": group["y"].mean(),
                     "xerr": [[max(0.0, x - lo)], [max(0.0, hi - x)]] if known else
                     (group["x"].std() if len(group) > 1 else None),
                     "yerr": group["y"].std() if len(group) > 1 else None,
                     "reached": not group["hollow"].any(), "noise": known and not measurable(lo, hi)})
    return pd.DataFrame(rows)


def _draw_answer_points(ax, points: pd.DataFrame, colours) -> None:
    """Each configuration's point with its bars, and its label, written towards the panel's middle so that
    no label runs past the panel's edge."""
    for point in points.to_dict("records"):
        colour = colours[point["label"]]
        ax.errorbar(point["x"], point["y"], xerr=point["xerr"], yerr=point["yerr"], fmt="o", markersize=7,
                    color=colour, markerfacecolor=colour if point["reached"] else "none", capsize=3,
                    label=point["label"], alpha=0.45 if point["noise"] else 1.0)
    left, right = ax.get_xlim()
    for point in points.to_dict("records"):
        inward = point["x"] > (left + right) / 2
        ax.annotate(point["label"] + (" (not measurable)" if point["noise"] else ""), (point["x"], point["y"]),
                    xytext=(-5 if inward else 5, 4), textcoords="offset points", fontsize=7,
                    ha="right" if inward else "left", color=colours[point["label"]])


def _bytes_sent(plt, trials, labels, workers):
    ok = trials[(trials["status"] == "ok") & trials["num_workers"].isin(workers)]
    means = numeric(ok["bytes_sent"]).groupby([ok["label"], ok["num_workers"]], sort=False).mean()
    figure, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) * len(workers) + 2), 4.5))
    width = 0.8 / len(workers)
    for j, w in enumerate(workers):
        heights = [means.get((label, w), math.nan) for label in labels]
        ax.bar([i + j * width for i in range(len(labels))], heights, width=width, label=f"{w} workers")
    ax.set_xticks([i + width * (len(workers) - 1) / 2 for i in range(len(labels))], labels, rotation=60,
                  ha="right", fontsize=7)
    if (means > 0).any():  # a log axis needs a value above 0
        ax.set_yscale("log")
    else:
        _nothing_here(ax, "no \"ok\" trial of 2 or more workers sent bytes")
    ax.set_ylabel("bytes one worker sends per step (mean over seeds)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return figure


def _metric_vs_time(plt, trials, history, colours, workers, judged):
    figure, axes = plt.subplots(1, len(workers), figsize=(5.5 * len(workers), 4.2), squeeze=False, sharey=True)
    epochs = dict(tuple(history.groupby("trial_id", sort=False))) if not history.empty else {}
    for ax, w in zip(axes[0], workers):
        shown = set()
        for trial in trials[trials["num_workers"] == w].to_dict("records"):
            curve = epochs.get(trial["trial_id"])
            if curve is None or judged.metric not in curve or numeric(curve[judged.metric]).isna().all():
                continue
            label = trial["label"]
            ax.plot(pd.to_numeric(curve["train_time_s"], errors="coerce"),
                    pd.to_numeric(curve[judged.metric], errors="coerce"),
                    marker="o", markersize=3, color=colours[label], label=None if label in shown else label,
                    linestyle="-" if trial["status"] == "ok" else ":")
            reached = pd.to_numeric(pd.Series([trial["time_to_target_s"]]), errors="coerce").iloc[0]
            goal = targets(pd.DataFrame([trial]))
            if pd.notna(reached) and goal:  # the crossing, at step resolution, between the epochs' points
                ax.plot([reached], [goal[0][1]], marker="x", markersize=7, color=colours[label])
            shown.add(label)
        if not shown:
            _nothing_here(ax, f"no trial reported a {judged.metric.replace('_', ' ')}")
        for metric, value in targets(trials):
            if metric == judged.metric:
                ax.axhline(value, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{w} worker{'s' if w > 1 else ''}")
        ax.set_xlabel("train time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(judged.metric.replace("_", " "))
    _legend(figure, axes[0])
    return figure


def _speedup_vs_workers(plt, trials, colours, workers):
    figure, ax = plt.subplots(figsize=(6.5, 4.2))
    speedup = pd.to_numeric(trials["speedup_vs_fp32"], errors="coerce")
    keys = [trials["label"], trials["num_workers"]]
    means = speedup.groupby(keys, sort=False).mean().dropna()
    # hollow where some seed did not reach the target: that speedup compares step times
    hollow = (trials["speedup_basis"] == "step_time").groupby(keys, sort=False).any()
    for label in colours:
        if label in means.index.get_level_values(0):
            points = means.loc[label].sort_index()
            ax.plot(points.index, points.to_numpy(), color=colours[label], label=label)
            for w, value in points.items():
                ax.plot([w], [value], marker="o", color=colours[label],
                        markerfacecolor="none" if hollow[(label, w)] else colours[label])
    if means.empty:
        _nothing_here(ax, "no \"ok\" trial of 2 or more workers has a speedup vs fp32")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(workers)
    ax.set_xlabel("workers (hollow: target not reached, step time compared)")
    ax.set_ylabel("speedup vs fp32")
    ax.grid(alpha=0.3)
    _legend(figure, [ax])
    return figure


def _speedup_vs_bandwidth(plt, trials, cmap, workers):
    trials = trials[trials["bandwidth"].notna()]
    # The configuration without its bandwidth (nor the label that names it): one line across the bandwidths.
    label = config_labels(trials.drop(columns=["bandwidth", "label"], errors="ignore"))
    labels = list(dict.fromkeys(label))
    bps = trials["bandwidth"].map(rate_bps)
    speedup = pd.to_numeric(trials["speedup_vs_fp32"], errors="coerce")
    figure, axes = plt.subplots(1, len(workers), figsize=(5.5 * len(workers), 4.2), squeeze=False, sharey=True)
    for ax, w in zip(axes[0], workers):
        here = trials["num_workers"] == w
        means = speedup[here].groupby([label[here], bps[here]], sort=False).mean().dropna()
        for i, name in enumerate(labels):
            if name in means.index.get_level_values(0):
                points = means.loc[name].sort_index()
                ax.plot(points.index, points.to_numpy(), marker="o", color=cmap(i % 20), label=name)
        if means.empty:
            _nothing_here(ax, "no \"ok\" trial has a speedup vs fp32")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ticks = sorted(set(zip(bps[here], trials["bandwidth"][here])))
        ax.set_xticks([t for t, _ in ticks], [text for _, text in ticks])
        if means.empty and ticks:  # no line sets the axis: span the bandwidths
            ax.set_xlim(ticks[0][0] / 2, ticks[-1][0] * 2)
        ax.minorticks_off()
        ax.set_title(f"{w} worker{'s' if w > 1 else ''}")
        ax.set_xlabel("link bandwidth (each way)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("speedup vs fp32")
    _legend(figure, axes[0])
    return figure


def _breakdown(plt, bars):
    figure, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(bars) + 2), 4.5))
    x = list(range(len(bars)))
    bottom = [0.0] * len(bars)
    for part in _PARTS:
        heights = bars[part].fillna(0).to_numpy()
        ax.bar([i - 0.2 for i in x], heights, width=0.4, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights)]
    for k, phase in enumerate(_PHASES):  # beside the step: they overlap it
        ax.bar([i + 0.05 + 0.12 * k for i in x], bars[phase].to_numpy(), width=0.12, hatch="//", alpha=0.7,
               label=f"{phase} (overlaps the step)")
    ax.set_xticks(x, list(bars.index), rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("ms per step (the median step; mean over seeds)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return figure


def _legend(figure, axes) -> None:
    handles, names = [], []
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(handle)
                names.append(name)
    if handles:
        figure.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=7)
