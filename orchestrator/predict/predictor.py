"""Predict each configuration of a results folder on another cluster (``lowprec predict``/``advise``).

Inputs, all measured by the tool, never fitted to runs on the target:
- per configuration, its one-worker trial (``num_workers: 1``): compute, encode and decode time
  per step (medians, trials.csv: ``trials``), on the machine that ran it (``compute_scale``: how much slower
  the target's devices are);
- the model's step profile on this machine (``orchestrator.predict.profile``): forward/backward/optimizer
  split and when each gradient is ready, scaled to the fp32 one-worker trial's compute time;
- DDP's buckets (``buckets``: reverse parameter order; 1 MiB first then 25 MiB, or ``bucket_cap_mb`` each);
- exact payload sizes from the compressors (``traffic``: sra's chunks as ``compressors.comm.collectives`` cuts
  them);
- the target cluster: each worker's link to the other hosts (``--bandwidth``, ``--latency``), the
  workers of a host (``--workers_per_host``) and the link between them (``--intra_bandwidth``), and
  this machine's reduction rate.

The profile and the reduction rate are timings, noisy from call to call: the first call caches them in
the results folder (``measure``), and later calls reuse them, so the same folder and arguments give the same
predictions.

With several workers per host (G > 1, H hosts), each configuration measured with sra is predicted
with the hierarchical algorithm too (``compressors.comm.collectives.hierarchical_compressed``, fp32
inside a host; ``plan``); its steps to the target and accuracy are those of its flat sra trials.

Time to accuracy: speedup x (fp32's steps to the target / the configuration's), the trials' own
``steps_to_target`` with the most workers in the folder (``outcomes``); where either is unknown, the
per-step speedup. Hook-only and optimizer methods (PowerSGD, 1-bit Adam) and a periodic sync (local_sgd,
diloco) are not modelled (say so, skip). GPU trials are inputs as CPU ones are: their times are the GPU's.
What a configuration's models are worth is its change against fp32 in what the study is judged by
(``outcomes``), which ``advice`` takes its limit in.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from compressors.core.params import rate_bps

from . import measure, perfmodel
from ..study.labels import config_labels
from ..study.quality import Quality
from ..study.records import read_records
from ..study.settings import import_modules
from .options import option
from .outcomes import ACCURACY, Outcome, delta_column, interval, judged_by, noise, outcomes
from .plan import DeviceScale, cluster, plan, predict_step
from .profile import Profile
from .trials import (Configuration, Key, baseline, config_name, configurations, hierarchical, inputs_alone, pairs,
                     read_table, step_key)

DEFAULT_INTRA_BPS = rate_bps(option("intra_bandwidth").param.default)
COLUMNS = ["configuration", "compressor", "algorithm", "num_workers", "workers_per_host", "bandwidth_bps",
           "intra_bandwidth_bps", "latency_s", "overlap", "compute_scale", "overlap_slowdown", "predicted_step_time_s", "compute_s",
           "comm_s", "encode_s", "decode_s", "speedup_vs_fp32", "speedup_vs_16bit", "steps_ratio_vs_fp32",
           "tta_speedup_vs_fp32", "tta_speedup_lo", "tta_speedup_hi", "accuracy_delta_points", "reached_target",
           "break_even_bps", "speedup_bound"]
# break_even_bps: the edges of its search; at the upper one a configuration beats fp32 at any bandwidth
_BREAK_EVEN_RANGE_BPS = (1e6, 1e12)

StepAt = Callable[[Configuration, float], dict[str, float]]  # a configuration's step at a bandwidth (bits/s)


def columns(judged: Quality) -> list[str]:
    """The predictions' columns for a study judged so: ``COLUMNS``, its change against fp32 named for it."""
    return [delta_column(judged) if c == delta_column(ACCURACY) else c for c in COLUMNS]


@dataclass(frozen=True)
class _Study:
    """A results folder as the predictions read it."""
    configs: list[Configuration]  # the configurations that can be predicted, fp32 among them
    fp32: Configuration
    notes: list[str]  # what cannot be predicted, and why
    judged: Quality
    outcome_of: dict[Key, Outcome]
    noise_of: dict[Key, tuple[float, float]]
    label: dict[Key, str]  # as the study's tables show them: parameters and algorithm only where not the defaults
    counted: bool  # trials.csv has steps_to_target


