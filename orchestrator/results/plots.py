"""Figures of a sweep (matplotlib, Agg backend; no display needed), from its tables (orchestrator.results.tables).

Configurations are labelled as orchestrator.study.labels writes them, in legends and bar ticks.

- ``accuracy_vs_time.png``: test accuracy against ``train_time_s``, one line
  per trial coloured by configuration, one panel per ``num_workers``; the
  dashed line is the target accuracy.
- ``speedup_vs_workers.png``: mean ``speedup_vs_fp32`` over seeds against
  ``num_workers``, one line per configuration.
- ``step_time_breakdown.png``: milliseconds per step split into compute and
  exposed communication (medians over epochs, mean over seeds;
  ``tables.step_time_table``), one stacked bar per configuration and
  ``num_workers``.
- ``speedup_vs_bandwidth.png`` (where the emulated links' ``bandwidth`` varies):
  mean ``speedup_vs_fp32`` over seeds against the bandwidth (log axis), one line
  per configuration, one panel per ``num_workers``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compressors.core.params import rate_bps

from .tables import config_labels, step_time_table

__all__ = ["write_plots"]

# Stacked, they make the step: what communication left of it is the exposed part.
_PARTS = ("compute", "exposed_comm")


def write_plots(trials: pd.DataFrame, history: pd.DataFrame, folder: Path) -> list[Path]:
    """Draw the three figures from tables.trials_table and tables.history_table into ``folder``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, also inside Ray
    import matplotlib.pyplot as plt

    if trials.empty:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    bars = step_time_table(trials)[list(_PARTS)]
    trials = trials.assign(label=config_labels(trials))
    labels = list(dict.fromkeys(trials["label"]))
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colours = {label: cmap(i % 20) for i, label in enumerate(labels)}
    workers = sorted(set(trials["num_workers"].tolist()))
    figures = [("accuracy_vs_time.png", lambda: _accuracy_vs_time(plt, trials, history, colours, workers)),
               ("speedup_vs_workers.png", lambda: _speedup_vs_workers(plt, trials, colours, workers)),
               ("step_time_breakdown.png", lambda: _breakdown(plt, bars))]
    if "bandwidth" in trials and trials["bandwidth"].dropna().nunique() > 1:
        figures.append(("speedup_vs_bandwidth.png", lambda: _speedup_vs_bandwidth(plt, trials, cmap, workers)))
    paths = []
    for name, draw in figures:
        figure = draw()
        path = folder / name
        figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(figure)
        paths.append(path)
    return paths


def _accuracy_vs_time(plt, trials, history, colours, workers):
    figure, axes = plt.subplots(1, len(workers), figsize=(5.5 * len(workers), 4.2), squeeze=False, sharey=True)
    epochs = dict(tuple(history.groupby("trial_id", sort=False))) if not history.empty else {}
    for ax, w in zip(axes[0], workers):
        shown = set()
        for trial in trials[trials["num_workers"] == w].to_dict("records"):
            curve = epochs.get(trial["trial_id"])
            if curve is None:
                continue
            label = trial["label"]
            ax.plot(pd.to_numeric(curve["train_time_s"], errors="coerce"),
                    pd.to_numeric(curve["test_accuracy"], errors="coerce"),
                    marker="o", markersize=3, color=colours[label], label=None if label in shown else label,
                    linestyle="-" if trial["status"] == "ok" else ":")
            shown.add(label)
        for target in set(trials["target_accuracy"].dropna().tolist()):
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{w} worker{'s' if w > 1 else ''}")
        ax.set_xlabel("train time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    _legend(figure, axes[0])
    return figure


def _speedup_vs_workers(plt, trials, colours, workers):
    figure, ax = plt.subplots(figsize=(6.5, 4.2))
    speedup = pd.to_numeric(trials["speedup_vs_fp32"], errors="coerce")
    means = speedup.groupby([trials["label"], trials["num_workers"]], sort=False).mean().dropna()
    for label in colours:
        if label in means.index.get_level_values(0):
            points = means.loc[label].sort_index()
            ax.plot(points.index, points.to_numpy(), marker="o", color=colours[label], label=label)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(workers)
    ax.set_xlabel("workers")
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
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ticks = sorted(set(zip(bps[here], trials["bandwidth"][here])))
        ax.set_xticks([t for t, _ in ticks], [text for _, text in ticks])
        ax.minorticks_off()
        ax.set_title(f"{w} worker{'s' if w > 1 else ''}")
        ax.set_xlabel("link bandwidth (each way)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("speedup vs fp32")
    _legend(figure, axes[0])
    return figure


def _breakdown(plt, bars):
    figure, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(bars) + 2), 4.5))
    bottom = [0.0] * len(bars)
    for part in bars.columns:
        ax.bar(range(len(bars)), bars[part].to_numpy(), bottom=bottom, label=part.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, bars[part])]
    ax.set_xticks(range(len(bars)), list(bars.index), rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("step time (ms; median over epochs, mean over seeds)")
    ax.legend()
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
