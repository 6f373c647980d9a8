"""Train workers that outlive a trial: a gang of Ray actors, one per rank, kept for the next trial of its shape.

Starting a worker process costs seconds of imports (torch, torch._dynamo, which DDP's constructor
imports, the Numba kernels); a sweep of short trials would spend most of its time there. So a Tune
trial takes its workers from a ``Pool`` in its own process (Tune reuses that process from trial to
trial): a ``Gang`` of ``num_workers`` ``TrialWorker`` actors in one placement group, kept idle after a
trial and given to the next trial that asks for as many workers or fewer with the same resources (a
trial of fewer workers runs on the gang's first ranks; the others wait), so a sweep over 1 and 2
workers starts 2 worker processes, not 3. Each trial still gets a process group of its own (a fresh
rendezvous on rank 0's host), its own environment variables, threads and seed; a gang whose trial
failed in any way is killed, never reused.

Placement is Ray Train's (2.60): one placement group of ``num_workers`` identical bundles, PACK
(as few nodes as hold them); the workers grouped by node in the order the nodes first appear among
the bundles, ranks numbered in that order, so the ranks of one host are consecutive; ``RANK``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set as
torchrun and Ray Train set them. Workers of one node with GPUs see all of that node's gang GPUs,
``LOCAL_RANK`` picking theirs, as Ray Train arranges for NCCL.
"""
from __future__ import annotations

import datetime
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .failures import death_reason, reason_of

# Ray Train's default: a collective that waits longer than this on a stuck peer fails the trial.
_PROCESS_GROUP_TIMEOUT_S = 1800
_AT_ONCE_S = 1.0  # a placement group that free resources can hold is placed well within this
_DRAIN_S = 10.0  # rank 0's last reports after another rank failed: its next collective fails within this


class PlacementTimeout(RuntimeError):
    """The gang's placement group was not placed in time."""


class WorkerFailure(RuntimeError):
    """A rank of the gang failed (raised, or its process died); the gang is gone. ``reason``: the error's type
    and first line, or how the worker died; ``detail``: the worker's whole traceback, or Ray's account."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class TrialTimeout(RuntimeError):
    """A trial's workers passed a time limit (the start-up's, or the trial's); the gang is gone."""


