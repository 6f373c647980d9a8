"""Files of a sweep's results, rebuilt from its per-trial records (no Ray).

``export(results)`` writes these into the results folder; the tables are built
by orchestrator.results.tables, summary.md by orchestrator.results.summary, the figures by
orchestrator.results.plots, and configurations are labelled by orchestrator.study.labels.

``trials.csv`` / ``trials.parquet`` -- one row per finished trial, and
``history.csv`` -- one row per trial and epoch: their columns are declared, with
units and docs, in orchestrator.study.columns (listed in docs/results.md). A
setting whose value is a mapping (model_options, target, ...) is a struct column
in trials.parquet, or canonical JSON text where parquet cannot hold it as one
(an empty mapping: ``parquet_frame``).

``summary.md`` -- titled with the sweep's name: the answer figure, then the seed
papers' table: one row per configuration, labelled ``compressor key=value ...``
(orchestrator.study.labels), for each ``num_workers`` the final accuracy, time to
accuracy and speedup vs fp32 (overhead with one worker) as mean ± sample
standard deviation over seeds with the number of trials; then the step time in
compute, exposed communication and the hook's phases; then the trials that did
not finish "ok", with their reason.

``predictor_inputs/trials.csv`` -- on an emulated cluster, the table of the short trials the
step-time predictions need (orchestrator.study.predictor_inputs), the same columns.

``plots/`` -- PNG figures (orchestrator.results.plots): the answer (accuracy change against
speedup), accuracy against time, bytes sent, speedup against workers, and the step time (ms) in
compute and exposed communication beside the hook's phases.
"""

from __future__ import annotations

import functools
import io
import json
import shlex
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from .plots import warm, write_plots
from ..predict.trials import Trials, pairs
from ..predict.sharing import emulated_predictions
from ..study import predictor_inputs
from ..study.records import atomic_path, folder_sweep, read_records, trials_dir, write_atomic
from .summary import summary_markdown
from .tables import history_table, trials_table
from .writing import making, one_line

__all__ = ["export", "export_or_warn", "refresh", "parquet_frame"]


def export(results: Path, plots: bool = True) -> dict[str, Path]:
    """Rebuild every table and plot of ``results`` from its trial records; returns the paths by name.
    Each file is replaced whole (orchestrator.study.records.atomic_path): where one cannot be written
    (OSError), it and every file not written yet keep their old contents. A file that cannot be made for
    another reason (a value its format cannot hold, a figure that cannot be drawn) fails the same way, as
    an OSError naming it (orchestrator.results.writing.making). ``plots=False``: the tables only (a sweep
    refreshes them during its run, at most every 30 s, and draws the plots at its end)."""
    written = {name: results / name for name in ("trials.csv", "trials.parquet", "history.csv", "summary.md")}
    with making(written["trials.csv"]):  # with the tables it is built from
        records = read_records(results)
        history = history_table(records)
        trials = trials_table(records, history)
        measured = _predictor_inputs(results, written)
        predicted = emulated_predictions(pairs(records, trials), measured, cpu_count=_cpu_count(results))
        trials["predicted_step_time_s"] = trials["trial_id"].map(
            {k: v["predicted_step_time_s"] for k, v in predicted.items()}).astype(float)
        with atomic_path(written["trials.csv"]) as temporary:
            trials.to_csv(temporary, index=False)
    with making(written["trials.parquet"]), atomic_path(written["trials.parquet"]) as temporary:
        parquet_frame(trials).to_parquet(temporary, index=False)
    with making(written["history.csv"]), atomic_path(written["history.csv"]) as temporary:
        history.to_csv(temporary, index=False)
    title = sweep_name(results)
    for path in write_plots(trials, history, results / "plots", title) if plots else ():
        written[f"plots/{path.name}"] = path
    figure = "plots/answer.png" if "plots/answer.png" in written else None
    with making(written["summary.md"]):
        write_atomic(written["summary.md"], summary_markdown(trials, title, figure))
    return written


