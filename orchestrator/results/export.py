"""Files of a sweep's results, rebuilt from its per-trial records (no Ray).

``export(results)`` writes these into the results folder; the tables are built
by orchestrator.results.tables, summary.md by orchestrator.results.summary, the figures by
orchestrator.results.plots, and configurations are labelled by orchestrator.study.labels.

``trials.csv`` / ``trials.parquet`` -- one row per finished trial:

- ``trial_id``, ``name``: the stable id (hash of the settings) and readable name.
- ``status``: "ok", "diverged" (the loss became NaN/inf; the loop stopped) or
  "failed" (an exception, or workers lost beyond ``max_failures``).
- ``reason``: why a trial is not "ok" (empty otherwise).
- every setting: ``compressor``, its parameters (the trial's ``compressor_params``
  as one column each: ``block``, ``bits``, ``bucket``, ``norm``, ``pi``,
  ``matrix_rank``; empty where the compressor has none),
  ``algorithm``, ``num_workers``, ``seed``, ``bandwidth`` (the emulated links' rate,
  as written: ``100mbit``; empty off an emulated cluster), ``use_gpu``, ``backend``
  and the workload keys (``dataset`` ... ``min_compress_numel``, test hooks).
- ``epochs_run``: epochs reported (fewer than ``epochs`` if stopped early).
- ``attempts``: how many times the trial's workers started: 1, more after restarts
  under ``max_failures`` (every result is the last attempt's), 0 if never placed.
- ``final_accuracy``: test accuracy after the last epoch run, in [0, 1].
- ``best_accuracy``: highest test accuracy over the epochs.
- ``accuracy_delta``: ``final_accuracy`` minus the mean ``final_accuracy`` of the
  "ok" fp32 (``compressor: fp32``) trials whose settings equal this trial's in
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
- ``step_time_s``: median seconds per training step, split as ``compute_s``
  (forward, backward and optimizer, without waiting on communication) +
  ``exposed_comm_s`` (the communication backward did not hide: time in the
  hooks' main-thread part and waiting for their futures;
  compressors.ddp.step_clock). ``encode_s``, ``comm_s``, ``decode_s``: the hook's
  own phases, which overlap the step when ``overlap`` is on (``comm_s``: wall
  time of its collectives, each second once; NaN for fp32 over allreduce,
  plain DDP, which has no hook). ``samples_per_s``: training throughput of
  all workers; ``bytes_sent``: bytes one rank sends per step;
  ``compression_ratio``: fp32 ring-allreduce bytes / bytes sent;
  ``cpu_steal_share``: the share of the machine's CPU time a virtual machine's
  hypervisor gave to other guests during the epoch's steps (max over the
  workers' machines; 0 on bare metal, empty where /proc/stat is not there): a
  noisy neighbour, which makes step times of one run slower than another's.
  ``cpu_idle_share``: the share of the machine's CPU time idle (or waiting for
  I/O) during the epoch's steps (min over the workers' machines): near 0 where
  the cores, not the link, set the pace, as where emulated hosts share them. The
  training loop reports each per epoch (the step metrics: median over its steps,
  max over ranks; the CPU shares: over the epoch's steps, steal max and idle min
  over ranks); the table holds the median over the epochs run.
- ``predicted_step_time_s``: beside ``step_time_s``, what the performance model
  (orchestrator.predict.predictor, ``lowprec predict``) expects of a multi-worker trial run on
  an emulated cluster, from the folder's one-worker trial of the same configuration
  and workload (and its fp32 one) and the trial's calibrated link; empty elsewhere.
- ``parameters``, ``grad_bytes_fp32``, ``compressible_share``: the model's parameter
  count, its gradient bytes in fp32, and the share of those bytes in tensors of at
  least ``min_compress_numel`` elements (the part a compressor acts on); empty for a
  trial that failed before training returned.
- ``calibrated_bps``: on an emulated cluster, the bits per second a calibration
  all_reduce moved over each link at the trial's bandwidth (TCP goodput; the
  cluster's calibrations are in ``environment.json``); empty elsewhere.
  ``calibrated_latency_s``: the calibration's latency per message at that bandwidth.
- ``worker_node_ips``: the Ray node of each rank, in rank order, space-separated.

``history.csv`` -- one row per trial and epoch: ``trial_id``, ``name``, the
settings (as in trials.csv), then every per-epoch metric the training loop reported (``epoch``,
``train_time_s``, ``test_accuracy``, ``test_loss``, ``train_loss``,
``step_time_s``, ... ``time_to_accuracy_s``, and ``status``: the loop's status
after that epoch, "running", "ok" or "diverged").

``summary.md`` -- the seed papers' table: one row per configuration, labelled
``compressor key=value ...`` (its parameters that are set, algorithm, and any
other setting that varies; orchestrator.study.labels), for each ``num_workers`` the
final accuracy, time to accuracy and speedup vs fp32 as mean ± sample standard
deviation over seeds with the number of trials; then the step time in compute,
exposed communication and the hook's phases; then the trials that did not
finish "ok", with their reason.

``plots/`` -- PNG figures (orchestrator.results.plots): accuracy against time, speedup
against workers, and the step time (ms) split into compute and exposed communication.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

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
    written["summary.md"].write_text(summary_markdown(trials, results.name))
    for path in write_plots(trials, history, results / "plots"):
        written[f"plots/{path.name}"] = path
    return written


def export_or_warn(results: Path, stream: TextIO = sys.stdout) -> None:
    """Rebuild the tables after a run; a failure (an unwritable file, say) loses nothing: the records stay."""
    try:
        export(results)
    except Exception as error:
        print(f"warning: could not write the tables of {results}: {error!r}; the trial records are safe in "
              f"{results / 'trials'}: fix the cause, then run `lowprec export {results}`", file=stream, flush=True)
