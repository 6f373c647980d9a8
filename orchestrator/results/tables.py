"""The tables of a sweep's results, built with pandas from its trial records (no Ray, no files).

``trials_table(records)`` is trials.csv and ``history_table(records)`` is
history.csv; their columns are declared in orchestrator.study.columns. The
comparisons between trials are pandas group-bys on two keys computed once per
trial (``_keys``): the *scale* (every setting except compressor, its
parameters and algorithm) and the *workload* (the scale without the seed).

A trial's ``compressor_params`` (a dict) becomes one column per parameter
(``flat_settings``). ``config_labels`` names each trial's configuration in the
one label format of orchestrator.study.labels, for summary.md and the plots.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..study.columns import ID_COLUMNS, MODEL_COLUMNS, RESULT_COLUMNS, STEP_METRICS, column, median_low_index
from ..study import labels
from ..study.intervals import median_interval, ratio_factors, run_effects, spread
from ..study.quality import Quality, quality, targets
from ..study.settings import ALL_SYNC_KEYS, FP32, SIXTEEN_BIT, TEST_HOOKS, compressor_param_names

__all__ = [
    "STEP_METRICS", "MODEL_COLUMNS", "RESULT_COLUMNS", "ID_COLUMNS",
    "trials_table", "history_table", "history_rows",
    "accuracy_delta", "loss_delta", "Quality", "quality", "targets", "speedups", "overheads", "sixteen_bit_baseline",
    "flat_settings", "settings_columns", "config_labels", "numeric",
    "step_time_table",
]


# The times a speedup compares, in order of preference, and the basis each is named by.
_SPEEDUP_TIMES = (("time_to_target_s", "time_to_target"), ("step_time_s", "step_time"))


def _compression_keys() -> tuple[str, ...]:
    """The settings that tell one configuration from another at equal workload and scale (the hierarchical
    algorithm's precision inside a host and its exchange across hosts among them, how often workers
    exchange and its settings)."""
    return ("compressor", *compressor_param_names(), "algorithm", "intra", "inter", "sync", *ALL_SYNC_KEYS)


def _baselines(trials: pd.DataFrame, compressor: str | None) -> pd.DataFrame:
    """The "ok" trials of ``compressor`` that exchange every step (what users run: DDP's all-reduce, or its
    16-bit hook): every configuration is compared with them, a periodic sync's too."""
    every_step = trials["sync"].isna() | (trials["sync"] == "every_step") if "sync" in trials else True
    return trials[(trials["status"] == "ok") & (trials["compressor"] == compressor) & every_step]


def flat_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A trial's settings with ``compressor_params`` spread into one column per compressor
    parameter (orchestrator.study.settings.compressor_param_names; None where the compressor has none)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "compressor_params":
            params = value or {}
            flat.update({name: params.get(name) for name in compressor_param_names()})
            flat.update(params)  # a parameter this version does not declare keeps its value
        else:
            flat[key] = value
    return flat


def _compressor_order() -> dict[str, int]:
    """Baselines first, then the compressors in the order the compressors package lists them."""
    import compressors

    return {name: i for i, name in enumerate(dict.fromkeys((FP32, *SIXTEEN_BIT, *compressors.NAMES)))}


def numeric(values: pd.Series) -> pd.Series:
    """``values`` as floats, NaN wherever a value is missing, not a number, or not finite."""
    floats = pd.to_numeric(values, errors="coerce").astype(float)
    return floats.where(np.isfinite(floats))


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Python values with None for missing ones (pandas stores a missing setting as NaN)."""
    # Through numpy: DataFrame.where over object columns took 20 ms for a table of 100 columns.
    values = frame.to_numpy(dtype=object, copy=True)
    values[pd.isna(values)] = None
    return pd.DataFrame(values, index=frame.index, columns=frame.columns, dtype=object)


# ---------------------------------------------------------------- history table


def history_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per trial and epoch: trial_id, name, settings, the epoch's metrics.

    The epoch's own ``status`` ("running", "ok", "unstable", "diverged") is the training loop's;
    the trial's final status is in trials.csv.
    """
    return [{"trial_id": r["trial_id"], "name": r["name"], **_settings_shown(r), **epoch}
            for r in records for epoch in r["history"]]


