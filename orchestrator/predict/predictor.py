"""Predict each configuration of a results folder on another cluster (``lowprec predict``/``advise``).

Inputs, all measured by the tool, never fitted to runs on the target:
- per configuration, its one-worker trial (``num_workers: 1``): compute, encode and decode time
  per step (medians, trials.csv), on the machine that ran it (``compute_scale``: how much slower
  the target's devices are);
- the model's step profile on this machine (``orchestrator.predict.profile``): forward/backward/optimizer
  split and when each gradient is ready, scaled to the fp32 one-worker trial's compute time;
- DDP's buckets (reverse parameter order; 1 MiB first, then ``bucket_cap_mb``, default 25 MiB);
- exact payload sizes from the compressors (sra's chunks as ``compressors.comm.collectives`` cuts them);
- the target cluster: each worker's link to the other hosts (``--bandwidth``, ``--latency``), the
  workers of a host (``--workers_per_host``) and the link between them (``--intra_bandwidth``), and
  this machine's reduction throughput.

The profile and the reduction throughput are timings, noisy from call to call: the first call
caches them in the results folder (``predict_cache/``) and later calls reuse them, so the same
folder and arguments give the same predictions.

Encode and decode at p workers from the one-worker figures: sra encodes n + n/p elements per step
(n + n with one worker) and decodes 2n either way; allgather encodes n and decodes p n.

With several workers per host (G > 1, H hosts), each configuration measured with sra is predicted
with the hierarchical algorithm too (``compressors.comm.collectives.hierarchical_compressed``, fp32
inside a host): its codec runs sra among the H hosts on 1/G of each bucket (encode n/G + n/(G H),
decode 2n/G: the one-worker figures scaled so), the intra phases' casts and copies taken as within
those figures; its steps to the target and accuracy are those of its flat sra trials.

Time to accuracy: speedup x (fp32's steps to the target / the configuration's), the trials' own
``steps_to_target`` with the most workers in the folder (``outcomes``); where either is unknown, the
per-step speedup. PowerSGD and trials run on GPUs are not modelled (say so, skip).

What a configuration's models are worth is what the study is judged by (``orchestrator.study.quality.quality``:
the metric of its target): its change against fp32, in accuracy points (column ``accuracy_delta_points``) or,
for a target on test_loss or test_perplexity, in nats of test loss (``loss_delta_nats``; positive: worse);
``advise`` takes its limit in that unit (``LIMIT_FLAGS``).

``trial_predictions`` predicts the multi-worker trials run on an emulated cluster from their
calibrated links (the results export's ``predicted_step_time_s``, and the validation grid).
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

import compressors
import workloads
from compressors.comm import collectives

from . import perfmodel
from ..study.intervals import measurable
from ..study.quality import Quality, quality
from ..study import predictor_inputs
from ..study.columns import TARGET_METRICS
from ..study.labels import config_label, config_labels
from .profile import Profile, profile
from ..study.records import RENAMED, read_records, write_atomic
from ..study.settings import TARGET_KEYS, import_modules

DEFAULT_BUCKET_CAP_MB = 25
CACHE_DIR = "predict_cache"
PREDICTIONS_DIR = "predictions"
CAST_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
COLUMNS = ["configuration", "compressor", "algorithm", "num_workers", "workers_per_host", "bandwidth_bps",
           "intra_bandwidth_bps", "latency_s", "overlap", "compute_scale", "predicted_step_time_s", "compute_s",
           "comm_s", "encode_s", "decode_s", "speedup_vs_fp32", "speedup_vs_16bit", "steps_ratio_vs_fp32",
           "tta_speedup_vs_fp32", "tta_speedup_lo", "tta_speedup_hi", "accuracy_delta_points", "reached_target",
           "break_even_bps", "speedup_bound"]


_LATENCY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|ms|us|ns)")
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def latency_s(text: str) -> float:
    """``5us``, ``0.2ms``, ``0s``: seconds; ValueError names the valid form."""
    match = _LATENCY.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"latency must be a number with a unit s, ms, us or ns (5us, 0.2ms), got {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


# The settings that change what a step costs (not how long training runs, nor what it learns):
# trials agreeing in these and in the compressor run the same step.
_WORKLOAD_KEYS = ("dataset", "dataset_options", "model", "model_options", "batch_size", "optimizer",
                  "min_compress_numel", "bucket_cap_mb", "impl", "use_gpu", *(p.name for p in workloads.MODEL_OPTIONS),
                  *(p.name for p in workloads.DATASET_OPTIONS))

Trials = list[tuple[dict[str, Any], pd.Series]]  # (record, trials.csv row) of each finished trial

MAX_WORKERS = 65_536  # predict's --num_workers: beyond any cluster modelled, and sra's chunks stay cheap to count
# The link between a host's workers: an A100 node's NVLink, 300 GB/s each way (2400gbit, --intra_bandwidth's
# default); what predict's --intra_bandwidth accepts: any rate a host's devices could be joined by.
DEFAULT_INTRA_BPS = 2.4e12
INTRA_RATE_RANGE_BPS = (8e3, 1e14)
# What the model reads of trials.csv: each configuration's one-worker times, then what its trials reached
# (time_to_target_s; steps_to_target and the change against fp32, accuracy_delta or loss_delta, where the table
# has them, unknown in older tables).
PHASES = ("compute_s", "encode_s", "decode_s", "exposed_comm_s")
_NEEDED = ("trial_id", *PHASES, "time_to_target_s")
_OUTCOME_NUMBERS = ("steps_to_target", "accuracy_delta", "loss_delta")
# How a study without a target on a loss is judged (quality of no trials).
ACCURACY = quality(pd.DataFrame())
# advise's limit on how much worse than fp32 a recommended configuration may end, by the column of trials.csv the
# study is judged by (Quality.delta): its flag and default. 0.05 nats of test loss: a perplexity exp(0.05) = 1.05
# times fp32's, about what 0.5 points are to an accuracy.
LIMIT_FLAGS = {"accuracy_delta": ("max_accuracy_loss", 0.5), "loss_delta": ("max_loss_increase", 0.05)}


def judged_by(records: list[dict[str, Any]]) -> Quality:
    """What the study of the trial ``records`` is judged by: ``quality`` of their targets."""
    return quality(pd.DataFrame([{key: r["settings"].get(key) for key in TARGET_KEYS} for r in records],
                                columns=list(TARGET_KEYS)))


def delta_column(judged: Quality) -> str:
    """The predictions' column of the change against fp32 of what the study is judged by, named with its unit:
    accuracy_delta_points, loss_delta_nats."""
    return f"{judged.delta}_{judged.unit}"


def columns(judged: Quality) -> list[str]:
    """The predictions' columns for a study judged so: ``COLUMNS``, its change against fp32 named for it."""
    return [delta_column(judged) if c == delta_column(ACCURACY) else c for c in COLUMNS]


