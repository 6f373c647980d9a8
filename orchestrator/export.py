"""Tables of a sweep's results, rebuilt from its per-trial records (no Ray).

Files written into the results folder (``export(results)``):

``trials.csv`` / ``trials.parquet`` -- one row per finished trial:

- ``trial_id``, ``name``: the stable id (hash of the settings) and readable name.
- ``status``: "ok", "diverged" (the loss became NaN/inf; the loop stopped) or
  "failed" (an exception, or workers lost beyond ``max_failures``).
- ``reason``: why a trial is not "ok" (empty otherwise).
- every setting: ``compressor``, its parameters (``bits``, ``bucket``, ``norm``,
  ``block``, ``pi``, ``matrix_rank``; empty where the compressor has none),
  ``algorithm``, ``num_workers``, ``seed``, ``use_gpu``, ``backend`` and the
  workload keys (``dataset`` ... ``min_compress_numel``, test hooks).
- ``epochs_run``: epochs reported (fewer than ``epochs`` if stopped early).
- ``final_accuracy``: test accuracy after the last epoch run, in [0, 1].
- ``best_accuracy``: highest test accuracy over the epochs.
- ``accuracy_delta``: ``final_accuracy`` minus the mean ``final_accuracy`` of the
  "ok" fp32 (``compressor: none``) trials whose settings equal this trial's in
  everything except compressor, compressor parameters, algorithm and seed
  (same workload, same ``num_workers``, averaged over seeds). Empty without
  such a baseline. Negative = accuracy lost to compression.
- ``time_to_accuracy_s``: first ``train_time_s`` at which test accuracy reached
  ``target_accuracy`` (as reported by the training loop); empty if never.
- ``train_time_s``: seconds spent in training steps (forward, backward,
  communication, optimizer), excluding start-up and evaluation.
- ``speedup_vs_fp32``: baseline time / own time, for "ok" trials. The baseline
  is the "ok" fp32 trial with the same settings apart from compressor,
  compressor parameters and algorithm -- including the seed; if no fp32 trial
  has this seed, the mean over the fp32 trials of the other seeds. Time is
  ``time_to_accuracy_s`` when this trial and its baseline both reached the
  target, otherwise the median ``step_time_s``. fp32 trials get exactly 1.0.
- ``speedup_basis``: "time_to_accuracy" or "step_time": which time
  ``speedup_vs_fp32`` compares.
- ``speedup_vs_16bit``, ``speedup_vs_16bit_basis``: the same against the
  16-bit baseline (``fp16``, or ``bf16`` where a study has no fp16 trials).
- ``step_time_s``: median seconds per training step; ``compute_s``,
  ``encode_s``, ``comm_s``, ``decode_s``: median seconds per step in
  forward/backward/optimizer, compression, communication and decompression;
  ``samples_per_s``: training throughput of all workers; ``bytes_per_step``:
  bytes one rank sends per step; ``compression_ratio``: fp32 ring-allreduce
  bytes / bytes sent. The training loop reports each per epoch; the table
  holds the median over the epochs run.
- ``parameters``, ``grad_bytes_fp32``, ``compressible_share``: the model's parameter
  count, its gradient bytes in fp32, and the share of those bytes in tensors of at
  least ``min_compress_numel`` elements (the part a compressor acts on); empty for a
  trial that failed before training returned.

``history.csv`` -- one row per trial and epoch: ``trial_id``, ``name``, the
settings, then every per-epoch metric the training loop reported (``epoch``,
``train_time_s``, ``test_accuracy``, ``test_loss``, ``train_loss``,
``step_time_s``, ... ``time_to_accuracy_s``, and ``status``: the loop's status
after that epoch, "running", "ok" or "diverged").

``summary.md`` -- the seed papers' table: one row per configuration
(compressor, parameters, algorithm and any other setting that varies), for
each ``num_workers`` the final accuracy, time to accuracy and speedup vs fp32
as mean ± sample standard deviation over seeds with the number of trials;
then the trials that did not finish "ok", with their reason.

``plots/`` -- PNG figures (orchestrator.plots).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import compressor_params
from .records import read_records

__all__ = ["RESULT_COLUMNS", "export", "trial_rows", "history_rows", "summary_markdown"]

# Per-step metrics summarised as the median over epochs.
STEP_METRICS = ("step_time_s", "compute_s", "encode_s", "comm_s", "decode_s",
                "samples_per_s", "bytes_per_step", "compression_ratio")
# workloads.model_summary of the trained model, as the training loop returned it.
MODEL_COLUMNS = ("parameters", "grad_bytes_fp32", "compressible_share")
RESULT_COLUMNS = (
    "epochs_run", "final_accuracy", "best_accuracy", "accuracy_delta", "time_to_accuracy_s",
    "train_time_s", "speedup_vs_fp32", "speedup_basis", "speedup_vs_16bit", "speedup_vs_16bit_basis",
    *STEP_METRICS, *MODEL_COLUMNS,
)
ID_COLUMNS = ("trial_id", "name", "status", "reason")


def _compressor_names() -> tuple[str, ...]:
    """Baselines first, then the compressors in the order the compressors package lists them."""
    import compressors

    return compressors.NAMES


def _compression_keys() -> tuple[str, ...]:
    """The settings that tell one configuration from another at equal workload and scale."""
    return ("compressor", *compressor_params(), "algorithm")


def export(results: Path) -> dict[str, Path]:
    """Rebuild every table and plot of ``results`` from its trial records; returns the paths."""
    import pandas as pd

    from . import plots

    records = read_records(results)
    rows = trial_rows(records)
    trials = pd.DataFrame(rows, columns=_columns(records, ID_COLUMNS, RESULT_COLUMNS))
    history = pd.DataFrame(history_rows(records))
    written = {
        "trials.csv": results / "trials.csv",
        "trials.parquet": results / "trials.parquet",
        "history.csv": results / "history.csv",
        "summary.md": results / "summary.md",
    }
    trials.to_csv(written["trials.csv"], index=False)
    # parquet needs one type per column: settings may mix None with numbers or strings
    trials.convert_dtypes().to_parquet(written["trials.parquet"], index=False)
    history.to_csv(written["history.csv"], index=False)
    written["summary.md"].write_text(summary_markdown(rows, results.name))
    for path in plots.write_plots(rows, records, results / "plots"):
        written[f"plots/{path.name}"] = path
    return written


def _columns(records: list[dict[str, Any]], before: Iterable[str], after: Iterable[str]) -> list[str]:
    settings = [key for r in records for key in r["settings"]]
    return [*before, *dict.fromkeys(settings), *after]


# ---------------------------------------------------------------- trials table


def trial_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per trial: ids, settings and the RESULT_COLUMNS (see the module docstring)."""
    order = {name: i for i, name in enumerate(_compressor_names())}
    rows = sorted((_own_results(r) for r in records), key=lambda row: (order[row["compressor"]], row["name"]))
    ok = [row for row in rows if row["status"] == "ok"]
    fp32 = [row for row in ok if row["compressor"] == "none"]
    half = [row for row in ok if row["compressor"] == "fp16"] or [row for row in ok if row["compressor"] == "bf16"]
    for row in rows:
        peers = [b for b in fp32 if _key(b, "seed") == _key(row, "seed") and b["final_accuracy"] is not None]
        if peers and row["final_accuracy"] is not None:
            row["accuracy_delta"] = row["final_accuracy"] - statistics.fmean(b["final_accuracy"] for b in peers)
        row["speedup_vs_fp32"], row["speedup_basis"] = _speedup(row, fp32)
        row["speedup_vs_16bit"], row["speedup_vs_16bit_basis"] = _speedup(row, half)
    return rows