@ray.remote
class TrialWorker:
    """One rank: runs ``orchestrator.study.train_loop.train`` for each trial it is given."""

    def __init__(self) -> None:
        # What every trial needs, once per process: the training loop with the compressors and
        # workloads it imports, and torch._dynamo, which DDP's constructor imports.
        import torch._dynamo  # noqa: F401

        from . import train_loop  # noqa: F401

    def warm(self, codecs: list[tuple[str, dict[str, Any], str]]) -> None:
        """Load the kernels of these (compressor, params, impl) on the CPU, as a Reducer does before its
        first step, so that no trial waits for them. One that cannot be made is left to its trial,
        which says why."""
        import compressors

        for name, params, impl in codecs:
            try:
                compressors.get(name, impl=impl, **params).warm_up("cpu")
            except Exception:  # noqa: BLE001 - the trial reports it
                continue

    def where(self) -> tuple[str, str, list[str]]:
        """This worker's node id, node address and GPU ids."""
        return (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(),
                [str(i) for i in ray.get_gpu_ids()])

    def see_gpus(self, visible: list[str]) -> None:
        """Make the GPUs of the node's gang visible, before CUDA starts."""
        if visible:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible)

    def free_port(self) -> int:
        """A port free on this node now, for the trial's rendezvous."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def run(self, env: dict[str, str], backend: str, config: dict[str, Any], sweep: str, trial: str,
            threads: int | None) -> Iterator[dict[str, Any]]:
        """Join the trial's process group and train; yields rank 0's reports (each epoch's
        ``epoch_metrics``, then the ``outcome``), nothing on the other ranks. Raises what training raised."""
        import torch.distributed as dist

        from .gauges import StepGauges
        from .train_loop import train

        os.environ.update(env)
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        dist.init_process_group(backend, init_method=f"tcp://{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=_PROCESS_GROUP_TIMEOUT_S))
        reports: queue.Queue = queue.Queue()
        gauges = StepGauges(sweep, trial) if rank == 0 else None

        def report(metrics: dict[str, Any]) -> None:
            if gauges is not None:
                gauges.update(metrics)
                reports.put({"epoch_metrics": metrics})

        def started() -> None:  # the first step done: the start-up's limit no longer applies
            if rank == 0:
                reports.put({"started": True})

        def work() -> None:
            try:
                # Where the workers ran: the record shows whether a trial's workers shared a node.
                node_ips = [ray.util.get_node_ip_address()] * world
                dist.all_gather_object(node_ips, ray.util.get_node_ip_address())
                outcome = train(config, report=report, threads=threads, started=started)
                # One string each: Tune's loggers take scalars and dicts, not lists.
                reports.put({"outcome": {**{key: outcome[key] for key in ("status", "reason", "model_summary")},
                                         "worker_node_ips": " ".join(node_ips),
                                         "sources": json.dumps(outcome["sources"]),
                                         "step_times_s": json.dumps(outcome["step_times_s"])}})
            except BaseException as error:  # handed to the task, which raises it
                reports.put(error)

        # Training runs beside this generator so that each epoch's report leaves as it happens.
        thread = threading.Thread(target=work, name="train", daemon=True)
        thread.start()
        try:
            while True:
                item = reports.get()
                if isinstance(item, BaseException):
                    raise item
                if rank == 0:
                    yield item
                if "outcome" in item:
                    break
        finally:
            thread.join()
            dist.destroy_process_group()


class Gang:
    """``num_workers`` TrialWorkers in one placement group, in rank order (``ready`` puts them in order)."""

    def __init__(self, num_workers: int, resources: dict[str, float], timeout_s: float | None,
                 make_room: Callable[[], bool] = lambda: False) -> None:
        """Place the group and start the workers (their imports run on; ``ready`` waits for them).
        ``make_room()`` frees resources (idle gangs) where the group is not placed at once; it says
        whether it freed any. PlacementTimeout where it is not placed within ``timeout_s``."""
        bundle = {name: amount for name, amount in resources.items() if amount > 0}
        self.resources = dict(resources)
        self.group = placement_group([bundle] * num_workers, strategy="PACK")
        self.actors: list[Any] = []
        self.where: list[tuple[str, str, list[str]]] = []  # each rank's node id, node address and GPU ids
        try:
            ready = self.group.ready()
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            placed = bool(ray.wait([ready], timeout=min(_AT_ONCE_S, timeout_s or _AT_ONCE_S))[0])
            if not placed and make_room():
                placed = bool(ray.wait([ready], timeout=_AT_ONCE_S)[0])
            if not placed:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not ray.wait([ready], timeout=left)[0]:
                    raise PlacementTimeout(f"not placed within {timeout_s:g} s")
            options = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0),
                       "resources": {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}}
            self.actors = [TrialWorker.options(**options, scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=i)).remote() for i in range(num_workers)]
        except BaseException:
            self.kill()
            raise

    def ready(self) -> "Gang":
        """Wait for the workers; number them as Ray Train does (nodes in the order they first appear
        among the bundles, the workers of a node together)."""
        if self.where:
            return self
        try:
            where = ray.get([a.where.remote() for a in self.actors])
            nodes = list(dict.fromkeys(node for node, _, _ in where))
            order = sorted(range(len(where)), key=lambda i: (nodes.index(where[i][0]), where[i][2], i))
            self.actors = [self.actors[i] for i in order]
            where = [where[i] for i in order]
            visible = {node: [g for w in where if w[0] == node for g in w[2]] for node in nodes}
            ray.get([a.see_gpus.remote(visible[w[0]]) for a, w in zip(self.actors, where)])
        except BaseException:
            self.kill()
            raise
        self.where = where
        return self

    @property
    def size(self) -> int:
        return len(self.actors)

    def environments(self, num_workers: int) -> list[dict[str, str]]:
        """The environment of each of the first ``num_workers`` ranks, for a trial of that many workers."""
        where = self.where[:num_workers]
        nodes = list(dict.fromkeys(node for node, _, _ in where))
        env = []
        for rank, (node, _, _) in enumerate(where):
            peers = [i for i, w in enumerate(where) if w[0] == node]
            env.append({"RANK": str(rank), "WORLD_SIZE": str(len(where)),
                        "LOCAL_RANK": str(peers.index(rank)), "LOCAL_WORLD_SIZE": str(len(peers)),
                        "NODE_RANK": str(nodes.index(node)), "MASTER_ADDR": where[0][1]})
        return env

    def run(self, num_workers: int, backend: str, config: dict[str, Any], sweep: str, trial: str,
            threads: int | None, limits: Limits | None = None) -> Iterator[dict[str, Any]]:
        """Run one trial on the first ``num_workers`` ranks; yields rank 0's reports. WorkerFailure (the
        gang killed) where a rank fails, with the first failure's error as its cause; TrialTimeout (the gang
        killed) where one of ``limits`` passes."""
        port = ray.get(self.actors[0].free_port.remote())
        streams = [a.run.options(num_returns="streaming").remote({**env, "MASTER_PORT": str(port)}, backend,
                                                                  config, sweep, trial, threads)
                   for a, env in zip(self.actors, self.environments(num_workers))]
        pending = list(streams)
        failure, failed = None, None
        limits = limits or Limits()
        limits.begin()
        try:
            while pending:
                ready, _ = ray.wait(pending, num_returns=1, timeout=limits.left())
                if not ready:
                    self.kill()
                    raise TrialTimeout(limits.passed())
                stream = ready[0]
                try:
                    item = ray.get(next(stream))
                except StopIteration:
                    pending.remove(stream)
                    continue
                if item.get("started"):
                    limits.started = True
                    continue
                yield item
        except ray.exceptions.RayError as error:
            failure, failed = error, stream
        if failure is None:
            return
        if failed is not streams[0] and streams[0] in pending:
            yield from _drain(streams[0])
        self.kill()
        raise _failure(failure, streams.index(failed))

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.group)


class Limits:
    """A trial's time limits: the start-up's (from each start of its workers to the end of the first step) and
    the whole trial's (from its first start, restarts included); None: no limit."""

    def __init__(self, startup_s: float | None = None, trial_s: float | None = None) -> None:
        self.startup_s, self.trial_s = startup_s, trial_s
        self.deadline = None if trial_s is None else time.monotonic() + trial_s
        self.begin()

    def begin(self) -> None:
        """The workers start (again): the start-up's limit runs from now."""
        self.started = False
        self.startup = None if self.startup_s is None else time.monotonic() + self.startup_s

    def left(self) -> float | None:
        """Seconds until the nearest limit (None: none applies)."""
        ends = [t for t in (None if self.started else self.startup, self.deadline) if t is not None]
        return max(0.0, min(ends) - time.monotonic()) if ends else None

    def passed(self) -> str:
        """Which limit passed, as a trial's reason."""
        if not self.started and self.startup is not None and (self.deadline is None or self.startup <= self.deadline):
            return (f"the first training step was not done within startup_timeout_s = {self.startup_s:g} s of the "
                    "workers' start (building the data and model, or the first step, took longer or hung)")
        return f"the trial ran past trial_timeout_s = {self.trial_s:g} s"


