"""What emulated hosts sharing one machine cost, measured: device scales, latency under load, busy time.

The hosts of an emulated cluster share this machine's cores, caches and memory bandwidth, so a host of a
p-worker trial computes, encodes and decodes more slowly than alone, where its one-worker trial measured
it, and its messages wait longer. ``sharing_inputs`` takes these from trials of the same configurations
run at the grid's worker counts over links the machine, not tbf, limits (``sweeps/predictor_sharing.yaml``);
``factors`` and ``measured_scales`` take them from processes run together on the machine without links
(``benchmarks/host_contention.py``). ``emulated.trial_predictions`` uses them in place of its own guess
(``emulated.emulated_compute_scale``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from . import measure
from ..study import predictor_inputs
from .emulated import Cell, TrialInputs, emulated_workers_per_host, trial_predictions
from .plan import DeviceScale, hierarchical_decode_share, hierarchical_encode_share
from .trials import Configuration, Key, Trials, configurations, input_for, step_key


def finite_median(values: Iterable[float]) -> float:
    """The median of the finite values (a figure not every repeat has, or a phase a configuration does
    not have, is NaN); NaN if none is."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def factors(times: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """Per count of busy processes, each phase's time over its time alone (NaN where alone took none)."""
    alone = times[min(times)]
    return {k: {phase: t[phase] / alone[phase] if alone[phase] > 0 else float("nan") for phase in alone}
            for k, t in times.items()}


def device_scale(algorithm: str, k: int, factors: dict[str, float], world: bool,
                 workers_per_host: int = 1, inter: str | None = None) -> DeviceScale:
    """A configuration's device scale at ``k`` workers from its factors per phase (time at k over time
    alone; NaN: a phase it does not have, 1x). An allreduce hook's encode and decode are its one-worker
    exposed time (``plan.plan``): they scale as it does, or, where the k formed one world (that time
    then holds the collective), as its compute does. In one world an sra encodes its server chunk, a 1/k
    part, where alone it encoded the whole: the encode factor is divided by what ``plan.plan`` already
    takes for that, (1 + 1/k) / 2; a hierarchical one's rank encodes and decodes what an sra (or an
    all_gather: ``inter``) among the k / G hosts does on 1/G of the elements (``workers_per_host`` G), as
    ``plan.plan`` takes too."""
    if algorithm == "allreduce":
        codec = (factors["compute_s" if world else "exposed_comm_s"],) * 2
    elif world and algorithm == "sra":
        codec = (factors["encode_s"] / ((1 + 1 / k) / 2), factors["decode_s"])
    elif world and algorithm == "hierarchical":
        codec = (factors["encode_s"] / hierarchical_encode_share(k, workers_per_host, inter),
                 factors["decode_s"] / hierarchical_decode_share(k, workers_per_host, inter))
    else:
        codec = (factors["encode_s"], factors["decode_s"])
    return DeviceScale(*(f if math.isfinite(f) else 1.0 for f in (factors["compute_s"], *codec)))


def measured_scales(contention: dict[str, Any], configs: list[Configuration]) -> dict[Cell, DeviceScale]:
    """``host_contention``'s factors as device scales (``device_scale``) by (configuration key, workers), for
    the configurations of ``configs`` it measured; ``--world``: the processes formed one world."""
    algorithm = {c.key: c.settings["algorithm"] for c in configs}
    return {(tuple(row["key"]), int(count)): device_scale(algorithm[tuple(row["key"])], int(count), f,
                                                          bool(contention.get("world")))
            for row in contention["configurations"] if tuple(row["key"]) in algorithm
            for count, f in row["factors"].items()}


def sharing_inputs(sharing: Trials, inputs: Trials, reduction_rate: float | None = None) -> TrialInputs:
    """What hosts sharing this machine cost, from trials of the grid's configurations at its worker counts,
    with overlap and without, over links the machine, not tbf, limits (``sweeps/predictor_sharing.yaml``), each
    figure the median over repeated trials of a (configuration key, workers), as the inputs of predictions
    from the one-worker trials of ``inputs``: each phase's time there over its one-worker time as device
    scales, as ``device_scale`` takes them from a world; the links' latency per message under that load
    (``_latencies``; these from the trials without overlap, whose phases add up); and, with overlap and
    without, the machine's busy time per step (its step time x the share of CPU time not idle, where the trial
    recorded ``cpu_idle_share``): the hosts' CPU work per step, which no slower link shortens.
    ``reduction_rate``: this machine's (``measure.reduction_rate``), measured here if not given."""
    configs = {c.key: c for c in configurations(inputs)[0]}
    every = [(r, row) for r, row in sharing if r["settings"]["num_workers"] > 1
             and input_for(configs, r["settings"]) is not None]
    # overlapped, a trial's phases run at once and its communication hides behind them
    serial = [(r, row) for r, row in every if not r["settings"]["overlap"]]
    # once, so that every prediction below, and the bisection's, takes the same figure
    rate = measure.reduction_rate() if reduction_rate is None else reduction_rate
    scaled = TrialInputs(inputs, rate, scales=_device_scales(serial, configs))
    return replace(scaled, latency=_latencies(serial, scaled), busy=_busy(every))


def _cell(record: dict[str, Any]) -> Cell:
    return step_key(record["settings"]), record["settings"]["num_workers"]


def _medians(figures: dict[Any, list[float]]) -> dict[Any, float]:
    return {key: statistics.median(values) for key, values in figures.items()}


