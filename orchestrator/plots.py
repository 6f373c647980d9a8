"""Figures of a sweep (matplotlib, Agg backend; no display needed).

- ``accuracy_vs_time.png``: test accuracy against ``train_time_s``, one line
  per trial coloured by configuration, one panel per ``num_workers``; the
  dashed line is the target accuracy.
- ``speedup_vs_workers.png``: mean ``speedup_vs_fp32`` over seeds against
  ``num_workers``, one line per configuration.
- ``step_time_breakdown.png``: per-step seconds split into compute, encode,
  comm and decode (medians, mean over seeds), one stacked bar per
  configuration and ``num_workers``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .export import config_label, varying_settings

_PARTS = ("compute_s", "encode_s", "comm_s", "decode_s")


def write_plots(rows: list[dict[str, Any]], records: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Draw the three figures from trial rows (export.trial_rows) and their records."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, also inside Ray
    import matplotlib.pyplot as plt

    if not rows:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    varying = varying_settings(rows)
    labels = list(dict.fromkeys(config_label(row, varying) for row in rows))
    colours = {label: plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")(i % 20)
               for i, label in enumerate(labels)}
    workers = sorted({row["num_workers"] for row in rows})
    paths = []
    for name, draw in (("accuracy_vs_time.png", _accuracy_vs_time),
                       ("speedup_vs_workers.png", _speedup_vs_workers),
                       ("step_time_breakdown.png", _breakdown)):
        figure = draw(plt, rows, records, varying, labels, colours, workers)
        path = folder / name
        figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(figure)
        paths.append(path)
    return paths


def _accuracy_vs_time(plt, rows, records, varying, labels, colours, workers):
    figure, axes = plt.subplots(1, len(workers), figsize=(5.5 * len(workers), 4.2), squeeze=False, sharey=True)
    by_id = {r["trial_id"]: r for r in records}
    for ax, w in zip(axes[0], workers):
        shown = set()
        for row in rows:
            history = by_id[row["trial_id"]]["history"]
            if row["num_workers"] != w or not history:
                continue
            label = config_label(row, varying)
            ax.plot([h.get("train_time_s") for h in history], [h.get("test_accuracy") for h in history],
                    marker="o", markersize=3, color=colours[label],
                    label=None if label in shown else label, linestyle="-" if row["status"] == "ok" else ":")
            shown.add(label)
        for target in {row["target_accuracy"] for row in rows}:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{w} worker{'s' if w > 1 else ''}")
        ax.set_xlabel("train time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    _legend(figure, axes[0])
    return figure


def _speedup_vs_workers(plt, rows, records, varying, labels, colours, workers):
    figure, ax = plt.subplots(figsize=(6.5, 4.2))
    for label in labels:
        points = []
        for w in workers:
            values = [r["speedup_vs_fp32"] for r in rows if config_label(r, varying) == label
                      and r["num_workers"] == w and r["speedup_vs_fp32"] is not None]
            if values:
                points.append((w, statistics.fmean(values)))
        if points:
            ax.plot(*zip(*points), marker="o", color=colours[label], label=label)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(workers)
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup vs fp32")
    ax.grid(alpha=0.3)
    _legend(figure, [ax])
    return figure


def _breakdown(plt, rows, records, varying, labels, colours, workers):
    bars = []  # (tick label, [compute, encode, comm, decode])
    for w in workers:
        for label in labels:
            group = [r for r in rows if config_label(r, varying) == label and r["num_workers"] == w
                     and all(r[p] is not None for p in _PARTS)]
            if group:
                bars.append((f"{label}\nw={w}", [statistics.fmean(r[p] for r in group) for p in _PARTS]))
    figure, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(bars) + 2), 4.5))
    bottoms = [0.0] * len(bars)
    for i, part in enumerate(_PARTS):
        heights = [b[1][i] * 1000 for b in bars]
        ax.bar(range(len(bars)), heights, bottom=bottoms, label=part.removesuffix("_s"))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("milliseconds per step (median)")
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