def _study(results: Path) -> _Study:
    """The folder's predictable configurations, what they reached and how far they are known; ValueError, one
    line, where it holds several workloads or no usable one-worker fp32 trial."""
    records = read_records(results)
    # The study's imports first: a compressor of the user's registers itself there.
    import_modules(list(dict.fromkeys(text for r in records for text in (r["settings"].get("imports") or ()))))
    csv = read_table(results, records)
    trials = pairs(records, csv)
    # a predictor input stands in for a one-worker trial of a configuration the grid ran (its outcome is the grid's)
    ran = {step_key(r["settings"]) for r in records}
    configs, skipped = configurations([*trials, *((r, row) for r, row in inputs_alone(results)
                                                  if step_key(r["settings"]) in ran)])
    workloads_found = {c.key[0] for c in configs}
    if len(workloads_found) > 1:
        raise ValueError(f"{results}: its one-worker trials ran {len(workloads_found)} different workloads "
                         "(model, data, batch size, buckets); predict a folder of one workload")
    fp32 = baseline(configs, "fp32", configs[0].key[0]) if configs else None
    if fp32 is None:
        names = {config_name(r["settings"]) for r, _ in trials
                 if r["settings"]["compressor"] == "fp32" and r["settings"]["algorithm"] == "allreduce"}
        unusable = next((note for note in skipped if note.split(": ", 1)[0] in names), None)
        raise ValueError(f"{results}: no finished one-worker fp32 trial (plain DDP)"
                         f"{f' that can be used ({unusable})' if unusable else ''}: the baseline and the "
                         "compute time come from it")
    judged = judged_by(records)
    label = dict(zip((c.key for c in configs),
                     config_labels([{**c.settings, **(c.settings["compressor_params"] or {})} for c in configs], [])))
    return _Study(configs, fp32, [f"not predicted: {note}" for note in skipped], judged,
                  outcomes(records, csv, judged), noise(records, csv), label, "steps_to_target" in csv.columns)


def predict(results: Path, bandwidth_bps: float, num_workers: int, latency_s: float, overlap: bool = True,
            compute_scale: float = 1.0, prof: Profile | None = None, workers_per_host: int = 1,
            intra_bandwidth_bps: float = DEFAULT_INTRA_BPS, overlap_slowdown: float | None = None
            ) -> tuple[pd.DataFrame, list[str]]:
    """Every predictable configuration of ``results`` on ``num_workers`` workers, ``workers_per_host`` on each
    host (``plan.cluster``), with links of ``bandwidth_bps`` bits/s and ``latency_s`` between hosts and of
    ``intra_bandwidth_bps`` inside one; with several workers per host, each sra configuration with the
    hierarchical algorithm too (a row of its own). The notes (one line each) say what was skipped and why,
    where the steps to the target are unknown, and where the measured inputs were cached. ``prof``: the
    model's step profile (default: ``measure.measured``'s). ``overlap_slowdown``: how much longer the device's
    work takes while communication overlaps it (``perfmodel.step_time``); None: 0 for CPU trials, the published
    ``perfmodel.GPU_OVERLAP_SLOWDOWN`` for GPU trials (a note says so)."""
    target = cluster(num_workers, workers_per_host, bandwidth_bps, latency_s, intra_bandwidth_bps)
    study = _study(results)
    prof, rate, cache_notes = measure.measured(results, study.fp32.settings, prof)
    slowdown_notes = []
    if overlap_slowdown is None:
        gpu = bool(study.fp32.settings.get("use_gpu"))
        overlap_slowdown = perfmodel.GPU_OVERLAP_SLOWDOWN if gpu and overlap else 0.0
        if overlap_slowdown:
            slowdown_notes.append(f"GPU trials: compute taken {overlap_slowdown:.1%} slower while communication "
                                  f"overlaps it, {perfmodel.GPU_SLOWDOWN_SOURCE}; --overlap_slowdown sets it")
    # each row's configuration and the measured one whose label, trials and outcome it takes
    predicted = [(c, c) for c in study.configs]
    if workers_per_host > 1:
        predicted += [(hierarchical(c), c) for c in study.configs if c.settings["algorithm"] == "sra"]
    step_at = stepper([c for c, _ in predicted], prof, study.fp32.compute_s, rate, target, overlap,
                      DeviceScale.uniform(compute_scale), overlap_slowdown)
    fixed = {"num_workers": num_workers, "workers_per_host": workers_per_host, "bandwidth_bps": bandwidth_bps,
             "intra_bandwidth_bps": intra_bandwidth_bps, "latency_s": latency_s, "overlap": overlap,
             "compute_scale": compute_scale, "overlap_slowdown": overlap_slowdown}
    rows = _rows(study, predicted, step_at, fixed)
    notes = study.notes + _outcome_notes(study)
    if len(predicted) > len(study.configs):
        notes.append(f"hierarchical: no such trial was run; each row is its sra configuration's codec on 1/"
                     f"{workers_per_host} of each bucket, with the steps to target and {study.judged.name} of its "
                     "flat sra trials")
    return pd.DataFrame(rows, columns=columns(study.judged)), notes + slowdown_notes + cache_notes


