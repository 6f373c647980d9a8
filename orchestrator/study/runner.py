"""Run a sweep on Ray: one Tune trial per grid point, each a Ray Train TorchTrainer.

Ray Train V2 (the default in Ray 2.60) cannot be given to a Tuner directly, so
every Tune trial is a small function (``_run_trial``, ~0.01 CPU, in a process Tune
reuses from trial to trial) that builds and fits a ``TorchTrainer``; its
``TuneReportCallback`` forwards rank 0's reports to Tune. Each train worker runs
``orchestrator.study.train_loop.train``.

Results are written as trials finish, by a Tune callback: a record per trial
(orchestrator.study.records); the caller rebuilds the tables and plots from them
(orchestrator.results.export). A sweep that is interrupted loses only the trials that
were running; ``resume=True`` runs only the trials without a record.

On an emulated cluster (orchestrator.cluster.emulation; this driver then runs in its
host 0) each worker asks for one ``emu_host``, so a trial's workers sit on
different hosts; every bandwidth the trials need is calibrated before the first
trial, and each trial re-shapes the links to its bandwidth before its workers
start. Its workers share this machine's cores: each gets cores / hosts torch
threads (at least one), whatever the trial's number of workers.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any, TextIO

from compressors.core.params import rate_bps

from . import env_info
from .sweep_file import Sweep, training_settings
from ..cluster.emulation import HEADROOM, HOST_RESOURCE, Cluster
from .placement import placement_problem
from .progress import Progress
from .records import finished_ids, make_record, write_record

# On small machines each Ray Train report waits for the next health check (default 2 s).
# Ray Train's PreemptionWatcher is one more actor process per trial (~2.5 CPU-s of imports, just as
# the workers set up and start training) that only forewarns a training function of a node drain;
# ours does not listen, and a preempted worker still counts against the preemption retry budget.
_RAY_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}
_OBJECT_STORE_BYTES = 256 * 1024**2  # trials exchange only metrics; keep local Ray small
_TRIAL_CPUS = 0.01  # the Tune trial only waits on its TorchTrainer


class Unplaceable(RuntimeError):
    """A trial's workers can never be placed on the cluster as it is."""


class ResultsExist(RuntimeError):
    """The results folder already holds trials of this sweep and ``resume`` was not asked for,
    or another run holds it."""


def _lock(results: Path) -> TextIO:
    """Hold ``results/.lock`` for this run (released when the process ends, however it ends);
    ResultsExist naming the holder when another run has it."""
    handle = (results / ".lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ResultsExist(f"{results} is in use by another run ({holder}); wait for it, or choose another "
                           "--results folder") from None
    handle.seek(0)
    handle.truncate()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")
    handle.flush()
    return handle


def run_sweep(sweep: Sweep, results: str | os.PathLike, *, address: str | None = None,
              resume: bool = False, max_concurrent_trials: int | None = None,
              stream: TextIO = sys.stdout, emulation: Cluster | None = None,
              refresh: Callable[[Path], Any] | None = None) -> tuple[Path, int]:
    """Run the trials of ``sweep`` not finished yet; returns the results folder and how many
    trials are still unfinished (nonzero only when the sweep was interrupted). ``emulation``: the
    emulated cluster this driver runs in (its Ray is the one joined); ``refresh(results)`` runs after
    each trial's record is written (the CLI rebuilds the tables there)."""
    results = Path(results).resolve()
    results.mkdir(parents=True, exist_ok=True)
    lock = _lock(results)
    try:
        return _run_locked(sweep, results, address, resume, max_concurrent_trials, stream, emulation, refresh)
    finally:
        lock.close()


