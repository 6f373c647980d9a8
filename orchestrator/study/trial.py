"""The Tune trial of one grid point: its workers taken from this process's pool, its reports passed to Tune.

Tune runs this function in a small process of its own (~0.01 CPU) and reuses that process from trial
to trial, so the idle workers it keeps (orchestrator.study.gang) serve the next trial of their shape.
It imports only Ray and what it needs to place and run the workers: the training settings come ready
from the driver.
"""
from __future__ import annotations

from typing import Any

from ray import tune

from .gang import POOL, Limits, PlacementTimeout, TrialTimeout, WorkerFailure
from .placement import placement_problem

TRIAL_CPUS = 0.01  # the Tune trial only waits on its workers


class Unplaceable(RuntimeError):
    """A trial's workers can never be placed on the cluster as it is."""


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trial: run one grid point (``config["point"]``: the trial and its training settings) on a
    gang of workers. A trial that cannot run or whose workers fail reports its outcome as failed, with its
    reason and the worker's traceback; what raises here is this project's own error."""
    try:
        _run(config["point"]["trial"], config["point"]["settings"], config["run"])
    except (Unplaceable, TrialTimeout) as error:
        tune.report({"outcome": {"status": "failed", "reason": str(error)}})
    except WorkerFailure as failure:
        # The workers raised or died: what the trial's code did (the runner judges a hopeless sweep by these).
        tune.report({"outcome": {"status": "failed", "reason": failure.reason, "traceback": failure.detail,
                                 "in_workers": True}})


def _run(trial: dict[str, Any], settings: dict[str, Any], run: dict[str, Any]) -> None:
    cluster = run["cluster"]
    resources = {"CPU": cluster["cpus_per_worker"]}
    if cluster["use_gpu"]:
        resources["GPU"] = cluster["gpus_per_worker"]
    threads = run["threads"]
    if run["emulation"] is not None:
        resources[run["emulation"]["resource"]] = 1
        # A worker slot is a fixed share of this machine's cores, whatever the trial's worker count:
        # a one-worker trial then measures the device every worker of a larger trial has.
        slots = run["emulation"]["hosts"] * run["emulation"]["workers_per_host"]
        threads = max(1, run["emulation"]["cpu_count"] // slots)
        _shape_for(trial, run["emulation"]["prefix"])
    threads = cluster["threads_per_worker"] or threads
    problem = placement_problem(trial["num_workers"], resources, _node_resources())
    if problem:
        raise Unplaceable(problem)
    backend = cluster["backend"]
    if backend == "auto":
        backend = "nccl" if cluster["use_gpu"] else "gloo"
    if not run["keep_workers"]:  # trials side by side: idle workers would hold what another trial needs
        POOL.clear()
    elif not POOL.prepared:
        POOL.prepare(run["worker_counts"], resources, [] if cluster["use_gpu"] else run["codecs"])
    limits = Limits(cluster.get("startup_timeout_s"), cluster.get("trial_timeout_s"))
    attempt = 0
    while True:
        try:
            gang = POOL.take(trial["num_workers"], resources, cluster["placement_timeout_s"])
        except PlacementTimeout:
            raise Unplaceable(
                f"the {trial['num_workers']} worker(s) were not placed within placement_timeout_s = "
                f"{cluster['placement_timeout_s']:g} s: the resources they need stayed taken (by other "
                "trials, or outside this sweep); raise placement_timeout_s, set it to null, or lower "
                "max_concurrent_trials") from None
        # Each start of the workers (the first, and each restart under max_failures) says so first:
        # its epochs replace those of the attempt before.
        tune.report({"attempt_started": True})
        try:
            for report in gang.run(trial["num_workers"], backend, settings, run["sweep"], trial["name"], threads,
                                   limits):
                tune.report(report)
        except WorkerFailure:
            attempt += 1
            if cluster["max_failures"] != -1 and attempt > cluster["max_failures"]:
                raise
            continue
        POOL.give_back(gang)
        return


def _shape_for(trial: dict[str, Any], prefix: str) -> None:
    """Shape the emulated links to the trial's bandwidth (trials run one at a time when it varies)."""
    from ..cluster.emulation import load

    emulation = load(prefix)
    if emulation is None:
        raise RuntimeError(f"the emulated cluster {prefix!r} is gone (its state file is missing)")
    if trial["bandwidth"] is not None and emulation.bandwidth != trial["bandwidth"]:
        emulation.shape(trial["bandwidth"])


def _node_resources() -> list[dict[str, float]]:
    """The resources of the cluster's alive nodes, less what this Tune trial itself holds."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    nodes = []
    for node in ray.nodes():
        if node["Alive"]:
            resources = dict(node["Resources"])
            if node["NodeID"] == here:
                resources["CPU"] = resources.get("CPU", 0.0) - TRIAL_CPUS
            nodes.append(resources)
    return nodes