def stepper(configs: list[Configuration], prof: Profile, compute_s: float, rate: float, target: perfmodel.Cluster,
            overlap: bool, scale: DeviceScale, overlap_slowdown: float) -> StepAt:
    """Each of ``configs``' step on ``target`` at a bandwidth between hosts: their plans made once (the
    one-worker ``compute_s`` split as ``prof`` says), so a bandwidth costs arithmetic only."""
    plans = {c.key: plan(c, prof, compute_s, target.workers, overlap, scale, target.workers_per_host)
             for c in configs}

    def step_at(config: Configuration, bps: float) -> dict[str, float]:
        return predict_step(plans[config.key], replace(target, inter=perfmodel.Link(bps / 8, target.inter.latency)),
                            rate, slowdown=overlap_slowdown)
    return step_at


def step_columns(config: Configuration, fp32: Configuration, half: Configuration | None, step_at: StepAt,
                 bandwidth_bps: float) -> dict[str, Any]:
    """A configuration's step on the cluster and its parts, its speedups over fp32 and the 16-bit cast
    (``half``: NaN where there is none), its break-even bandwidth and the bound of any compressor."""
    base = step_at(fp32, bandwidth_bps)["predicted_step_time_s"]
    half_step = step_at(half, bandwidth_bps)["predicted_step_time_s"] if half else math.nan
    out = step_at(config, bandwidth_bps)
    step = out["predicted_step_time_s"]
    return {**out, "speedup_vs_fp32": base / step, "speedup_vs_16bit": half_step / step,
            "break_even_bps": math.nan if config is fp32 else _break_even(config, fp32, step_at),
            "speedup_bound": perfmodel.speedup_bound(base, fp32.compute_s)}


def _rows(study: _Study, predicted: list[tuple[Configuration, Configuration]], step_at: StepAt,
          fixed: dict[str, Any]) -> list[dict[str, Any]]:
    """A row of the predictions per (configuration, the measured one it takes its outcome from), on the
    cluster of ``fixed`` (its columns)."""
    fp32 = study.fp32
    half = baseline(study.configs, "fp16", fp32.key[0])
    fp32_steps = study.outcome_of[fp32.key].steps
    rows = []
    for config, measured_as in predicted:
        step = step_columns(config, fp32, half, step_at, fixed["bandwidth_bps"])
        outcome = study.outcome_of[measured_as.key]
        ratio = fp32_steps / outcome.steps if outcome.steps > 0 and fp32_steps > 0 else math.nan
        # an unknown steps ratio counts as 1: the per-step speedup, and a note says so
        tta = step["speedup_vs_fp32"] * (ratio if math.isfinite(ratio) else 1.0)
        span = (1.0, 1.0) if config is fp32 else study.noise_of.get(measured_as.key, (math.nan, math.nan))
        # "qsgd bits=4 hierarchical": the sra configuration's label, its algorithm said once
        name = study.label[config.key] if config is measured_as else \
            f"{study.label[measured_as.key].replace(' algorithm=sra', '')} hierarchical"
        rows.append({"configuration": name, "compressor": config.settings["compressor"],
                     "algorithm": config.settings["algorithm"], **fixed, **step,
                     "steps_ratio_vs_fp32": ratio, "tta_speedup_vs_fp32": tta, **interval(tta, span),
                     delta_column(study.judged): outcome.delta, "reached_target": outcome.reached})
    return rows


def _break_even(config: Configuration, fp32: Configuration, step_at: StepAt) -> float:
    """The bandwidth below which ``config``'s step is shorter than fp32's: inf where it is at every bandwidth
    searched, 0 where at none."""
    def faster(bps: float) -> bool:
        return step_at(config, bps)["predicted_step_time_s"] < step_at(fp32, bps)["predicted_step_time_s"]

    low, high = _BREAK_EVEN_RANGE_BPS
    edge = perfmodel.break_even(faster, low, high)
    return math.inf if edge == high else (0.0 if edge == low else edge)


def _outcome_notes(study: _Study) -> list[str]:
    """Which configurations did not finish ok with the most workers, and whose steps ratio is unknown."""
    configs, label, outcome_of, fp32 = study.configs, study.label, study.outcome_of, study.fp32
    notes = [f"{label[c.key]}: its trials with {outcome_of[c.key].num_workers} workers did not all finish ok "
             f"({', '.join(outcome_of[c.key].not_ok)}): taken as not reaching the target"
             for c in configs if outcome_of[c.key].not_ok]
    per_step = "tta_speedup_vs_fp32 is the per-step speedup"
    if not study.counted:
        return notes + [f"steps to target unknown: trials.csv has no steps_to_target column (written before it "
                        f"existed): {per_step}"]
    if not outcome_of[fp32.key].reached:
        return notes + [f"steps to target unknown: fp32 did not reach the target with "
                        f"{outcome_of[fp32.key].num_workers} workers: {per_step}"]
    unknown = [label[c.key] for c in configs if not outcome_of[c.key].reached]
    if unknown:
        notes.append(f"steps to target unknown for {', '.join(unknown)} (did not reach the target): their {per_step}")
    return notes