def _run_locked(sweep: Sweep, results: Path, address: str | None, resume: bool,
                max_concurrent_trials: int | None, stream: TextIO,
                emulation: Cluster | None, refresh: Callable[[Path], Any] | None) -> tuple[Path, int]:
    done = finished_ids(results)
    if done and not resume:
        raise ResultsExist(f"{results} already holds {len(done)} finished trial(s) of this sweep: "
                           "pass --resume to run only the others, or choose another --results folder")
    copy = results / "sweep.yaml"
    if not (copy.exists() and copy.samefile(sweep.path)):  # `run results/x/sweep.yaml --resume`
        shutil.copyfile(sweep.path, copy)
    todo = [trial for trial in sweep.trials if trial["trial_id"] not in done]
    progress = Progress(total=len(sweep.trials), finished=len(sweep.trials) - len(todo), stream=stream)
    if not todo:
        progress.note(f"nothing to run: every trial has a record in {results / 'trials'}")
        return results, 0

    if emulation is not None:
        _calibrate(emulation, todo, progress)
        address = emulation.address
    _start_ray(address, sweep.cluster, emulation)
    import ray
    from ray import tune

    logging.getLogger("ray.tune.execution.tune_controller").addFilter(_NoTrialTracebacks())
    logging.getLogger("ray.tune.tune").addFilter(_NoTuneResumeAdvice())
    try:
        environment = env_info.collect()
        environment["ray_cluster_resources"] = ray.cluster_resources()
        if emulation is not None:
            environment["emulation"] = emulation.summary()
        (results / "environment.json").write_text(json.dumps(environment, indent=1))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = {
            "sweep": sweep.name,
            "cluster": sweep.cluster,
            "storage_path": str(results / "ray" / f"train-{stamp}"),
            "cwd": os.getcwd(),  # relative data_dir values are relative to where the sweep was started
            "emulation": None if emulation is None else {"prefix": emulation.prefix, "hosts": emulation.hosts,
                                                          "cpu_count": os.cpu_count()},
        }
        progress.note(f"running {len(todo)} trial(s) of {sweep.name}; results in {results}")
        tuner = tune.Tuner(
            tune.with_resources(_run_trial, {"cpu": _TRIAL_CPUS}),
            param_space={"trial": tune.grid_search(todo), "run": run},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent_trials or sweep.max_concurrent_trials,
                trial_name_creator=_trial_dirname,
                trial_dirname_creator=_trial_dirname,
                # Every trial is the same light function: a finished trial's process runs the next
                # one instead of a new process importing Ray Tune, Ray Train and torch (~6 s on 2 cores).
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=f"tune-{stamp}",
                storage_path=str(results / "ray"),
                callbacks=[_recorder(results, progress, emulation, refresh)],
                verbose=0,  # our Progress prints one line per event instead
            ),
        )
        tuner.fit()
    finally:
        ray.shutdown()
    unfinished = len([t for t in todo if t["trial_id"] not in finished_ids(results)])
    if unfinished:
        progress.note(f"interrupted: {unfinished} trial(s) not finished; to run them: "
                      f"lowprec run {sweep.path} --results {results} --resume")
    return results, unfinished


def trial_dirname(trial: dict[str, Any]) -> str:
    """A folder name for a trial: its label with anything but letters, digits, '.', '_', '=' and '-'
    replaced, capped in length, and made unique by its trial_id (the full settings are in its record)."""
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", trial["name"]).strip("._")[:80]
    return f"{safe}-{trial['trial_id']}" if safe else trial["trial_id"]


def _calibrate(emulation: Cluster, todo: list[dict[str, Any]], progress: Progress) -> None:
    """Calibrate each bandwidth the trials need that has no calibration yet, then shape the links to
    the first trial's (while no trial runs: a calibration saturates the links)."""
    needed = list(dict.fromkeys(t["bandwidth"] for t in todo if t["bandwidth"] is not None))
    unshaped = emulation.calibrations.get("unshaped", {}).get("measured_bps")
    for rate in needed:
        if rate not in emulation.calibrations:
            found = emulation.shape(rate, recalibrate=True)
            progress.note(f"links at {rate}: calibrated {found['measured_bps'] / 1e6:.1f} Mbit/s "
                          f"({found['fraction']:.3f} of the rate)")
        if unshaped is not None and unshaped < HEADROOM * rate_bps(rate):
            progress.note(f"warning: unshaped, the links carried {unshaped / 1e9:.2f} Gbit/s, less than "
                          f"{HEADROOM:g}x {rate}: at {rate} the machine, not the links, may set the pace")
    if needed and emulation.bandwidth != needed[0]:
        emulation.shape(needed[0])


