"""Workers that outlive a trial (orchestrator/study/gang.py) on a local Ray (CPU, gloo).

A gang serves trial after trial in the same processes, each trial in a process group of its own; a
gang whose trial failed is killed and never handed on; ranks get torchrun's environment.
"""
from __future__ import annotations

import os

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow

TINY = {"model": "mlp", "width": 8, "depth": 1, "dataset": "synthetic", "epochs": 2, "max_steps_per_epoch": 2,
        "compressor": "fp32", "target_accuracy": 0.1}


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray of 2 CPUs listening on loopback only, as the runner starts it."""
    before = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=128 * 1024**2, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()
    if before is None:
        os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    else:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = before


def _run(gang, config, num_workers=2):
    return list(gang.run(num_workers, "gloo", config, "sweep", "trial", 1))


def test_a_gang_serves_trials_in_turn_and_a_failed_one_is_never_handed_on(ray_local):
    from orchestrator.study.gang import Pool, WorkerFailure

    pool = Pool()
    resources = {"CPU": 0.5}
    gang = pool.take(2, resources, timeout_s=60)
    env = gang.environments(2)
    assert [e["RANK"] for e in env] == ["0", "1"] and [e["LOCAL_RANK"] for e in env] == ["0", "1"]
    assert {e["NODE_RANK"] for e in env} == {"0"} and {e["LOCAL_WORLD_SIZE"] for e in env} == {"2"}
    where = ray_local.get([a.where.remote() for a in gang.actors])
    first = _run(gang, TINY)
    # rank 0's reports only: each epoch, then the outcome
    assert [("epoch_metrics" in r, "outcome" in r) for r in first] == [(True, False), (True, False), (False, True)]
    assert first[-1]["outcome"]["status"] == "ok"
    assert first[-1]["outcome"]["worker_node_ips"].split() == [where[0][1]] * 2
    pool.give_back(gang)
    again = pool.take(2, resources, timeout_s=60)
    assert again is gang  # the same processes, a new process group
    second = _run(again, {**TINY, "compressor": "qsgd", "compressor_params": {"bits": 4}})
    assert second[-1]["outcome"]["status"] == "ok"
    assert [r["epoch_metrics"]["epoch"] for r in second[:-1]] == [1, 2]

    # A one-worker trial runs on the idle gang's rank 0, in a process group of its own of one rank.
    pool.give_back(again)
    alone = pool.take(1, resources, timeout_s=60)
    assert alone is gang and pool.idle == {}
    assert alone.environments(1) == [{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                                      "NODE_RANK": "0", "MASTER_ADDR": where[0][1]}]
    third = _run(alone, {**TINY, "compressor": "qsgd", "compressor_params": {"bits": 4}}, num_workers=1)
    assert third[-1]["outcome"]["status"] == "ok"
    assert third[-1]["outcome"]["worker_node_ips"].split() == [where[0][1]]
    assert third[-1]["outcome"]["model_summary"] == second[-1]["outcome"]["model_summary"]
    pool.give_back(alone)
    assert pool.take(2, resources, timeout_s=60) is gang  # back under its own shape

    with pytest.raises(WorkerFailure, match="fail_at_epoch=2") as failure:
        _run(again, {**TINY, "fail_at_epoch": 2})
    assert isinstance(failure.value.__cause__, RuntimeError)
    with pytest.raises(ray_local.exceptions.RayActorError):  # killed with its trial
        ray_local.get(again.actors[0].where.remote(), timeout=60)
    fresh = pool.take(1, resources, timeout_s=60)  # one worker: each costs seconds of imports to start
    assert fresh is not gang and _run(fresh, TINY, num_workers=1)[-1]["outcome"]["status"] == "ok"
    fresh.kill()


def test_a_gang_that_cannot_be_placed_in_time_says_so_and_idle_gangs_make_room(ray_local):
    from orchestrator.study.gang import Pool, PlacementTimeout

    pool = Pool()
    one = pool.take(1, {"CPU": 1.5}, timeout_s=30)
    pool.give_back(one)
    # 1.0 CPU fits only once the idle gang's 1.5 CPUs are free (of 2): the pool kills it to make room
    two = pool.take(1, {"CPU": 1.0}, timeout_s=30)
    assert pool.idle == {} and two is not one
    with pytest.raises(PlacementTimeout, match="not placed within 2 s"):  # beside the 1.0 CPU taken
        pool.take(1, {"CPU": 1.5}, timeout_s=2)
    two.kill()



BEHAVING = '''\
import os
import signal
import time


def behave(input_shape, num_classes, mode="hang"):
    if mode == "raise":
        raise ValueError("the layer sizes do not add up\\nsecond line")
    if mode == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)  # never returns in time
'''


def test_a_raising_a_dying_and_a_hanging_trial_fail_with_their_reasons(ray_local, tmp_path):
    from orchestrator.study.gang import Gang, Limits, TrialTimeout, WorkerFailure

    (tmp_path / "behave.py").write_text(BEHAVING)
    # A new gang for each trial (a failed one is killed), the three started at once: a worker's imports take
    # seconds of one core, and one after the other they left the second core idle.
    gangs = {mode: Gang(1, {"CPU": 0.5}, timeout_s=60) for mode in ("raise", "die", "hang")}

    def run(mode: str, limits: Limits | None = None) -> None:
        config = {**TINY, "model": f"{tmp_path / 'behave.py'}:behave", "model_options": {"mode": mode}}
        del config["width"], config["depth"]
        list(gangs[mode].ready().run(1, "gloo", config, "sweep", "trial", 1, limits))

    with pytest.raises(WorkerFailure) as raised:
        run("raise")
    # the user's exception in its own words; the worker's whole traceback, the user's frame in it
    assert raised.value.reason == "ValueError: the layer sizes do not add up"
    assert 'behave.py", line 8, in behave' in raised.value.detail
    with pytest.raises(WorkerFailure) as died:
        run("die")
    assert died.value.reason.startswith("the worker of rank 0 (pid ")
    assert "died without a Python error: killed (the kernel's OOM killer, a signal) or crashed" in died.value.reason
    with pytest.raises(TrialTimeout, match="the first training step was not done within startup_timeout_s = 3 s"):
        run("hang", Limits(startup_s=3.0))
    assert not (tmp_path / "__pycache__").exists()  # nothing written beside the user's file