def _settings_shown(record: dict[str, Any]) -> dict[str, Any]:
    """A record's settings as the tables show them: ``flat_settings`` without the test hooks, and the
    bandwidth of the links it ran over also where the cluster, not the trial, set them (``--address``)."""
    shown = {k: v for k, v in flat_settings(record["settings"]).items() if k not in TEST_HOOKS}
    if shown.get("bandwidth") is None and (record.get("link") or {}).get("bandwidth") is not None:
        shown["bandwidth"] = record["link"]["bandwidth"]
    return shown


def history_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """history.csv: ``history_rows`` as a DataFrame."""
    return pd.DataFrame(history_rows(records))


# ---------------------------------------------------------------- trials table


def trials_table(records: list[dict[str, Any]], history: pd.DataFrame | None = None) -> pd.DataFrame:
    """trials.csv: one row per trial, columns ID_COLUMNS, the settings, RESULT_COLUMNS.

    Rows are ordered baselines first, then by compressor as the compressors
    package lists them, then by name. ``history`` is ``history_table(records)``
    when the caller has it already.
    """
    if not records:
        return pd.DataFrame(columns=[*ID_COLUMNS, *RESULT_COLUMNS])
    flat = [_settings_shown(r) for r in records]
    settings = list(dict.fromkeys(key for s in flat for key in s))
    base = pd.DataFrame([{**{k: r[k] for k in ID_COLUMNS}, **s} for r, s in zip(records, flat)],
                        columns=[*ID_COLUMNS, *settings])
    models = pd.DataFrame([{k: v for k, v in (r.get("model_summary") or {}).items() if k in MODEL_COLUMNS}
                           for r in records], columns=list(MODEL_COLUMNS))
    own = _own_results(history_table(records) if history is None else history)
    trials = base.join(models).join(own, on="trial_id")
    trials["epochs_run"] = trials["epochs_run"].fillna(0).astype(int)
    trials["attempts"] = [r.get("attempts", 1) for r in records]  # records before attempts were counted: 1
    trials["calibrated_bps"] = [(r.get("link") or {}).get("calibrated_bps") for r in records]
    trials["calibrated_latency_s"] = [(r.get("link") or {}).get("calibrated_latency_s") for r in records]
    trials["worker_node_ips"] = [" ".join(r.get("worker_node_ips") or []) or None for r in records]

    order = _compressor_order()
    rank = trials["compressor"].map(lambda name: order.get(name, len(order)))
    trials = trials.assign(_rank=rank).sort_values(["_rank", "compressor", "name"], kind="stable")
    trials = trials.drop(columns="_rank").reset_index(drop=True)

    trials["accuracy_delta"] = accuracy_delta(trials)
    trials["loss_delta"] = loss_delta(trials)
    for baseline, speedup, basis in ((FP32, "speedup_vs_fp32", "speedup_basis"),
                                     (sixteen_bit_baseline(trials), "speedup_vs_16bit", "speedup_vs_16bit_basis")):
        result = speedups(trials, _baselines(trials, baseline))
        trials[speedup], trials[basis] = result["speedup"], result["basis"]
    trials["overhead_vs_fp32"] = overheads(trials, _baselines(trials, FP32))
    steps = {r["trial_id"]: r.get("step_times_s") or [] for r in records}
    trials["step_time_s_lo"], trials["step_time_s_hi"] = _step_time_intervals(trials, steps)
    effects = _run_effects(trials, steps)
    trials["between_runs_sd"] = _keys(trials)["workload"].map(lambda key: spread(effects.get(key, np.empty(0))))
    for baseline, ratio, inverse in ((FP32, "speedup_vs_fp32", False), (sixteen_bit_baseline(trials), "speedup_vs_16bit", False),
                                     (FP32, "overhead_vs_fp32", True)):
        trials[f"{ratio}_lo"], trials[f"{ratio}_hi"] = ratio_intervals(
            trials, _baselines(trials, baseline), trials[ratio], steps, effects, inverse)
    return trials.reindex(columns=[*ID_COLUMNS, *settings, *RESULT_COLUMNS])