def _start_ray(address: str | None, cluster: dict[str, Any], emulation: Cluster | None = None) -> None:
    """Join ``address`` (or RAY_ADDRESS, set by ``ray job submit``), else start a local Ray that
    listens on 127.0.0.1 only. Call before anything imports ray (the local address is read then).
    On an emulated cluster, wait until every host's node is alive."""
    os.environ.update(_RAY_ENV)
    # Old Tune output engine: it honours verbose=0 (the new one still prints boxes).
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        # Ray's node address is the loopback one where Ray clusters are off (as on macOS): then
        # every server of a local Ray, its metrics endpoints too, listens on 127.0.0.1 only.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    # Workers must import this checkout of the project (also where it is not pip-installed).
    package_root = str(Path(__file__).resolve().parent.parent)
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env_vars = {**_RAY_ENV, "PYTHONPATH": python_path}
    if emulation is not None:
        env_vars.update({key: value for key, value in emulation.env().items() if key != "RAY_ADDRESS"})
    if cluster["placement_timeout_s"] is not None:  # read by Ray Train's controller
        env_vars["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = str(cluster["placement_timeout_s"])
    runtime_env = {"env_vars": env_vars}
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        if emulation is not None:
            _wait_for_nodes(emulation.hosts)
    else:
        ray.init(
            address="local",  # a new Ray even where `ray start` left a cluster address behind
            object_store_memory=_OBJECT_STORE_BYTES,
            include_dashboard=_dashboard_installed(),
            dashboard_host="127.0.0.1",
            runtime_env=runtime_env,
            log_to_driver=False,  # worker logs stay in the Ray session's log folder
        )


def _wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Nodes started just before may take a moment to register with the head."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while (alive := sum(node["Alive"] for node in ray.nodes())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {alive} of the emulated cluster's {count} Ray nodes are alive after "
                               f"{timeout_s:g} s: see `lowprec cluster status`")
        time.sleep(0.2)


def _dashboard_installed() -> bool:
    """ray[default] brings the dashboard's web server packages."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("aiohttp", "aiohttp_cors"))


def _trial_name(trial: Any) -> str:
    return trial.config["trial"]["name"]


def _trial_dirname(trial: Any) -> str:
    return trial_dirname(trial.config["trial"])


def _run_trial(config: dict[str, Any]) -> None:
    """The Tune trial: fit one TorchTrainer for one grid point (exceptions fail the trial)."""
    from ray.train import ControllerError, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trial, run = config["trial"], config["run"]
    cluster = run["cluster"]
    settings = training_settings(trial)
    if settings["data_dir"] is not None:
        settings["data_dir"] = os.path.join(run["cwd"], settings["data_dir"])
    resources = {"CPU": cluster["cpus_per_worker"]}
    if cluster["use_gpu"]:
        resources["GPU"] = cluster["gpus_per_worker"]
    threads = None
    if run["emulation"] is not None:
        resources[HOST_RESOURCE] = 1
        # An emulated host is a fixed share of this machine's cores, whatever the trial's worker count:
        # a one-worker trial then measures the device every host of a larger trial has.
        threads = max(1, run["emulation"]["cpu_count"] // run["emulation"]["hosts"])
        _shape_for(trial, run["emulation"]["prefix"])
    problem = placement_problem(trial["num_workers"], resources, _node_resources())
    if problem:
        raise Unplaceable(problem)
    backend = cluster["backend"]
    if backend == "auto":
        backend = "nccl" if cluster["use_gpu"] else "gloo"
    trainer = TorchTrainer(
        _train_worker,
        train_loop_config={"settings": settings, "sweep": run["sweep"], "trial": trial["name"], "threads": threads},
        scaling_config=ScalingConfig(num_workers=trial["num_workers"], use_gpu=cluster["use_gpu"],
                                     resources_per_worker=resources),
        run_config=RunConfig(
            name=trial_dirname(trial),  # the run's name on the dashboard's Train page, and its folder
            storage_path=run["storage_path"],
            # A placement that times out fails the trial instead of being retried forever.
            failure_config=FailureConfig(
                max_failures=cluster["max_failures"],
                controller_failure_limit=-1 if cluster["placement_timeout_s"] is None else 0),
            callbacks=[TuneReportCallback()],
        ),
        torch_config=TorchConfig(backend=backend),
    )
    try:
        trainer.fit()
    except ControllerError as error:
        # Ray's message advises an environment variable; the setting here is placement_timeout_s.
        if type(error.controller_failure).__name__ == "WorkerGroupStartupTimeoutError":
            raise Unplaceable(
                f"the {trial['num_workers']} worker(s) were not placed within placement_timeout_s = "
                f"{cluster['placement_timeout_s']:g} s: the resources they need stayed taken (by other "
                "trials, or outside this sweep); raise placement_timeout_s, set it to null, or lower "
                "max_concurrent_trials") from None
        raise


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
                resources["CPU"] = resources.get("CPU", 0.0) - _TRIAL_CPUS
            nodes.append(resources)
    return nodes


def _train_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the training loop, reporting each epoch to Tune and the dashboard."""
    import ray.train
    import torch.distributed as dist

    from .gauges import StepGauges
    from .train_loop import train

    # metrics are rank-aggregated by the loop; rank 0 alone feeds the gauges
    gauges = StepGauges(config["sweep"], config["trial"]) if ray.train.get_context().get_world_rank() == 0 else None

    def report(metrics: dict[str, Any]) -> None:
        if gauges is not None:
            gauges.update(metrics)
        ray.train.report({"epoch_metrics": metrics})

    # Each start of the worker group (the first, and each restart under max_failures) says so
    # first: its epochs replace those of the attempt before.
    ray.train.report({"attempt_started": True})
    # Where the workers ran: the record shows whether a trial's workers shared a node.
    node_ips = [ray.util.get_node_ip_address()]
    if dist.is_initialized():
        node_ips = node_ips * dist.get_world_size()
        dist.all_gather_object(node_ips, ray.util.get_node_ip_address())
    outcome = train(config["settings"], report=report, threads=config["threads"])
    # One string: Tune's loggers take scalars and dicts, not lists.
    ray.train.report({"outcome": {**{key: outcome[key] for key in ("status", "reason", "model_summary")},
                                  "worker_node_ips": " ".join(node_ips)}})