def parquet_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` as trials.parquet holds it. Parquet needs one type per column: ``convert_dtypes``, as settings
    may mix None with numbers or strings. A column of mappings becomes a struct column, one field per key (null
    in a row whose mapping lacks it). A column parquet cannot hold so -- an empty mapping, or one nested in a
    value (a struct needs a field), values of more than one type, an integer beyond 64 bits -- holds each value
    as canonical JSON text instead (keys sorted; null where the value is missing), which json.loads reads
    back whole. The other columns are written as they were before this fallback existed."""
    frame = trials.convert_dtypes()
    for name in [name for name in frame.columns if frame[name].dtype == object]:
        if not _parquet_holds(frame[[name]]):
            frame[name] = frame[name].map(_json_text).astype(object)
    return frame


def _parquet_holds(column: pd.DataFrame) -> bool:
    """Whether parquet can hold the one column of ``column`` as it is (written to memory to find out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.write_table(pa.Table.from_pandas(column, preserve_index=False), io.BytesIO())
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return False
    return True


def _json_text(value: Any) -> str | None:
    """``value`` as canonical JSON text (keys sorted, as orchestrator.study.labels compares values); None
    where it is missing."""
    if not isinstance(value, (dict, list, tuple)) and pd.isna(value):
        return None
    return json.dumps(value, sort_keys=True, default=str)


def refresh(results: Path) -> dict[str, Path]:
    """The tables of ``results``, as a sweep rebuilds them while it runs (``export`` without the plots); the
    first call also starts loading matplotlib (plots.warm) in a thread of its own, so that the plots at the
    sweep's end take less time."""
    _start_warming()
    return export(results, plots=False)


@functools.cache
def _start_warming() -> None:
    threading.Thread(target=warm, name="warm-plots", daemon=True).start()


def _predictor_inputs(results: Path, written: dict[str, Path]) -> Trials:
    """The finished predictor inputs of ``results``, their table rewritten (named in ``written``)."""
    folder = predictor_inputs.folder(results)
    records = read_records(folder) if trials_dir(folder).is_dir() else []
    if not records:
        return []
    written[f"{predictor_inputs.FOLDER}/trials.csv"] = path = folder / "trials.csv"
    with making(path):
        table = trials_table(records, history_table(records))
        with atomic_path(path) as temporary:
            table.to_csv(temporary, index=False)
        return pairs(records, table)


def _cpu_count(results: Path) -> int | None:
    """The cores of the machine that ran the trials, from environment.json; None (with a warning) where
    it cannot be read: the predictions then go without it."""
    environment = results / "environment.json"
    if not environment.is_file():
        return None
    try:
        count = json.loads(environment.read_text()).get("cpu_count")
    except (OSError, ValueError, AttributeError, RecursionError) as error:
        print(f"warning: ignoring unreadable {environment}: {error}", file=sys.stderr, flush=True)
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def sweep_name(results: Path) -> str:
    """The sweep's name, as the folder records it (else the folder's name)."""
    return folder_sweep(results) or results.name


def export_or_warn(results: Path, stream: TextIO | None = None) -> None:
    """Rebuild the tables after a run; a failure (an unwritable file, a full disk, a file that cannot be
    made) loses nothing: the records stay, and so do the tables written before. It is told in one line
    naming the file where the error names one."""
    try:
        export(results)
    except Exception as error:
        told = isinstance(error, OSError) and error.strerror
        reason = " ".join(error.strerror.split()) if told else one_line(error)
        where = f" ({error.filename})" if isinstance(error, OSError) and error.filename else ""
        print(f"warning: could not write the tables of {results}: {reason}{where}; the trial records are safe in "
              f"{trials_dir(results)}: fix the cause, then run `lowprec export {shlex.quote(str(results))}`",
              file=sys.stdout if stream is None else stream, flush=True)