def worse_is_higher(judged: Quality) -> bool:
    """Whether a positive change against fp32 is worse (a loss) rather than better (an accuracy)."""
    return TARGET_METRICS[judged.metric] == "lower"


@dataclass(frozen=True)
class Configuration:
    """One configuration and what its one-worker trial measured."""
    label: str
    settings: dict[str, Any]
    compute_s: float
    encode_s: float
    decode_s: float
    exposed_comm_s: float

    @property
    def key(self) -> tuple[str, str]:
        return step_key(self.settings)


def pairs(records: list[dict[str, Any]], table: pd.DataFrame) -> Trials:
    """Every finished trial: its record and its row of ``table`` (trials.csv)."""
    rows = table.set_index("trial_id")
    return [(r, rows.loc[r["trial_id"]]) for r in records if r["status"] == "ok"]


def read_trials(results: Path) -> Trials:
    """The finished trials of a results folder, read once."""
    records = read_records(results)
    return pairs(records, read_table(results, records))


def inputs_alone(results: Path) -> Trials:
    """The one-worker trials among the predictor inputs of an emulated sweep in ``results``
    (``orchestrator.study.predictor_inputs``); none where it has none."""
    folder = predictor_inputs.folder(results)
    if not (folder / "trials.csv").is_file():
        return []
    return [(r, row) for r, row in read_trials(folder) if r["settings"]["num_workers"] == 1]


def read_table(results: Path, records: list[dict[str, Any]]) -> pd.DataFrame:
    """``results``/trials.csv, checked against the trial ``records``: ValueError, one line saying how to rebuild
    it, where it cannot be read, lacks a column the model reads, repeats a trial, or is older than the records.
    Its numbers as floats: text or an empty cell is NaN, and a step count or a change against fp32 (accuracy,
    loss) that is not finite is unknown."""
    path = results / "trials.csv"
    rebuild = f"rebuild it with `lowprec export {results}`"
    try:
        table = pd.read_csv(path, dtype={"trial_id": str})  # an id of digits only stays a string
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise ValueError(f"{path} cannot be read as a table ({first}): {rebuild}") from None
    table = table.rename(columns={old: new for old, new in RENAMED.items() if new not in table.columns})
    absent = [column for column in _NEEDED if column not in table.columns]
    if absent:
        raise ValueError(f"{path} has no column {', '.join(absent)}: {rebuild}")
    repeated = table["trial_id"][table["trial_id"].duplicated()]
    if len(repeated):
        raise ValueError(f"{path} has more than one row for trial {repeated.iloc[0]}: {rebuild}")
    ids = set(table["trial_id"])
    missing = [r["trial_id"] for r in records if r["trial_id"] not in ids]
    if missing:  # a run stopped between writing a record and the tables, or one still running
        raise ValueError(f"{results}: trials.csv has no row for {len(missing)} trial record(s) ({missing[0]}, ...; "
                         f"a running sweep rebuilds its tables at most every 30 s): {rebuild}")
    if "status" in table.columns:  # a trial run again after the export (its record replaced)
        status = table.set_index("trial_id")["status"]
        stale = next((r for r in records if status[r["trial_id"]] != r["status"]), None)
        if stale is not None:
            raise ValueError(f"{path} is older than the trial records (trial {stale['trial_id']} is "
                             f"{status[stale['trial_id']]} there, {stale['status']} in its record): {rebuild}")
    for column in (*PHASES, "time_to_target_s", *_OUTCOME_NUMBERS):
        if column in table.columns:
            table[column] = pd.to_numeric(table[column], errors="coerce").astype(float)
    for column in _OUTCOME_NUMBERS:
        if column in table.columns:
            table[column] = table[column].where(table[column].abs() < math.inf)
    return table


def config_name(settings: dict[str, Any]) -> str:
    params = settings["compressor_params"] or {}
    return config_label({**settings, **params}, [*params, "algorithm", "intra", "inter"])


def step_key(settings: dict[str, Any]) -> tuple[str, str]:
    """(workload, configuration label): trials with equal keys run the same step."""
    workload = json.dumps({k: settings.get(k) for k in _WORKLOAD_KEYS}, sort_keys=True, default=str)
    return workload, config_name(settings)


def configurations(trials: Trials) -> tuple[list[Configuration], list[str]]:
    """The configurations that can be predicted, and why the others cannot. A configuration's times are
    the medians over its one-worker trials (repeats, seeds): one trial's may be off by a fifth."""
    repeats: dict[tuple[str, str], list[tuple[dict[str, Any], pd.Series]]] = {}
    why: dict[tuple[str, str], str] = {}
    for record, row in trials:
        s = record["settings"]
        if s["compressor"] == "powersgd" or s["use_gpu"]:
            why[step_key(s)] = f"{'PowerSGD' if s['compressor'] == 'powersgd' else 'a GPU trial'} is not modelled"
        elif s["algorithm"] == "hierarchical":
            why[step_key(s)] = ("a hierarchical trial is no input (one worker is one host: nothing is compressed); "
                                "with --workers_per_host, each sra configuration is predicted hierarchical")
        elif s["num_workers"] == 1:
            repeats.setdefault(step_key(s), []).append((s, row))
    found = {}
    for key, runs in repeats.items():
        s = runs[0][0]
        problem = _input_problem([row for _, row in runs])
        if problem:
            why[key] = problem
            continue
        found[key] = Configuration(config_name(s), s, *(statistics.median(float(row[phase]) for _, row in runs)
                                                        for phase in PHASES))
    for record, _ in trials:
        if step_key(record["settings"]) not in found:
            why.setdefault(step_key(record["settings"]), "no finished one-worker trial")
    return list(found.values()), [f"{name}: {text}" for (_, name), text in why.items()]


def _input_problem(rows: list[pd.Series]) -> str | None:
    """Why one-worker trials' times cannot be the model's inputs (one is not a number, or a compute time is 0),
    or None."""
    for phase in PHASES:
        least = "> 0" if phase == "compute_s" else ">= 0"
        for row in rows:
            try:
                value = float(row[phase])
            except (TypeError, ValueError):
                value = math.nan
            if not (math.isfinite(value) and (value > 0 if phase == "compute_s" else value >= 0)):
                return f"its one-worker {phase} in trials.csv is {value:g}, not a number {least}"
    return None