def _own_results(record: dict[str, Any]) -> dict[str, Any]:
    history = record["history"]
    accuracies = [h["test_accuracy"] for h in history if _number(h.get("test_accuracy"))]
    last = history[-1] if history else {}
    row = {key: record[key] for key in ID_COLUMNS}
    row.update(record["settings"])
    row.update(dict.fromkeys(RESULT_COLUMNS))
    row["epochs_run"] = len(history)
    row["final_accuracy"] = accuracies[-1] if accuracies else None
    row["best_accuracy"] = max(accuracies) if accuracies else None
    row["time_to_accuracy_s"] = last.get("time_to_accuracy_s")
    row["train_time_s"] = last.get("train_time_s")
    for metric in STEP_METRICS:
        values = [h[metric] for h in history if _number(h.get(metric))]
        row[metric] = statistics.median(values) if values else None
    row.update({k: v for k, v in (record.get("model_summary") or {}).items() if k in MODEL_COLUMNS})
    return row


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _key(row: dict[str, Any], *ignored: str) -> str:
    """The settings that define "the same workload and scale", as a comparable string."""
    skip = {*_compression_keys(), *ignored, *ID_COLUMNS, *RESULT_COLUMNS}
    return json.dumps({k: v for k, v in row.items() if k not in skip}, sort_keys=True, default=str)