def _step_time_intervals(trials: pd.DataFrame, steps: dict[str, list[float]]) -> tuple[list[float], list[float]]:
    """Each trial's step time interval: the order statistics' interval of the median of all its steps
    (orchestrator.study.intervals.median_interval), as factors of that median applied to ``step_time_s``
    (the median epoch's median step), so that the interval is of the step time shown."""
    ends = []
    for trial_id, step_time in zip(trials["trial_id"], numeric(trials["step_time_s"])):
        series = [t for t in steps.get(trial_id, []) if np.isfinite(t)]
        low, high = median_interval(series)
        middle = float(np.median(series)) if series else np.nan
        ends.append((step_time * low / middle, step_time * high / middle) if middle > 0 else (np.nan, np.nan))
    return [e[0] for e in ends], [e[1] for e in ends]


def _configurations(trials: pd.DataFrame) -> pd.Series:
    """Per trial, its configuration (every setting but the seed) as a comparable string."""
    compression = _plain(trials.reindex(columns=list(_compression_keys()))).to_dict("records")
    return _keys(trials)["workload"] + pd.Series([json.dumps(c, sort_keys=True, default=str) for c in compression],
                                                 index=trials.index)


def _run_effects(trials: pd.DataFrame, steps: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """Per workload, how much a run moves its median step (orchestrator.study.intervals.run_effects), from the
    "ok" trials of each configuration that ran more than once (several seeds)."""
    workloads, configurations = _keys(trials)["workload"], _configurations(trials)
    medians = pd.Series([float(np.median(steps[t])) if len(steps.get(t, [])) >= 2 else np.nan
                         for t in trials["trial_id"]], index=trials.index)
    ok = trials["status"] == "ok"
    return {workload: run_effects(group.groupby(configurations[group.index]).agg(list))
            for workload, group in medians[ok].groupby(workloads[ok])}


def ratio_intervals(trials: pd.DataFrame, baselines: pd.DataFrame, ratios: pd.Series, steps: dict[str, list[float]],
                    effects: dict[str, np.ndarray], inverse: bool = False) -> tuple[pd.Series, pd.Series]:
    """The 95% interval of the mean ratio of each configuration's trials (its "ok" seeds together, any other
    trial alone) against their baselines (``_baseline_times`` says which), given to each of them: the mean
    ratio times the bootstrap's factors of baseline step / own step (orchestrator.study.intervals.ratio_factors,
    with the rerun ``effects`` of their workload), of own / baseline with ``inverse`` (an overhead). NaN where
    the ratio is, for a baseline against itself, or where no trial of the configuration has the steps of
    itself and its baselines recorded (older records): those that have them make the interval."""
    members = _baseline_members(trials, baselines)
    workloads = _keys(trials)["workload"]
    lo, hi = pd.Series(np.nan, index=trials.index), pd.Series(np.nan, index=trials.index)
    compared = [i for i in trials.index[numeric(ratios).notna()] if i not in members[i]]  # not a baseline's own
    alone = pd.Series(trials.index.astype(str), index=trials.index)
    groups = _configurations(trials).where(trials["status"] == "ok", alone)
    for _, group in groups[compared].groupby(groups[compared], sort=False):
        pairs = [([steps.get(trials.at[i, "trial_id"], []) for i in members[index]],
                  steps.get(trials.at[index, "trial_id"], [])) for index in group.index]
        low, high = ratio_factors(pairs, effects.get(workloads[group.index[0]]), inverse)
        mean = float(numeric(ratios)[group.index].mean())
        lo[group.index], hi[group.index] = mean * low, mean * high
    return lo, hi


def _baseline_members(trials: pd.DataFrame, baselines: pd.DataFrame) -> pd.Series:
    """Per trial, the index of the baselines ``_baseline_times`` compares it with: those of its scale, else of
    its workload."""
    keys = _keys(trials)
    scale = keys.loc[baselines.index].groupby("scale").groups
    workload = keys.loc[baselines.index].groupby("workload").groups
    return pd.Series([list(scale.get(s, workload.get(w, []))) for s, w in zip(keys["scale"], keys["workload"])],
                     index=trials.index, dtype=object)


def _own_results(history: pd.DataFrame) -> pd.DataFrame:
    """Per trial_id, the results that need no other trial: accuracies, times, the step metrics reduced over
    epochs as orchestrator.study.columns declares them (parts of a step from the epoch its whole picks)."""
    metrics = ["test_accuracy", "test_loss", "train_time_s", "time_to_target_s", "steps_to_target", *STEP_METRICS]
    history = history.reindex(columns=["trial_id", *dict.fromkeys(metrics)])
    finite = history[["trial_id"]].join(history[metrics].apply(numeric))
    epochs = finite.groupby("trial_id", sort=False)
    own = pd.DataFrame({
        "epochs_run": epochs.size(),
        "final_accuracy": epochs["test_accuracy"].last(),  # the last finite one
        "best_accuracy": epochs["test_accuracy"].max(),
        "final_loss": epochs["test_loss"].last(),
    })
    own = own.join(epochs[[c for c in STEP_METRICS if column(c).epochs == "median"]].median())
    for whole in (c for c in STEP_METRICS if column(c).epochs == "median_low"):
        taken = [whole, *(c for c in STEP_METRICS if column(c).part_of == whole)]
        rows = {trial_id: group.index[i] for trial_id, group in epochs
                for i in [median_low_index(group[whole].tolist())] if i >= 0}
        picked = finite.loc[list(rows.values()), taken].set_axis(list(rows))
        own = own.join(picked.reindex(columns=taken))
    # The times as the training loop reported them after the last epoch.
    last = history.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    for name in ("time_to_target_s", "steps_to_target", "train_time_s"):
        own[name] = pd.to_numeric(last[name], errors="coerce")
    return own.set_axis(own.index.astype(object))  # no epochs at all: an empty index of no type


def _keys(trials: pd.DataFrame) -> pd.DataFrame:
    """Per trial, its ``scale`` (every setting but compressor, parameters, algorithm, intra and inter) and its
    ``workload`` (the scale without the seed), as comparable strings."""
    columns = [c for c in settings_columns(trials) if c not in _compression_keys()]
    plain = _plain(trials[columns])

    def key(row: dict[str, Any], skip: str | None = None) -> str:
        return json.dumps({k: v for k, v in row.items() if k != skip}, sort_keys=True, default=str)

    rows = plain.to_dict("records")
    return pd.DataFrame({"scale": [key(r) for r in rows], "workload": [key(r, "seed") for r in rows]},
                        index=trials.index)


def accuracy_delta(trials: pd.DataFrame) -> pd.Series:
    """``final_accuracy`` minus the mean final accuracy of the "ok" fp32 trials of the same
    workload (same settings but compression and seed); NaN without such a baseline."""
    keys = _keys(trials)
    fp32 = trials.index.isin(_baselines(trials, FP32).index)
    baseline = trials["final_accuracy"][fp32].groupby(keys["workload"][fp32]).mean()
    return trials["final_accuracy"] - keys["workload"].map(baseline)


def loss_delta(trials: pd.DataFrame) -> pd.Series:
    """``final_loss`` minus the mean final test loss of the "ok" fp32 trials of the same workload; NaN
    without such a baseline."""
    keys = _keys(trials)
    fp32 = trials.index.isin(_baselines(trials, FP32).index)
    baseline = numeric(trials["final_loss"])[fp32].groupby(keys["workload"][fp32]).mean()
    return numeric(trials["final_loss"]) - keys["workload"].map(baseline)


def sixteen_bit_baseline(trials: pd.DataFrame) -> str | None:
    """The 16-bit baseline of a study: the first of SIXTEEN_BIT that has "ok" every-step trials."""
    return next((name for name in SIXTEEN_BIT if not _baselines(trials, name).empty), None)


def _baseline_times(trials: pd.DataFrame, baselines: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per trial, the finite times it may be compared by, and the mean and count of each over its
    baselines: those of its scale (same settings but compression, seed included), or, where none has
    its seed, those of its workload (the other seeds)."""
    keys = _keys(trials)
    times = [time for time, _ in _SPEEDUP_TIMES]
    finite = trials[times].apply(numeric)

    def per(key: str) -> pd.DataFrame:
        groups = finite.loc[baselines.index].groupby(keys.loc[baselines.index, key])
        stats = groups.mean().add_suffix("_mean").join(groups.count().add_suffix("_n"))
        stats["n"] = groups.size()
        return keys[[key]].join(stats, on=key).drop(columns=key)

    peers = per("scale")
    alone = peers["n"].isna()  # no baseline has this trial's seed
    peers.loc[alone] = per("workload").loc[alone]
    return finite, peers


def speedups(trials: pd.DataFrame, baselines: pd.DataFrame) -> pd.DataFrame:
    """Per "ok" trial of two or more workers, baseline time / own time and the basis of that time
    (NaN/None otherwise: with one worker nothing is communicated, so nothing can be sped up).

    ``baselines`` are rows of ``trials`` (``_baseline_times`` says which a trial is compared with). The
    time is time_to_target_s where the trial and all those baselines have one, otherwise step_time_s;
    the baseline time is their mean.
    """
    finite, peers = _baseline_times(trials, baselines)
    speedup = pd.Series(np.nan, index=trials.index)
    basis = pd.Series(None, index=trials.index, dtype=object)
    undecided = (trials["status"] == "ok") & (pd.to_numeric(trials["num_workers"]) > 1)
    for time, name in _SPEEDUP_TIMES:
        usable = undecided & (finite[time] > 0) & (peers["n"] > 0) & (peers[f"{time}_n"] == peers["n"])
        speedup[usable] = peers.loc[usable, f"{time}_mean"] / finite.loc[usable, time]
        basis[usable] = name
        undecided &= ~usable
    return pd.DataFrame({"speedup": speedup, "basis": basis})


def overheads(trials: pd.DataFrame, baselines: pd.DataFrame) -> pd.Series:
    """Per "ok" one-worker trial, own step_time_s / its baselines' mean step_time_s (``_baseline_times``):
    what the compressor costs where nothing is sent. NaN otherwise."""
    finite, peers = _baseline_times(trials, baselines)
    usable = ((trials["status"] == "ok") & (pd.to_numeric(trials["num_workers"]) == 1)
              & (peers["step_time_s_n"] > 0) & (peers["step_time_s_mean"] > 0))
    return (finite["step_time_s"] / peers["step_time_s_mean"]).where(usable)


# ---------------------------------------------------------------- labels


def settings_columns(trials: pd.DataFrame) -> list[str]:
    """The columns of a trials table that are settings."""
    return [c for c in trials.columns if c not in (*ID_COLUMNS, *RESULT_COLUMNS)]


def config_labels(trials: pd.DataFrame, extra: Iterable[str] = ()) -> pd.Series:
    """Each trial's configuration in the one label format (orchestrator.study.labels.config_labels),
    then ``extra``."""
    rows = _plain(trials).to_dict("records")
    return pd.Series(labels.config_labels(rows, settings_columns(trials), extra), index=trials.index, dtype=object)


# A step's time is compute + exposed communication; the hook's own phases overlap the step.
STEP_PARTS = ("step_time_s", "compute_s", "exposed_comm_s", "encode_s", "comm_s", "decode_s")


def step_time_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Milliseconds per step (medians over epochs, mean over seeds) in ``STEP_PARTS`` without the ``_s``,
    one row per configuration and worker count, indexed by label (``config_labels`` with num_workers);
    grouped by worker count, configurations in table order within each. Trials without a compute and
    exposed-communication time are left out; comm is NaN for plain DDP (not observable without a hook)."""
    parts = trials[list(STEP_PARTS)].apply(pd.to_numeric, errors="coerce")
    complete = parts[["compute_s", "exposed_comm_s"]].notna().all(axis=1)
    label = config_labels(trials, extra=("num_workers",)).rename("label")
    configurations = config_labels(trials)
    rank = configurations.map({name: i for i, name in enumerate(dict.fromkeys(configurations))}).rename("order")
    groups = [trials["num_workers"][complete], rank[complete], label[complete]]
    means = (parts[complete] * 1000).groupby(groups, sort=False).mean()
    means = means.sort_index(level=[0, 1], sort_remaining=False).droplevel([0, 1])
    return means.rename(columns=lambda part: part.removesuffix("_s"))