def _failure(error: Exception, rank: int) -> WorkerFailure:
    """A rank's error as a WorkerFailure: the user's exception in its own words with the worker's traceback,
    or how the worker died."""
    if isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        failure = WorkerFailure(reason_of(error.cause), str(error))
        failure.__cause__ = error.cause
        return failure
    if isinstance(error, (ray.exceptions.ActorDiedError, ray.exceptions.OutOfMemoryError,
                          ray.exceptions.WorkerCrashedError)):
        return WorkerFailure(death_reason(str(error), rank), str(error))
    return WorkerFailure(reason_of(error), str(error))


def _drain(stream: Any) -> Iterator[dict[str, Any]]:
    """Rank 0's reports still on their way when another rank failed, until rank 0 fails or ends too (its peer
    gone, its next collective fails), at most ``_DRAIN_S``. Rank 0 reports an epoch after the evaluation all
    ranks share, so another rank may fail in the next epoch before that report arrives."""
    deadline = time.monotonic() + _DRAIN_S
    while (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait([stream], num_returns=1, timeout=left)
        if not ready:
            return
        try:
            item = ray.get(next(stream))
        except (StopIteration, ray.exceptions.RayError):
            return
        yield item


class Pool:
    """Idle gangs of this process, one per shape, for the next trials of that shape or fewer workers."""

    def __init__(self) -> None:
        self.idle: dict[tuple, Gang] = {}
        self.prepared = False  # prepare runs once: later shapes come as they are needed

    @staticmethod
    def _shape(num_workers: int, resources: dict[str, float]) -> tuple:
        return num_workers, tuple(sorted(resources.items()))

    def prepare(self, counts: list[int], resources: dict[str, float],
                codecs: list[tuple[str, dict[str, Any], str]]) -> None:
        """Start a gang for the largest of these worker counts (it serves the smaller ones too), else
        for the largest the free resources hold at once, with the kernels of ``codecs`` loaded
        (TrialWorker.warm); wait until it is ready."""
        self.prepared = True
        for count in sorted(set(counts), reverse=True):
            if self._fitting(count, resources) is not None:
                return
            try:
                gang = Gang(count, resources, timeout_s=_AT_ONCE_S).ready()
            except PlacementTimeout:
                continue
            self.idle[self._shape(count, resources)] = gang
            ray.get([actor.warm.remote(codecs) for actor in gang.actors])
            return

    def _fitting(self, num_workers: int, resources: dict[str, float]) -> tuple | None:
        """The shape of the smallest idle gang of these resources with at least ``num_workers`` workers."""
        resources_key = self._shape(num_workers, resources)[1]
        shapes = [shape for shape in self.idle if shape[1] == resources_key and shape[0] >= num_workers]
        return min(shapes, default=None)

    def take(self, num_workers: int, resources: dict[str, float], timeout_s: float | None) -> Gang:
        """The smallest idle gang of these resources with at least ``num_workers`` workers (a trial runs on
        its first ranks: Gang.run), else a new one (the idle gangs are killed where they hold resources it
        needs). PlacementTimeout where it cannot be placed in ``timeout_s``."""
        shape = self._fitting(num_workers, resources)
        if shape is not None:
            return self.idle.pop(shape)
        return Gang(num_workers, resources, timeout_s, make_room=self.clear).ready()

    def give_back(self, gang: Gang) -> None:
        self.idle[self._shape(gang.size, gang.resources)] = gang

    def clear(self) -> bool:
        """Kill the idle gangs; whether there were any."""
        had = bool(self.idle)
        for gang in self.idle.values():
            gang.kill()
        self.idle.clear()
        return had


POOL = Pool()
