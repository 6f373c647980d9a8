"""Files of a sweep's results, rebuilt from its per-trial records (no Ray).

``export(results)`` writes these into the results folder; the tables are built
by orchestrator.results.tables, summary.md by orchestrator.results.summary, the figures by
orchestrator.results.plots, and configurations are labelled by orchestrator.study.labels.

``trials.csv`` / ``trials.parquet`` -- one row per finished trial, and
``history.csv`` -- one row per trial and epoch: their columns are declared, with
units and docs, in orchestrator.study.columns (listed in docs/results.md).

``summary.md`` -- titled with the sweep's name: the answer figure, then the seed
papers' table: one row per configuration, labelled ``compressor key=value ...``
(orchestrator.study.labels), for each ``num_workers`` the final accuracy, time to
accuracy and speedup vs fp32 (overhead with one worker) as mean ± sample
standard deviation over seeds with the number of trials; then the step time in
compute, exposed communication and the hook's phases; then the trials that did
not finish "ok", with their reason.

``plots/`` -- PNG figures (orchestrator.results.plots): the answer (accuracy change against
speedup), accuracy against time, bytes sent, speedup against workers, and the step time (ms) in
compute and exposed communication beside the hook's phases.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import yaml

from .plots import write_plots
from ..predict.predictor import pairs, trial_predictions
from ..study.records import read_records
from .summary import summary_markdown
from .tables import history_table, trials_table

__all__ = ["export"]


def export(results: Path) -> dict[str, Path]:
    """Rebuild every table and plot of ``results`` from its trial records; returns the paths by name."""
    records = read_records(results)
    history = history_table(records)
    trials = trials_table(records, history)
    environment = results / "environment.json"
    cpu_count = json.loads(environment.read_text()).get("cpu_count") if environment.is_file() else None
    predicted = trial_predictions(pairs(records, trials), cpu_count=cpu_count)
    trials["predicted_step_time_s"] = trials["trial_id"].map(
        {k: v["predicted_step_time_s"] for k, v in predicted.items()}).astype(float)
    written = {name: results / name for name in ("trials.csv", "trials.parquet", "history.csv", "summary.md")}
    trials.to_csv(written["trials.csv"], index=False)
    # parquet needs one type per column: settings may mix None with numbers or strings
    trials.convert_dtypes().to_parquet(written["trials.parquet"], index=False)
    history.to_csv(written["history.csv"], index=False)
    title = sweep_name(results)
    for path in write_plots(trials, history, results / "plots", title):
        written[f"plots/{path.name}"] = path
    figure = "plots/answer.png" if "plots/answer.png" in written else None
    written["summary.md"].write_text(summary_markdown(trials, title, figure))
    return written


def sweep_name(results: Path) -> str:
    """The sweep's name, from the copy of its file in the folder (else the folder's name)."""
    try:
        name = yaml.safe_load((results / "sweep.yaml").read_text()).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else results.name


def export_or_warn(results: Path, stream: TextIO = sys.stdout) -> None:
    """Rebuild the tables after a run; a failure (an unwritable file, say) loses nothing: the records stay."""
    try:
        export(results)
    except Exception as error:
        print(f"warning: could not write the tables of {results}: {error!r}; the trial records are safe in "
              f"{results / 'trials'}: fix the cause, then run `lowprec export {results}`", file=stream, flush=True)
