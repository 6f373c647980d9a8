"""The predictor's inputs from a results folder: its trial records and trials.csv, checked against each
other, and each configuration's times from its one-worker trials.

A configuration's times (compute, encode, decode and exposed communication per step) are the medians
over its one-worker trials (repeats, seeds), on the device they ran on (CPU or GPU). Hook-only and optimizer
methods (PowerSGD, 1-bit Adam) and a periodic sync (local_sgd, diloco) are not modelled; a hierarchical trial
is no input (one worker is one host: nothing is compressed), its codec's sra configuration is.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

import workloads
from compressors.core.registry import hook_only, optimizer_method

from ..study import predictor_inputs
from ..study.labels import config_label
from ..study.settings import SYNC_KEYS
from ..study.records import RENAMED, read_records

# The settings that change what a step costs (not how long training runs, nor what it learns):
# trials agreeing in these and in the compressor run the same step.
_WORKLOAD_KEYS = ("dataset", "dataset_options", "model", "model_options", "batch_size", "optimizer",
                  "min_compress_numel", "bucket_cap_mb", "impl", "use_gpu", *(p.name for p in workloads.MODEL_OPTIONS),
                  *(p.name for p in workloads.DATASET_OPTIONS))

Trials = list[tuple[dict[str, Any], pd.Series]]  # (record, trials.csv row) of each finished trial
Key = tuple[str, str]  # step_key: (workload, configuration label)

# What the model reads of trials.csv: each configuration's one-worker times, then what its trials reached
# (time_to_target_s; steps_to_target and the change against fp32, accuracy_delta or loss_delta, where the table
# has them, unknown in older tables).
PHASES = ("compute_s", "encode_s", "decode_s", "exposed_comm_s")
_NEEDED = ("trial_id", *PHASES, "time_to_target_s")
_OUTCOME_NUMBERS = ("steps_to_target", "accuracy_delta", "loss_delta")


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
    def key(self) -> Key:
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
    """A configuration's label: its compressor, its parameters, its algorithm and, other than every_step, its
    sync and the settings it takes (a periodic sync's trials are never pooled with every-step ones)."""
    params = settings["compressor_params"] or {}
    sync = settings.get("sync") or "every_step"
    synced = ["sync", *SYNC_KEYS[sync]] if sync in SYNC_KEYS and sync != "every_step" else []
    return config_label({**settings, **params}, [*params, "algorithm", "intra", "inter", *synced])


def step_key(settings: dict[str, Any]) -> Key:
    """(workload, configuration label): trials with equal keys run the same step."""
    workload = json.dumps({k: settings.get(k) for k in _WORKLOAD_KEYS}, sort_keys=True, default=str)
    return workload, config_name(settings)


def configurations(trials: Trials) -> tuple[list[Configuration], list[str]]:
    """The configurations that can be predicted, and why the others cannot. A configuration's times are
    the medians over its one-worker trials (repeats, seeds): one trial's may be off by a fifth."""
    repeats: dict[Key, list[tuple[dict[str, Any], pd.Series]]] = {}
    why: dict[Key, str] = {}
    for record, row in trials:
        s = record["settings"]
        problem = _not_an_input(s)
        if problem:
            why[step_key(s)] = problem
        elif s["num_workers"] == 1:
            repeats.setdefault(step_key(s), []).append((s, row))
    found = {}
    for key, runs in repeats.items():
        problem = _times_problem([row for _, row in runs])
        if problem:
            why[key] = problem
            continue
        found[key] = Configuration(config_name(runs[0][0]), runs[0][0],
                                   *(statistics.median(float(row[phase]) for _, row in runs) for phase in PHASES))
    for record, _ in trials:
        if step_key(record["settings"]) not in found:
            why.setdefault(step_key(record["settings"]), "no finished one-worker trial")
    return list(found.values()), [f"{name}: {text}" for (_, name), text in why.items()]


def _not_an_input(settings: dict[str, Any]) -> str | None:
    """Why no trial of ``settings`` is an input of the model, or None."""
    if hook_only(settings["compressor"]):
        return "it runs only as PyTorch's DDP hook, whose traffic the model does not know"
    if optimizer_method(settings["compressor"]):
        return "it averages inside its optimizer's step, which the model does not know"
    if settings.get("sync", "every_step") != "every_step":
        return (f"sync {settings['sync']} is not modelled: the model knows an exchange of every step's "
                "gradients, not one of the parameters every inner_steps steps")
    if settings["algorithm"] == "hierarchical":
        return ("a hierarchical trial is no input (one worker is one host: nothing is compressed); "
                "with --workers_per_host, each sra configuration is predicted hierarchical")
    return None


def _times_problem(rows: list[pd.Series]) -> str | None:
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


def hierarchical(config: Configuration, intra: str | None = None, inter: str | None = None) -> Configuration:
    """The hierarchical variant of an sra configuration, ``intra`` inside a host and ``inter`` among the hosts
    (None: the reducer's defaults, fp32 and sra): the same codec and its one-worker times."""
    settings = {**config.settings, "algorithm": "hierarchical", "intra": intra, "inter": inter}
    return replace(config, label=config_name(settings), settings=settings)


def input_for(configs: Mapping[Key, Configuration], settings: dict[str, Any]) -> Configuration | None:
    """The configuration, with its one-worker times, that predicts a trial of ``settings``: its own; for a
    hierarchical trial (one worker compresses nothing), its codec's sra configuration made hierarchical with
    the trial's ``intra`` and ``inter``; None where there is none."""
    if settings["algorithm"] != "hierarchical":
        return configs.get(step_key(settings))
    sra = configs.get(step_key({**settings, "algorithm": "sra", "intra": None, "inter": None}))
    return None if sra is None else hierarchical(sra, settings.get("intra"), settings.get("inter"))