def baseline(configs: list[Configuration], compressor: str, workload: str) -> Configuration | None:
    """The workload's fp32 (plain DDP) or fp16 (all_reduce) configuration."""
    return next((c for c in configs if c.key[0] == workload and c.settings["compressor"] == compressor
                 and c.settings["algorithm"] == "allreduce"), None)


@dataclass(frozen=True)
class Outcome:
    """What a configuration's training reached, from its trials with the most workers (seeds, repeats)."""
    num_workers: int
    steps: float  # mean steps_to_target; NaN: unknown (not reached by every trial, or not recorded)
    reached: bool  # every one of those trials finished ok and reached the target
    # the mean change against fp32 of what the study is judged by (its Quality: trials.csv's accuracy_delta in
    # percentage points, or loss_delta in nats, positive: worse); NaN: no fp32 to compare
    delta: float
    not_ok: tuple[str, ...]  # the statuses other than ok among those trials (unstable, diverged, failed)


def outcomes(records: list[dict[str, Any]], table: pd.DataFrame,
             judged: Quality = ACCURACY) -> dict[tuple[str, str], Outcome]:
    """Per configuration (``step_key``), its ``Outcome`` from the trials.csv rows of its trials with the most
    workers, whatever their status: a configuration that collapsed with the most workers did not reach the
    target, even where a trial with fewer did. Where trials.csv has no ``steps_to_target`` (a folder from
    before that column), reaching the target is a finite ``time_to_target_s`` and the steps are unknown.
    The change against fp32 is that of what the study is ``judged`` by."""
    rows = table.set_index("trial_id")
    counted = "steps_to_target" in table.columns
    runs: dict[tuple[str, str], list[tuple[dict[str, Any], pd.Series]]] = {}
    for record in records:
        runs.setdefault(step_key(record["settings"]), []).append((record, rows.loc[record["trial_id"]]))
    found = {}
    for key, trials in runs.items():
        most = max(record["settings"]["num_workers"] for record, _ in trials)
        top = [(record, row) for record, row in trials if record["settings"]["num_workers"] == most]
        ok = [row for record, row in top if record["status"] == "ok"]
        not_ok = tuple(sorted({record["status"] for record, _ in top if record["status"] != "ok"}))
        crossed = [float(row["steps_to_target"] if counted else row["time_to_target_s"]) for row in ok]
        reached = not not_ok and all(math.isfinite(v) for v in crossed)
        deltas = [float(row.get(judged.delta, math.nan)) for row in ok]
        # in the unit shown (accuracy_delta, a share of the test set, in points), rounded where the float
        # arithmetic leaves noise (-0.005 is 0.5 points exactly, not 0.5000000000000001; a loss of 3.05 against
        # 3.0 is 0.05 nats, not 0.04999999999999982) so a limit of 0.5 points or 0.05 nats admits it
        delta = round(judged.scale * statistics.fmean(deltas), 9) if ok else math.nan
        steps = statistics.fmean(crossed) if counted and reached else math.nan
        found[key] = Outcome(most, steps, reached, delta, not_ok)
    return found


def noise(records: list[dict[str, Any]], table: pd.DataFrame) -> dict[tuple[str, str], tuple[float, float]]:
    """Per configuration (``step_key``), how far its one-worker step is known against fp32's: the factors
    ``(lo, hi)`` by which trials.csv's 95% interval of overhead_vs_fp32 spans its value (the widest over its
    trials), NaN where the folder has no interval. The step times the predictions start from are no surer."""
    if not {"overhead_vs_fp32_lo", "overhead_vs_fp32_hi"} <= set(table.columns):
        return {}
    rows = table.set_index("trial_id")
    spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for record in records:
        if record["settings"]["num_workers"] != 1 or record["status"] != "ok":
            continue
        row = rows.loc[record["trial_id"]]
        value, lo, hi = (float(pd.to_numeric(row[c], errors="coerce")) for c in
                         ("overhead_vs_fp32", "overhead_vs_fp32_lo", "overhead_vs_fp32_hi"))
        if value > 0 and math.isfinite(lo) and math.isfinite(hi):
            spans.setdefault(step_key(record["settings"]), []).append((lo / value, hi / value))
    return {key: (min(lo for lo, _ in found), max(hi for _, hi in found)) for key, found in spans.items()}


def _interval(speedup: float, span: tuple[float, float]) -> dict[str, float]:
    """A predicted speedup's 95% interval from its one-worker step's (``noise``): a step known within
    [lo, hi] of its value puts the speedup within [speedup / hi, speedup / lo] (at most: communication,
    which the model adds, is no less sure)."""
    lo, hi = span
    return {"tta_speedup_lo": speedup / hi, "tta_speedup_hi": speedup / lo}


def reduce_bps(numel: int = 1 << 22, repeats: int = 5) -> float:
    """This machine's summing throughput (bytes of one operand per second): the ring's reduction."""
    a, b = torch.ones(numel), torch.ones(numel)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        a.add_(b)
        times.append(time.perf_counter() - t0)
    return 4 * numel / sorted(times[1:])[repeats // 2]


def buckets_of(shapes: list[tuple[int, ...]], bucket_cap_mb: float | None) -> list[list[int]]:
    """DDP's buckets as parameter indices, in the order they are reduced: torch's own assignment
    over the parameters in reverse (the gradient order DDP rebuilds its buckets in after the first
    step), 1 MiB for the first bucket, then the cap."""
    cap = int((bucket_cap_mb or DEFAULT_BUCKET_CAP_MB) * 1024 * 1024)
    last = len(shapes) - 1
    grads = [torch.empty(shapes[last - j], device="meta") for j in range(len(shapes))]
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, cap]
    indices, _ = dist._compute_bucket_assignment_by_size(grads, limits, [False] * len(grads))
    return [[last - j for j in bucket] for bucket in indices]


# One bucket's traffic: (collective, bytes) in the order they run; bytes are what perfmodel's cost
# of that collective takes (ring: the buffer; all_gather: one rank's payload; all_to_all: what a rank sends;
# reduce_scatter: the buffer). Collectives over every rank are named alone; those of the hierarchical
# algorithm among a host's ranks ``intra_``, among the ranks of one local rank on every host ``inter_``.
Traffic = list[tuple[str, float]]