def _recorder(results: Path, progress: Progress, emulation: Cluster | None = None,
              refresh: Callable[[Path], Any] | None = None) -> Any:
    """A Tune callback that keeps each trial's epochs and writes its record when it ends, with the
    calibration of its links on an emulated cluster."""
    from ray import tune

    class Recorder(tune.Callback):
        def __init__(self) -> None:
            self.history: dict[str, list[dict[str, Any]]] = {}
            self.attempts: dict[str, int] = {}
            self.outcome: dict[str, dict[str, Any]] = {}

        def on_trial_start(self, iteration, trials, trial, **info):
            self.history[trial.trial_id] = []
            self.attempts[trial.trial_id] = 0
            progress.started(_trial_name(trial))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("attempt_started"):
                self.attempts[trial.trial_id] += 1
                if self.history[trial.trial_id]:
                    progress.note(f"{_trial_name(trial)}: workers restarted (attempt "
                                  f"{self.attempts[trial.trial_id]}); its epochs start again")
                self.history[trial.trial_id] = []
            if "epoch_metrics" in result:
                self.history[trial.trial_id].append(result["epoch_metrics"])
                progress.epoch(_trial_name(trial), result["epoch_metrics"], trial.config["trial"]["epochs"])
            if "outcome" in result:
                self.outcome[trial.trial_id] = result["outcome"]

        def on_trial_complete(self, iteration, trials, trial, **info):
            outcome = self.outcome.get(trial.trial_id, {
                "status": "failed", "reason": "the trial ended without the training loop's outcome"})
            self._finish(trial, outcome["status"], outcome["reason"], outcome.get("model_summary"),
                         outcome.get("worker_node_ips", "").split() or None)

        def on_trial_error(self, iteration, trials, trial, **info):
            self._finish(trial, "failed", _error_reason(trial))
            progress.note(f"traceback of {_trial_name(trial)}: {trial.error_file}")

        def _finish(self, trial, status: str, reason: str | None, model_summary: dict | None = None,
                    worker_node_ips: list[str] | None = None) -> None:
            history = self.history.pop(trial.trial_id, [])
            attempts = self.attempts.pop(trial.trial_id, 0)
            write_record(results, make_record(trial.config["trial"], status, reason, history, model_summary,
                                              attempts=attempts, worker_node_ips=worker_node_ips,
                                              link=_link(emulation, trial.config["trial"])))
            progress.finished_trial(_trial_name(trial), status, reason, history)
            if refresh is None:
                return
            try:
                refresh(results)
            except Exception as error:  # keep the sweep running; the record is safe on disk
                progress.note(f"warning: could not rebuild the tables yet: {error!r}")

    return Recorder()


def _link(emulation: Cluster | None, trial: dict[str, Any]) -> dict[str, Any] | None:
    """The links a trial ran over: their rate and its calibration (None off an emulated cluster)."""
    if emulation is None:
        return None
    rate = trial["bandwidth"] or emulation.bandwidth
    calibration = emulation.calibrations.get(rate, {})
    return {"hosts": emulation.hosts, "bandwidth": rate, "calibrated_bps": calibration.get("measured_bps"),
            "calibrated_latency_s": calibration.get("latency_s")}


def _error_reason(trial: Any) -> str:
    """The last line of the trial's traceback (Tune writes it before calling back): the exception."""
    path = Path(trial.error_file) if trial.error_file else None
    text = path.read_text() if path and path.is_file() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "the trial failed without an error message"


class _NoTuneResumeAdvice(logging.Filter):
    """After an interrupt Tune advises ``Tuner.restore(...)``; this tool resumes with ``--resume``
    (run_sweep says so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tuner.restore(" not in record.getMessage()


class _NoTrialTracebacks(logging.Filter):
    """Tune logs every failed trial's full traceback; Progress prints its reason and error file."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Trial task failed")