def _speedup(row: dict[str, Any], baselines: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    if row["status"] != "ok":
        return None, None
    peers = [b for b in baselines if _key(b) == _key(row)] or \
            [b for b in baselines if _key(b, "seed") == _key(row, "seed")]
    if not peers:
        return None, None
    for metric, basis in (("time_to_accuracy_s", "time_to_accuracy"), ("step_time_s", "step_time")):
        own, theirs = row[metric], [b[metric] for b in peers]
        if _number(own) and own > 0 and all(_number(t) for t in theirs):
            return statistics.fmean(theirs) / own, basis
    return None, None


# ---------------------------------------------------------------- history table


def history_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per trial and epoch: trial_id, name, settings, the epoch's metrics.

    The epoch's own ``status`` ("running", "ok", "diverged") is the training loop's;
    the trial's final status is in trials.csv.
    """
    return [
        {"trial_id": r["trial_id"], "name": r["name"], **r["settings"], **epoch}
        for r in records for epoch in r["history"]
    ]


# ---------------------------------------------------------------- summary.md


def config_label(row: dict[str, Any], varying: Iterable[str] = ()) -> str:
    """A configuration as the papers name it: compressor, its parameters, algorithm, other settings."""
    params = [f"{k}={_fmt(row[k])}" for k in compressor_params() if row.get(k) is not None]
    label = " ".join([row["compressor"] if row["compressor"] != "none" else "fp32 (none)", *params])
    if row.get("algorithm") not in (None, "allreduce"):
        label += f" [{row['algorithm']}]"
    return " ".join([label, *(f"{k}={_fmt(row[k])}" for k in varying)])


def varying_settings(rows: list[dict[str, Any]]) -> list[str]:
    """Settings outside compression, num_workers and seed that differ between trials."""
    skip = {*_compression_keys(), "num_workers", "seed", *ID_COLUMNS, *RESULT_COLUMNS}
    keys = dict.fromkeys(k for row in rows for k in row if k not in skip)
    return [k for k in keys if len({json.dumps(row.get(k), default=str) for row in rows}) > 1]


def summary_markdown(rows: list[dict[str, Any]], title: str) -> str:
    """The seed papers' table (see the module docstring), as Markdown."""
    varying = varying_settings(rows)
    workers = sorted({row["num_workers"] for row in rows})
    labels = list(dict.fromkeys(config_label(row, varying) for row in rows))
    counts = {s: sum(row["status"] == s for row in rows) for s in ("ok", "diverged", "failed")}
    targets = sorted({row["target_accuracy"] for row in rows})
    lines = [
        f"# {title}",
        "",
        f"{len(rows)} trials: {counts['ok']} ok, {counts['diverged']} diverged, {counts['failed']} failed. "
        f"Target accuracy {', '.join(map(str, targets))}.",
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
    for label in labels:
        cells = [label]
        for w in workers:
            group = [r for r in rows if config_label(r, varying) == label and r["num_workers"] == w]
            ok = [r for r in group if r["status"] == "ok"]
            cells.append(_cell([r["final_accuracy"] for r in ok], 4))
            reached = [r["time_to_accuracy_s"] for r in ok if _number(r["time_to_accuracy_s"])]
            tta = _cell(reached, 1) if reached else ("not reached" if ok else "–")
            if ok and len(reached) < len(ok):
                tta += f" ({len(reached)}/{len(ok)} reached)"
            cells.append(tta)
            speedups = [r for r in ok if _number(r["speedup_vs_fp32"])]
            star = "\\*" if any(r["speedup_basis"] == "step_time" for r in speedups) else ""
            cells.append(_cell([r["speedup_vs_fp32"] for r in speedups], 2, "x") + star)
        lines.append("| " + " | ".join(cells) + " |")
    not_ok = [r for r in rows if r["status"] != "ok"]
    if not_ok:
        lines += ["", "## Trials that did not finish ok", ""]
        lines += [f"- `{r['name']}` ({r['trial_id']}): {r['status']}: {r['reason'] or 'no reason given'}"
                  for r in not_ok]
    return "\n".join(lines) + "\n"


def _cell(values: list[float], digits: int, unit: str = "") -> str:
    """mean ± sample std (n); a single trial has no spread to show."""
    values = [v for v in values if _number(v)]
    if not values:
        return "–"
    mean = f"{statistics.fmean(values):.{digits}f}{unit}"
    if len(values) == 1:
        return f"{mean} (n=1)"
    return f"{mean} ± {statistics.stdev(values):.{digits}f} (n={len(values)})"


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