def bucket_traffic(config: Configuration, shapes: list[tuple[int, ...]], p: int, workers_per_host: int = 1) -> Traffic:
    """What one bucket (parameter ``shapes``) puts on the wire with ``p`` workers, ``workers_per_host`` on
    each host."""
    s = config.settings
    name, algorithm = s["compressor"], s["algorithm"]
    if algorithm == "allreduce":
        return [("ring", CAST_ITEMSIZE[name] * sum(math.prod(x) for x in shapes))]
    small = [x for x in shapes if math.prod(x) < s["min_compress_numel"]]
    large = [x for x in shapes if math.prod(x) >= s["min_compress_numel"]]
    traffic: Traffic = [("ring", 4 * sum(math.prod(x) for x in small))]
    if not large:
        return traffic
    codec = compressors.get(name, **(s["compressor_params"] or {}))
    if algorithm == "allgather":
        return traffic + [("all_gather", sum(codec.payload_nbytes(x) for x in large))]
    if algorithm == "sra":
        return traffic + _sra_traffic(codec, list(enumerate(large)), p)
    # hierarchical: local rank g's share of each tensor, cut as hierarchical_compressed cuts it, then the
    # sra (or all_gather: ``inter``) of those pieces among the hosts; the local ranks run theirs at once, and
    # the busiest one's bytes (collective by collective) set the pace
    g = workers_per_host
    pieces: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(g)]
    for index, x in enumerate(large):
        axis = collectives.chunk_axis(x, codec)
        for rank, bounds in enumerate(collectives.split(x, g, index, axis)):
            if bounds[1] > bounds[0]:  # a one-row tensor goes whole to one local rank
                pieces[rank].append((index, collectives.chunk_shape(x, bounds, axis)))
    if (s.get("inter") or "sra") == "allgather":
        across = [[("all_gather", sum(codec.payload_nbytes(x) for _, x in mine))] for mine in pieces]
    else:
        across = [_sra_traffic(codec, mine, p // g) for mine in pieces]
    busiest = [(f"inter_{kind}", max(rank[i][1] for rank in across)) for i, (kind, _) in enumerate(across[0])]
    # the intra phases at the intra precision, split evenly (their bytes are cheap, their padding ignored)
    intra = CAST_ITEMSIZE[s.get("intra") or "fp32"] * sum(math.prod(x) for x in large)
    return traffic + [("intra_reduce_scatter", intra), *busiest, ("intra_all_gather", intra / g)]


def _sra_traffic(codec: compressors.Compressor, tensors: list[tuple[int, tuple[int, ...]]], p: int) -> Traffic:
    """An sra's traffic among ``p`` ranks for (key, shape) ``tensors``: payload bytes of each rank's chunks, as
    collectives.sra_compressed cuts them (the keys place a one-row tensor)."""
    to_rank = [0] * p
    for key, x in tensors:
        axis = collectives.chunk_axis(x, codec)
        for r, bounds in enumerate(collectives.split(x, p, key, axis)):
            to_rank[r] += codec.payload_nbytes(collectives.chunk_shape(x, bounds, axis))
    scales: Traffic = [("ring", 4 * len(tensors))] if codec.scales_by_tensor else []
    return [("all_to_all", sum(to_rank[1:])), *scales, ("all_gather", max(to_rank))]


def comm_s(traffic: Traffic, cluster: perfmodel.Cluster, reduce: float) -> float:
    hosts, local = cluster.hosts, cluster.workers_per_host
    costs = {"ring": lambda n: perfmodel.flat_ring_allreduce_s(n, cluster, reduce),
             "all_gather": lambda n: perfmodel.flat_allgather_s(n, cluster),
             "all_to_all": lambda n: perfmodel.flat_alltoall_s(n, cluster),
             "intra_reduce_scatter": lambda n: perfmodel.reduce_scatter_s(n, local, cluster.intra, reduce),
             "inter_all_to_all": lambda n: perfmodel.alltoall_s(n, hosts, cluster.across),
             "inter_ring": lambda n: perfmodel.ring_allreduce_s(n, hosts, cluster.across, reduce),
             "inter_all_gather": lambda n: perfmodel.allgather_s(n, hosts, cluster.across),
             "intra_all_gather": lambda n: perfmodel.allgather_s(n, local, cluster.intra)}
    return sum(costs[kind](nbytes) for kind, nbytes in traffic)


@dataclass(frozen=True)
class Plan:
    """A configuration's step at ``p`` workers, all but the link: fwd/bwd/opt and per bucket its
    ready time, encode, decode and traffic (so a bandwidth sweep costs arithmetic only)."""
    fwd_s: float
    bwd_s: float
    opt_s: float
    buckets: list[tuple[float, float, float, Traffic]]
    encode_s: float
    decode_s: float
    overlap: bool


@dataclass(frozen=True)
class DeviceScale:
    """How much longer than in its one-worker trial a worker's device work takes on the target: its
    compute (forward, backward, optimizer), its encodes and its decodes (the target's devices against
    the measured one, or hosts sharing one machine: ``benchmarks/host_contention.py`` measures them)."""
    compute: float = 1.0
    encode: float = 1.0
    decode: float = 1.0

    @classmethod
    def uniform(cls, scale: float) -> "DeviceScale":
        return cls(scale, scale, scale)


def plan(config: Configuration, prof: Profile, compute_s: float, p: int, overlap: bool,
         scale: DeviceScale = DeviceScale(), workers_per_host: int = 1) -> Plan:
    """``compute_s``: the one-worker step's compute (fp32's), split as ``prof`` says, times ``scale.compute``;
    the configuration's encode and decode times ``scale.encode`` and ``scale.decode``; ``p`` workers,
    ``workers_per_host`` on each host."""
    s = config.settings
    shapes = [shape for shape, _ in prof.params]
    per_profiled = compute_s * scale.compute / (prof.fwd_s + prof.bwd_s + prof.opt_s)
    compressible = [math.prod(x) if math.prod(x) >= s["min_compress_numel"] else 0 for x in shapes]
    total = sum(compressible) or 1
    encode, decode = config.encode_s, config.decode_s
    if s["algorithm"] == "allreduce":
        # The cast and copies run inside the collective, so the hook times no encode or decode; in a
        # world of one the collective moves nothing, and what it took is that device work.
        encode = decode = config.exposed_comm_s / 2
    encode, decode = encode * scale.encode, decode * scale.decode
    if s["algorithm"] == "sra":
        encode *= (1 + 1 / p) / 2
    elif s["algorithm"] == "allgather":
        decode *= p
    elif s["algorithm"] == "hierarchical":  # an sra (or all_gather) among the hosts on 1/G of the elements
        encode *= hierarchical_encode_share(p, workers_per_host, s.get("inter"))
        decode *= hierarchical_decode_share(p, workers_per_host, s.get("inter"))
    buckets = []
    for idx in buckets_of(shapes, s["bucket_cap_mb"]):
        share = sum(compressible[i] for i in idx) / total
        ready = max(prof.params[i][1] for i in idx) * per_profiled
        buckets.append((ready, encode * share, decode * share,
                        bucket_traffic(config, [shapes[i] for i in idx], p, workers_per_host)))
    return Plan(prof.fwd_s * per_profiled, prof.bwd_s * per_profiled, prof.opt_s * per_profiled, buckets, encode,
                decode, overlap)


def predict_step(step: Plan, cluster: perfmodel.Cluster, reduce: float,
                 latency_s: float | None = None) -> dict[str, float]:
    """Predicted step of a planned configuration on ``cluster`` (the shape it was planned for);
    ``messages``: how many latencies it pays. ``latency_s``: where hosts share one machine's cores, the
    latency per message under that load (its peers take each message late). On links of each worker's
    own it is the links' latency; where the workers of a host share its link, one worker's waits overlap
    the bytes the others send, and a bucket's communication takes the longer of its time on ``cluster``
    and its messages' waits."""
    # messages in turn: the communication at a latency of 1 s and no time per byte, on either link
    counting = perfmodel.Link(math.inf, 1.0)
    counts = [comm_s(traffic, replace(cluster, inter=counting, intra=counting), math.inf)
              for *_, traffic in step.buckets]

    def comm(traffic: Traffic, messages: float) -> float:
        if latency_s is None:
            return comm_s(traffic, cluster, reduce)
        if cluster.shares_link:
            return max(comm_s(traffic, cluster, reduce), messages * latency_s)
        # a link per worker (a flat cluster's one link is both of its links)
        own = replace(cluster.inter, latency=latency_s)
        return comm_s(traffic, replace(cluster, inter=own, intra=own if cluster.workers_per_host == 1
                                       else cluster.intra), reduce)

    buckets = [perfmodel.Bucket(ready, enc, comm(traffic, n), dec)
               for (ready, enc, dec, traffic), n in zip(step.buckets, counts)]
    time_s = perfmodel.step_time(step.fwd_s, step.bwd_s, step.opt_s, buckets, step.overlap)
    messages = sum(counts)
    return {"predicted_step_time_s": time_s, "compute_s": step.fwd_s + step.bwd_s + step.opt_s,
            "comm_s": sum(b.comm_s for b in buckets), "encode_s": step.encode_s, "decode_s": step.decode_s,
            "messages": messages}


def check_writable(path: Path) -> None:
    """OSError where ``write_atomic`` could not write ``path``: its folder cannot be made or written in (a
    read-only file system, no permission, a file in the way), the name is too long, or a folder is there.
    Makes the folder."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    for folder in (path.parent, *path.parent.parents):  # mkdir would say only "File exists"
        if folder.exists():
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{folder} is not a folder", str(folder))
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.unlink(temporary)


def _cached(path: Path, valid: Callable[[Any], Any]) -> Any:
    """``valid(data)`` of the JSON in ``path``; None where there is none, or it is unreadable or not valid."""
    try:
        return valid(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cached_rate(data: dict[str, Any]) -> float | None:
    """The cached reduction throughput; None (measure again) where it is not a positive number (an edit)."""
    rate = float(data["reduce_bps"])
    return rate if 0 < rate < math.inf else None


def measured(results: Path, settings: dict[str, Any], prof: Profile | None = None) -> tuple[Profile, float, list[str]]:
    """The model's step profile (of ``settings``' workload; ``prof`` where given) and this machine's reduction
    throughput, each from ``results``/predict_cache where an earlier call left it, else measured here and
    cached there; with a line for the user where a cache was made or could not be. What is used is what
    the cache holds (JSON keeps a float's repr), so the first call's predictions equal the later ones'."""
    cache = results / CACHE_DIR
    workload = step_key(settings)[0]
    profile_path = cache / f"profile-{hashlib.sha256(workload.encode()).hexdigest()[:16]}.json"
    reduce_path = cache / "reduce.json"
    made: dict[Path, str] = {}
    if prof is None:
        def read_profile(data: dict[str, Any]) -> Profile | None:
            # None (measure again) for another workload's (a hash collision), or times no step takes (an edit)
            found = Profile.from_json(data["profile"])
            times = [found.fwd_s, found.bwd_s, found.opt_s, *(ready for _, ready in found.params)]
            usable = all(math.isfinite(t) and t >= 0 for t in times) and found.fwd_s + found.bwd_s + found.opt_s > 0
            return found if usable and data["workload"] == workload else None
        prof = _cached(profile_path, read_profile)
        if prof is None:
            prof = profile(settings)
            made[profile_path] = json.dumps({"workload": workload, "profile": prof.to_json()})
    reduce = _cached(reduce_path, _cached_rate)
    if reduce is None:
        reduce = reduce_bps()
        made[reduce_path] = json.dumps({"reduce_bps": reduce})
    if not made:
        return prof, reduce, []
    what = " and ".join(("the model's step profile" if path == profile_path else "this machine's reduction "
                         "throughput") for path in made)
    try:
        for path, text in made.items():
            write_atomic(path, text)
    except OSError as error:
        return prof, reduce, [f"could not cache {what} in {cache} ({error.strerror or error}): each call measures "
                              "them again, and their noise moves the predictions"]
    them = "them" if len(made) > 1 else "it"
    return prof, reduce, [f"measured {what} and cached {them} in {cache}: later calls reuse {them} (delete the "
                          "folder to measure again)"]


def cluster(num_workers: int, workers_per_host: int, bandwidth_bps: float, latency_s: float,
            intra_bandwidth_bps: float) -> perfmodel.Cluster:
    """The target cluster: ``num_workers`` workers, ``workers_per_host`` on each host, each with a link of
    ``bandwidth_bps`` bits/s and ``latency_s`` to the other hosts, a host's joined by ``intra_bandwidth_bps``
    bits/s (latency 0). ValueError, one line naming the argument, where the hosts would not all hold
    ``workers_per_host`` workers."""
    if not (1 <= workers_per_host <= num_workers and num_workers % workers_per_host == 0):
        raise ValueError(f"workers_per_host must be in [1, {num_workers}] and divide num_workers ({num_workers}), "
                         f"got {workers_per_host}")
    return perfmodel.Cluster(num_workers // workers_per_host, workers_per_host,
                             perfmodel.Link(bandwidth_bps / 8, latency_s), perfmodel.Link(intra_bandwidth_bps / 8))


def hierarchical(config: Configuration, intra: str | None = None, inter: str | None = None) -> Configuration:
    """The hierarchical variant of an sra configuration, ``intra`` inside a host and ``inter`` among the hosts
    (None: the reducer's defaults, fp32 and sra): the same codec and its one-worker times."""
    settings = {**config.settings, "algorithm": "hierarchical", "intra": intra, "inter": inter}
    return replace(config, label=config_name(settings), settings=settings)


def hierarchical_encode_share(p: int, workers_per_host: int, inter: str | None) -> float:
    """What a rank of the hierarchical algorithm encodes, as a share of what the sra configuration's one-worker
    trial encoded (the gradient twice: its chunks, then its server chunk): an sra among the H = p / G hosts
    on 1/G of the elements encodes 1/G + 1/(G H) of a gradient, an all_gather 1/G, once."""
    G = workers_per_host
    return 1 / (2 * G) if inter == "allgather" else (1 + 1 / (p // G)) / 2 / G


def hierarchical_decode_share(p: int, workers_per_host: int, inter: str | None) -> float:
    """What a rank of the hierarchical algorithm decodes, as a share of what the sra configuration's one-worker
    trial decoded (the gradient twice): an sra's 2/G of a gradient, an all_gather's H payloads of 1/G."""
    G = workers_per_host
    return (p // G) / (2 * G) if inter == "allgather" else 1 / G


def input_for(configs: Mapping[tuple[str, str], Configuration], settings: dict[str, Any]) -> Configuration | None:
    """The configuration, with its one-worker times, that predicts a trial of ``settings``: its own; for a
    hierarchical trial (one worker compresses nothing), its codec's sra configuration made hierarchical with
    the trial's ``intra`` and ``inter``; None where there is none."""
    if settings["algorithm"] != "hierarchical":
        return configs.get(step_key(settings))
    sra = configs.get(step_key({**settings, "algorithm": "sra", "intra": None, "inter": None}))
    return None if sra is None else hierarchical(sra, settings.get("intra"), settings.get("inter"))


def predict(results: Path, bandwidth_bps: float, num_workers: int, latency_s: float, overlap: bool = True,
            compute_scale: float = 1.0, prof: Profile | None = None, workers_per_host: int = 1,
            intra_bandwidth_bps: float = DEFAULT_INTRA_BPS) -> tuple[pd.DataFrame, list[str]]:
    """Every predictable configuration of ``results`` on ``num_workers`` workers, ``workers_per_host`` on each
    host (``cluster``), with links of ``bandwidth_bps`` bits/s and ``latency_s`` between hosts and of
    ``intra_bandwidth_bps`` inside one; with several workers per host, each sra configuration with the
    hierarchical algorithm too (a row of its own). The notes (one line each) say what was skipped and why,
    where the steps to the target are unknown, and where the measured inputs were cached. ``prof``: the
    model's step profile (default: ``measured``'s)."""
    target = cluster(num_workers, workers_per_host, bandwidth_bps, latency_s, intra_bandwidth_bps)
    records = read_records(results)
    # The study's imports first: a compressor of the user's registers itself there.
    import_modules(list(dict.fromkeys(text for r in records for text in (r["settings"].get("imports") or ()))))
    csv = read_table(results, records)
    trials = pairs(records, csv)
    # a predictor input stands in for a one-worker trial of a configuration the grid ran (its outcome is the grid's)
    ran = {step_key(r["settings"]) for r in records}
    configs, skipped = configurations([*trials, *((r, row) for r, row in inputs_alone(results)
                                                  if step_key(r["settings"]) in ran)])
    notes = [f"not predicted: {note}" for note in skipped]
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
    prof, reduce, cache_notes = measured(results, fp32.settings, prof)
    study = judged_by(records)
    outcome_of = outcomes(records, csv, study)
    noise_of = noise(records, csv)
    # shown as the study's tables show them: parameters and algorithm only where not the defaults
    label = dict(zip((c.key for c in configs),
                     config_labels([{**c.settings, **(c.settings["compressor_params"] or {})} for c in configs], [])))
    # each row's configuration and the measured one whose label, trials and outcome it takes
    predicted = [(c, c) for c in configs]
    if workers_per_host > 1:
        predicted += [(hierarchical(c), c) for c in configs if c.settings["algorithm"] == "sra"]
    plans = {c.key: plan(c, prof, fp32.compute_s, num_workers, overlap, DeviceScale.uniform(compute_scale),
                         workers_per_host) for c, _ in predicted}

    def step_at(config: Configuration, bps: float) -> dict[str, float]:
        at = replace(target, inter=perfmodel.Link(bps / 8, latency_s))
        return predict_step(plans[config.key], at, reduce)

    base = step_at(fp32, bandwidth_bps)["predicted_step_time_s"]
    half = baseline(configs, "fp16", fp32.key[0])
    half_step = step_at(half, bandwidth_bps)["predicted_step_time_s"] if half else math.nan
    rows = []
    for config, measured_as in predicted:
        out = step_at(config, bandwidth_bps)
        step = out["predicted_step_time_s"]
        outcome = outcome_of[measured_as.key]
        known = outcome.steps > 0 and outcome_of[fp32.key].steps > 0
        ratio = outcome_of[fp32.key].steps / outcome.steps if known else math.nan
        even = math.nan
        if config is not fp32:
            def faster(bps: float, c: Configuration = config) -> bool:
                return step_at(c, bps)["predicted_step_time_s"] < step_at(fp32, bps)["predicted_step_time_s"]
            edge = perfmodel.break_even(faster, 1e6, 1e12)
            even = math.inf if edge == 1e12 else (0.0 if edge == 1e6 else edge)
        # "qsgd bits=4 hierarchical": the sra configuration's label, its algorithm said once
        name = label[config.key] if config is measured_as else \
            f"{label[measured_as.key].replace(' algorithm=sra', '')} hierarchical"
        rows.append({"configuration": name, "compressor": config.settings["compressor"],
                     "algorithm": config.settings["algorithm"], "num_workers": num_workers,
                     "workers_per_host": workers_per_host, "bandwidth_bps": bandwidth_bps,
                     "intra_bandwidth_bps": intra_bandwidth_bps, "latency_s": latency_s, "overlap": overlap,
                     "compute_scale": compute_scale, **out,
                     "speedup_vs_fp32": base / step, "speedup_vs_16bit": half_step / step,
                     # an unknown steps ratio counts as 1: the per-step speedup, and a note says so
                     "steps_ratio_vs_fp32": ratio,
                     "tta_speedup_vs_fp32": base / step * (ratio if math.isfinite(ratio) else 1.0),
                     **_interval(base / step * (ratio if math.isfinite(ratio) else 1.0),
                                 noise_of.get(measured_as.key, (math.nan, math.nan)) if config is not fp32
                                 else (1.0, 1.0)),
                     delta_column(study): outcome.delta, "reached_target": outcome.reached,
                     "break_even_bps": even, "speedup_bound": perfmodel.speedup_bound(base, fp32.compute_s)})
    notes += _outcome_notes(configs, label, outcome_of, fp32, "steps_to_target" in csv.columns)
    if len(predicted) > len(configs):
        notes.append(f"hierarchical: no such trial was run; each row is its sra configuration's codec on 1/"
                     f"{workers_per_host} of each bucket, with the steps to target and {study.name} of its flat sra "
                     "trials")
    return pd.DataFrame(rows, columns=columns(study)), notes + cache_notes


def _outcome_notes(configs: list[Configuration], label: dict[tuple[str, str], str],
                   outcome_of: dict[tuple[str, str], Outcome], fp32: Configuration, counted: bool) -> list[str]:
    """Which configurations did not finish ok with the most workers, and whose steps ratio is unknown."""
    notes = [f"{label[c.key]}: its trials with {outcome_of[c.key].num_workers} workers did not all finish ok "
             f"({', '.join(outcome_of[c.key].not_ok)}): taken as not reaching the target"
             for c in configs if outcome_of[c.key].not_ok]
    per_step = "tta_speedup_vs_fp32 is the per-step speedup"
    if not counted:
        return notes + [f"steps to target unknown: trials.csv has no steps_to_target column (written before it "
                        f"existed): {per_step}"]
    if not outcome_of[fp32.key].reached:
        return notes + [f"steps to target unknown: fp32 did not reach the target with "
                        f"{outcome_of[fp32.key].num_workers} workers: {per_step}"]
    unknown = [label[c.key] for c in configs if not outcome_of[c.key].reached]
    if unknown:
        notes.append(f"steps to target unknown for {', '.join(unknown)} (did not reach the target): their {per_step}")
    return notes


def predictions_path(results: Path, bandwidth: str, num_workers: int, latency: str, overlap: bool,
                     compute_scale: float, workers_per_host: int = 1, intra_bandwidth: str = "") -> Path:
    """Where predict and advise save their table: named by their arguments (as typed, lower case), so a call
    for another cluster keeps the file of this one, e.g. predictions/100mbit_8w_5us_overlap-true_x1.csv;
    with several workers per host, hosts x workers and the intra link's rate:
    predictions/25gbit_2x8w_2400gbit-intra_5us_overlap-true_x1.csv."""
    scale = repr(float(compute_scale)).removesuffix(".0")  # repr: two different scales never share a name
    workers = f"{num_workers}w" if workers_per_host == 1 else \
        f"{num_workers // workers_per_host}x{workers_per_host}w_{intra_bandwidth.strip().lower()}-intra"
    name = f"{bandwidth.strip().lower()}_{workers}_{latency.strip().lower()}_overlap-{str(overlap).lower()}"
    return results / PREDICTIONS_DIR / f"{name}_x{scale}.csv"


def emulated_compute_scale(num_workers: int, hosts: int, cpu_count: int, workers_per_host: int = 1) -> float:
    """How much slower each worker computes when ``num_workers`` workers of an emulated cluster of ``hosts``
    hosts x ``workers_per_host`` compute at once on this machine's ``cpu_count`` cores, against one worker
    alone: every worker has cores / (hosts x workers_per_host) torch threads (orchestrator.study.runner),
    and threads beyond the cores share them."""
    threads = max(1, cpu_count // (hosts * workers_per_host))
    return max(1.0, num_workers * threads / cpu_count)


def emulated_workers_per_host(p: int, link: dict[str, Any]) -> int:
    """The workers on each host of a trial of ``p`` workers on an emulated cluster (its record's ``link``):
    Ray packs them, ``workers_per_host`` to a host; a trial that does not fill its hosts evenly is taken as
    one worker per host."""
    G = min(link.get("workers_per_host", 1), p)
    return 1 if p % G else G


def emulated_cluster(p: int, link: dict[str, Any], wire: perfmodel.Link) -> perfmodel.Cluster:
    """The cluster a trial of ``p`` workers ran on (its record's ``link``; ``emulated_workers_per_host``):
    the workers of a host share its one link (``wire``) to the others and talk among themselves at about
    what the links carried unshaped."""
    G = emulated_workers_per_host(p, link)
    if G == 1:
        return perfmodel.Cluster.flat(p, wire)
    intra = perfmodel.Link((link.get("unshaped_bps") or wire.bandwidth * 8) / 8, 0.0)
    return perfmodel.Cluster(p // G, G, wire, intra, shared_link=True)


def trial_predictions(trials: Trials, inputs: Trials | None = None, cpu_count: int | None = None,
                      scales: Mapping[tuple[tuple[str, str], int], DeviceScale] | None = None,
                      latency: Mapping[tuple[tuple[str, str], int], float] | None = None,
                      profiles: dict[str, Profile | None] | None = None,
                      busy: Mapping[tuple[tuple[str, str], int, bool], float] | None = None,
                      reduce: float | None = None) -> dict[str, dict[str, float]]:
    """The predicted step (``predict_step``) of each multi-worker trial run on an emulated cluster (its workers,
    its overlap, its calibrated link's goodput and latency), by trial_id, from the one-worker trials
    of ``inputs`` (default: ``trials``) of the same workload and configuration; trials without
    them are left out. The device: ``scales`` by (``step_key``, workers) where given (measured;
    trials it lacks are left out), else ``emulated_compute_scale`` from ``cpu_count``, the machine's
    cores, else as measured alone. The link's latency per message: the calibration's (idle hosts), and
    ``latency`` by (``step_key``, workers) where given (measured as the trial's hosts load the machine:
    ``predict_step``'s ``latency_s``).
    ``profiles``: the models' step profiles by workload, kept between calls (filled in here).
    ``busy``: by (``step_key``, workers, overlap), the machine's busy time per step where the trial's hosts
    share its cores (measured): no timeline is shorter, for then what the hosts do is CPU work that waits
    for the cores, and hiding one host's communication behind its backward only lends its core to another.
    ``reduce``: the reduction throughput (``reduce_bps``), measured here once if not given."""
    targets = [(r, r["link"]) for r, _ in trials
               if r["settings"]["num_workers"] > 1 and (r.get("link") or {}).get("calibrated_bps")]
    configs = {c.key: c for c in configurations(inputs if inputs is not None else trials)[0]} if targets else {}
    profiles = {} if profiles is None else profiles
    out = {}
    for record, link in targets:
        s = record["settings"]
        config = input_for(configs, s)
        fp32 = baseline(list(configs.values()), "fp32", step_key(s)[0])
        if config is None or fp32 is None:
            continue
        if fp32.key[0] not in profiles:
            try:
                profiles[fp32.key[0]] = profile(fp32.settings)
            except (OSError, ValueError) as error:  # e.g. a data_dir relative to where the sweep ran
                warnings.warn(f"no step-time prediction for model {s['model']}: it could not be built here "
                              f"({error})", stacklevel=2)
                profiles[fp32.key[0]] = None
        prof = profiles[fp32.key[0]]
        if prof is None:
            continue
        p = s["num_workers"]
        if scales is not None:
            if (config.key, p) not in scales:
                continue
            scale = scales[config.key, p]
        else:
            scale = DeviceScale.uniform(emulated_compute_scale(p, link["hosts"], cpu_count,
                                                               link.get("workers_per_host", 1)) if cpu_count else 1.0)
        rate = link["calibrated_bps"] / 8
        emulated = emulated_cluster(p, link, perfmodel.Link(rate, link.get("calibrated_latency_s") or 0.0))
        if s["algorithm"] == "hierarchical" and emulated.workers_per_host == 1:
            continue  # its ranks did not fill their hosts evenly: not the algorithm the model knows
        step = plan(config, prof, fp32.compute_s, p, s["overlap"], scale, emulated.workers_per_host)
        reduce = reduce_bps() if reduce is None else reduce
        predicted = predict_step(step, emulated, reduce, (latency or {}).get((config.key, p)))
        floor = (busy or {}).get((config.key, p, bool(s["overlap"])), 0.0)
        out[record["trial_id"]] = {**predicted, "predicted_step_time_s": max(predicted["predicted_step_time_s"], floor)}
    return out


def _points(value: float, decimals: int = 2) -> str:
    """Percentage points (or nats, to ``decimals``) as a person writes them: 2.7, 0.25, 3."""
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


# Decimals of a change against fp32 in advise's lines: points to 2 (0.25), nats to 3 (0.051 of a limit of 0.05).
_DECIMALS = {"points": 2, "nats": 3}


def exclusion(row: pd.Series, max_loss: float, judged: Quality = ACCURACY) -> str | None:
    """Why advise does not recommend a configuration (a row of ``predict``'s table for a study ``judged`` so), or
    None: it ended more than ``max_loss`` (in the unit of what the study is judged by) worse than fp32."""
    if not row["reached_target"]:
        return "did not reach the target"
    lo, hi = float(row.get("tta_speedup_lo", math.nan)), float(row.get("tta_speedup_hi", math.nan))
    if math.isfinite(lo) and math.isfinite(hi) and not measurable(lo, hi):
        return (f"not measurable here: its predicted speedup's 95% interval [{lo:.2f}, {hi:.2f}] includes 1 (its "
                "one-worker step is not known well enough against fp32's on this machine: more steps, a quieter "
                "machine or a second seed narrow it)")
    delta = float(row[delta_column(judged)])
    if math.isnan(delta):
        return f"{judged.name} change vs fp32 unknown (no finished fp32 trial with as many workers)"
    worse = delta if worse_is_higher(judged) else -delta
    if worse > max_loss:
        amount = _points(worse, _DECIMALS[judged.unit])
        if worse_is_higher(judged):
            return f"{judged.name} {amount} {judged.unit} above fp32's (max {max_loss:g})"
        return f"lost {amount} {judged.unit} (max {max_loss:g})"
    return None


def advice(table: pd.DataFrame, max_loss: float, judged: Quality = ACCURACY) -> str:
    """The configuration that pays most on that cluster in time to accuracy, among those that reached the target
    and ended at most ``max_loss`` worse than fp32 in what the study is ``judged`` by (points of accuracy, nats
    of test loss), and why; or that none pays; then, a line each, the configurations left out and why."""
    others = table[table["compressor"] != "fp32"]
    why = {index: exclusion(row, max_loss, judged) for index, row in others.iterrows()}
    ranked = others.loc[[i for i in others.index if why[i] is None]].sort_values("tta_speedup_vs_fp32",
                                                                                 ascending=False)
    bound = float(table["speedup_bound"].iloc[0])
    within = f"reached the target within {max_loss:g} {judged.unit} of fp32's {judged.name}"
    if others.empty:
        lines = ["none pays: the folder has no configuration but fp32"]
    elif ranked.empty:
        lines = [f"none recommended: no configuration {within}"]
    elif float(ranked["tta_speedup_vs_fp32"].iloc[0]) <= 1.0:
        lines = [f"none pays: no configuration that {within} beats fp32 on this cluster (the bound for any "
                 f"compressor is {bound:.2f}x: fp32's exposed communication is small)"]
    else:
        best = ranked.iloc[0]
        ratio = float(best["steps_ratio_vs_fp32"])
        speed = (f"{best['tta_speedup_vs_fp32']:.2f}x fp32 in time to accuracy (per step "
                 f"{best['speedup_vs_fp32']:.2f}x, fp32's steps to target / its own {ratio:.2f})"
                 if math.isfinite(ratio) else f"{best['speedup_vs_fp32']:.2f}x fp32 per step; steps to target unknown")
        even = float(best["break_even_bps"])
        pays = "at any bandwidth" if math.isinf(even) else f"below {even / 1e9:.3g} Gbit/s"
        change = f"{float(best[delta_column(judged)]):+.{_DECIMALS[judged.unit]}f}"
        lines = [f"{best['configuration']}: {speed}; {judged.name} {change} {judged.unit} vs fp32, "
                 f"target reached; the bound for any compressor is {bound:.2f}x; it pays {pays}"]
    return "\n".join(lines + [f"excluded {others.loc[i, 'configuration']}: {text}"
                              for i, text in why.items() if text is not None])
