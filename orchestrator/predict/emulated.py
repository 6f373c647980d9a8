"""Predictions of the multi-worker trials a sweep ran on an emulated cluster (the results export's
``predicted_step_time_s``, and the validation grid), from its one-worker trials and the calibrated links.

The hosts of an emulated cluster share one machine's cores: how much that slows each phase, and the latency
per message under that load, are measured by ``orchestrator.predict.sharing`` or, without such trials,
guessed from threads per core (``emulated_compute_scale``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import measure, perfmodel
from .plan import DeviceScale, Plan, plan, predict_step
from .profile import Profile
from .trials import Configuration, Key, Trials, baseline, configurations, input_for, step_key

Cell = tuple[Key, int]  # (step_key, workers)


@dataclass(frozen=True)
class TrialInputs:
    """What the multi-worker trials of an emulated cluster are predicted from, beside their own records.

    ``alone``: the trials whose one-worker ones give each configuration its times. ``reduction_rate``: this
    machine's (``measure.reduction_rate``; None: measured at the first trial that needs it). How the hosts
    sharing the machine's cores slow a worker's device work: ``scales`` by (``step_key``, workers), measured
    (a trial it lacks is left out); where None, ``emulated_compute_scale``'s guess from ``cpu_count``, the
    machine's cores (None too: as measured alone). ``latency`` by (``step_key``, workers): the latency per
    message under that load (``predict_step``'s ``latency_s``), where measured; else the calibration's (idle
    hosts). ``busy`` by (``step_key``, workers, overlap): the machine's busy time per step, where measured: no
    timeline is shorter, for then what the hosts do is CPU work that waits for the cores, and hiding one
    host's communication behind its backward only lends its core to another. ``profiles``: the models' step
    profiles by workload, filled as trials need them and kept for the next call."""
    alone: Trials
    reduction_rate: float | None = None
    cpu_count: int | None = None
    scales: Mapping[Cell, DeviceScale] | None = None
    latency: Mapping[Cell, float] = field(default_factory=dict)
    busy: Mapping[tuple[Key, int, bool], float] = field(default_factory=dict)
    profiles: dict[str, Profile | None] = field(default_factory=dict, compare=False, repr=False)


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


def trial_predictions(trials: Trials, inputs: TrialInputs) -> dict[str, dict[str, float]]:
    """The predicted step (``predict_step``) of each multi-worker trial of ``trials`` run on an emulated cluster
    (its workers, its overlap, its calibrated link's goodput and latency), by trial_id, from ``inputs``' one-worker
    trials of the same workload and configuration; trials without them, or without what ``inputs`` needs of
    them, are left out."""
    targets = [r for r, _ in trials
               if r["settings"]["num_workers"] > 1 and (r.get("link") or {}).get("calibrated_bps")]
    configs = {c.key: c for c in configurations(inputs.alone)[0]} if targets else {}
    rate = inputs.reduction_rate
    out = {}
    for record in targets:
        found = _trial_plan(record, configs, inputs)
        if found is None:
            continue
        config, step, cluster = found
        rate = measure.reduction_rate() if rate is None else rate
        p, overlap = record["settings"]["num_workers"], bool(record["settings"]["overlap"])
        predicted = predict_step(step, cluster, rate, inputs.latency.get((config.key, p)))
        floor = inputs.busy.get((config.key, p, overlap), 0.0)
        out[record["trial_id"]] = {**predicted, "predicted_step_time_s": max(predicted["predicted_step_time_s"], floor)}
    return out


def _trial_plan(record: dict[str, Any], configs: dict[Key, Configuration],
                inputs: TrialInputs) -> tuple[Configuration, Plan, perfmodel.Cluster] | None:
    """The configuration that predicts a trial on an emulated cluster (its ``record``), its plan and the cluster
    it ran on; None where ``inputs`` cannot predict it."""
    s, link = record["settings"], record["link"]
    config = input_for(configs, s)
    fp32 = baseline(list(configs.values()), "fp32", step_key(s)[0])
    if config is None or fp32 is None:
        return None
    prof = measure.workload_profile(fp32.settings, inputs.profiles)
    if prof is None:
        return None
    p = s["num_workers"]
    if inputs.scales is not None:
        if (config.key, p) not in inputs.scales:
            return None
        scale = inputs.scales[config.key, p]
    else:
        scale = DeviceScale.uniform(emulated_compute_scale(p, link["hosts"], inputs.cpu_count,
                                                           link.get("workers_per_host", 1))
                                    if inputs.cpu_count else 1.0)
    wire = perfmodel.Link(link["calibrated_bps"] / 8, link.get("calibrated_latency_s") or 0.0)
    cluster = emulated_cluster(p, link, wire)
    if s["algorithm"] == "hierarchical" and cluster.workers_per_host == 1:
        return None  # its ranks did not fill their hosts evenly: not the algorithm the model knows
    return config, plan(config, prof, fp32.compute_s, p, s["overlap"], scale, cluster.workers_per_host), cluster