def _busy(trials: Trials) -> dict[tuple[Key, int, bool], float]:
    """The machine's busy time per step, by (configuration key, workers, overlap), of the trials that
    recorded their idle share."""
    busy: dict[tuple[Key, int, bool], list[float]] = {}
    for record, row in trials:
        idle = float(row.get("cpu_idle_share", math.nan))
        if math.isfinite(idle):
            busy.setdefault((*_cell(record), bool(record["settings"]["overlap"])), []).append(
                float(row["step_time_s"]) * (1 - idle))
    return _medians(busy)


def _device_scales(serial: Trials, configs: dict[Key, Configuration]) -> dict[Cell, DeviceScale]:
    """Each phase's time in the ``serial`` trials over its one-worker time (``configs``) as device scales, by
    (configuration key, workers)."""
    found: dict[Cell, list[dict[str, float]]] = {}
    shape: dict[Cell, tuple[str, int, str | None]] = {}  # algorithm, per host, inter
    for record, row in serial:
        config = input_for(configs, record["settings"])
        alone = {"compute_s": config.compute_s, "encode_s": config.encode_s, "decode_s": config.decode_s}
        found.setdefault(_cell(record), []).append(
            {phase: float(row[phase]) / t if t > 0 else math.nan for phase, t in alone.items()})
        shape[_cell(record)] = (config.settings["algorithm"],
                                emulated_workers_per_host(_cell(record)[1], record.get("link") or {}),
                                config.settings.get("inter"))
    scales = {}
    for (key, k), runs in found.items():
        # a phase a configuration does not have stays NaN, which device_scale takes as 1x
        median = {phase: finite_median(f[phase] for f in runs) for phase in runs[0]}
        algorithm, per_host, inter = shape[key, k]
        scales[key, k] = device_scale(algorithm, k, median, world=True, workers_per_host=per_host, inter=inter)
    return scales


def _latencies(serial: Trials, scaled: TrialInputs) -> dict[Cell, float]:
    """The links' latency per message under the load of the ``serial`` trials, by (configuration key, workers):
    for the hooks, the median over them of the communication measured beyond the link model's time for the
    bytes (all of it where a host's workers share its link: ``plan.predict_step``), over the messages the
    model counts (ring all_reduce 2(p - 1), all_gather and all_to_all p - 1 each); for plain DDP, whose C++
    all_reduces pay less of it and whose communication is not timed, the latency at which the model gives its
    step (``_plain_latency``)."""
    zero = replace(scaled, latency={cell: 0.0 for cell in scaled.scales})
    hooks: dict[int, list[float]] = {}
    plain: dict[Cell, list[float]] = {}
    for record, row in serial:
        # one trial at a time: repeated runs of a sweep give their trials the same ids, each its own link;
        # the time of its bytes alone: no latency, the idle links' neither
        bare = {**record, "link": {**(record.get("link") or {}), "calibrated_latency_s": 0.0}}
        guess = trial_predictions([(bare, row)], zero).get(record["trial_id"])
        if guess is None or not guess["messages"]:
            continue
        if math.isfinite(float(row["comm_s"])):
            # on a link per worker, latency adds to the bytes' time; where a host's workers share its link, the
            # model takes the longer of the two (plan.predict_step): there, all of it is the messages' waits
            shared = emulated_workers_per_host(_cell(record)[1], record.get("link") or {}) > 1
            beyond = float(row["comm_s"]) - (0.0 if shared else guess["comm_s"])
            hooks.setdefault(_cell(record)[1], []).append(beyond / guess["messages"])
        else:
            plain.setdefault(_cell(record), []).append(_plain_latency(record, row, scaled))
    latency = {(key, k): max(0.0, statistics.median(hooks[k])) for key, k in scaled.scales if k in hooks}
    return {**latency, **_medians(plain)}


def _plain_latency(record: dict[str, Any], row: Any, scaled: TrialInputs) -> float:
    """The latency per message at which the model gives a plain DDP trial's measured step time."""
    def step_at(alpha: float) -> float:
        at = replace(scaled, latency={_cell(record): alpha})
        return trial_predictions([(record, row)], at)[record["trial_id"]]["predicted_step_time_s"]
    return _solve(step_at, float(row["step_time_s"]))


def _solve(step_at: Callable[[float], float], target: float, high: float = 0.1) -> float:
    """The latency in [0, high] at which ``step_at`` (increasing) gives ``target``, by bisection."""
    low = 0.0
    if step_at(low) >= target:
        return low
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if step_at(mid) < target else (low, mid)
    return (low + high) / 2


def emulated_predictions(trials: Trials, measured: Trials, cpu_count: int | None = None,
                         reduction_rate: float | None = None) -> dict[str, dict[str, float]]:
    """The predicted step of each multi-worker trial of a sweep on an emulated cluster (``trials``), by trial_id,
    from the one-worker trials of the sweep and of its predictor inputs (``measured``;
    ``orchestrator.study.predictor_inputs``), and the sharing that their multi-worker trials measured, the
    grid's own among them (``sharing_inputs``, busy time as a floor). Without those (a sweep run before
    they were, or with trials at once), the sharing is ``emulated.emulated_compute_scale``'s guess from
    ``cpu_count``."""
    inputs = [*trials, *((r, row) for r, row in measured if r["settings"]["num_workers"] == 1)]
    grid = predictor_inputs.wanted([r["settings"] for r, _ in trials])
    sharing = [(r, row) for r, row in [*measured, *((r, row) for r, row in trials if r["trial_id"] in grid)]
               if r["settings"]["num_workers"] > 1]
    if not sharing:
        return trial_predictions(trials, TrialInputs(inputs, reduction_rate, cpu_count=cpu_count))
    return trial_predictions(trials, sharing_inputs(sharing, inputs, reduction_rate))
