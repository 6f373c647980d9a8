"""End-to-end sweeps (orchestrator/study/runner.py) on a local Ray through the command line (CPU, gloo;
about 5 minutes on 2 cores).

One tiny sweep of three 2-worker trials runs twice: the driver is killed after
the first trial's record appears, then ``--resume`` finishes the rest. One
trial raises at epoch 2 (``fail_at_epoch``), is restarted once
(``max_failures: 1``), and must be recorded as failed after two attempts while
the others finish. Others check that unplaceable trials fail with their
reason, and that a local run listens on loopback only and answers an interrupt
with this tool's resume advice (``ray job submit``: tests/orchestrator/test_job_submit.py).

Every Ray process runs with HOME in a temporary folder, so a token in the
user's ``~/.ray/auth_token`` (Ray 2.60 token authentication) plays no part; the
Numba kernels' cache stays the one of the process running the tests.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.results.tables import RESULT_COLUMNS
from tests.helpers import ROOT, numba_cache_dir

TIMEOUT_S = 300
# The ray CLI of the Python running the tests, whatever PATH says.
RAY = str(Path(sys.executable).parent / "ray")
pytestmark = pytest.mark.slow

TINY = """\
# three tiny trials on two workers; the onebit one fails on purpose in epoch 2, in both attempts
name: tiny
workload: {dataset: mnist, model: mlp, width: 16, depth: 1, epochs: 2, batch_size: 32,
           lr: 0.1, target_accuracy: 0.3, max_steps_per_epoch: 10}
cluster: {cpus_per_worker: 0.49, max_failures: 1}
baselines: false
sweep:
  num_workers: 2
  compressor: [fp32, {name: qsgd, bits: 4}, {name: onebit, workload: {fail_at_epoch: 2}}]
"""


def ray_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0",
               NUMBA_CACHE_DIR=numba_cache_dir())
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Run TINY, kill the driver after the first record, resume; returns (results, first record, logs)."""
    tmp = tmp_path_factory.mktemp("sweep")
    sweep_file = tmp / "tiny.yaml"
    sweep_file.write_text(TINY)
    env = ray_env(tmp / "home")
    results = tmp / "results" / "tiny"
    log = (tmp / "first.log").open("w")
    driver = subprocess.Popen(cli("run", str(sweep_file), "--results", str(results)),
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    started: dict[int, str] = {}  # every process below the driver (its Ray), with its start time

    def first_record() -> bool:
        started.update(_started_below(driver.pid))
        return any((results / "trials").glob("*.json")) or driver.poll() is not None

    try:
        wait_for(first_record, TIMEOUT_S, "the first trial record")
        started.update(_started_below(driver.pid))
        driver.send_signal(signal.SIGKILL)  # no chance to clean up: as if the machine lost the driver
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
        # Ray ends most of the killed driver's processes itself within a second or two; its dashboard and
        # runtime_env agents were still running 40 s later, beside the tests that follow.
        _end_left(started)
    (first,) = [json.loads(p.read_text()) for p in (results / "trials").glob("*.json")]
    again = subprocess.run(cli("run", str(sweep_file), "--results", str(results), "--resume"),
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return results, first, (tmp / "first.log").read_text(), again


def test_resume_runs_only_the_unfinished_trials(resumed):
    results, first, first_log, again = resumed
    assert again.returncode == 0, again.stdout + again.stderr
    assert "running 2 trial(s) of tiny" in again.stdout
    assert "Failed to fetch metrics" not in again.stdout + again.stderr  # Tune's files are off, and so its warning
    assert f"{first['name']}: started" not in again.stdout
    records = [json.loads(p.read_text()) for p in (results / "trials").glob("*.json")]
    assert len(records) == 3
    assert [r for r in records if r["trial_id"] == first["trial_id"]] == [first]  # untouched


def test_every_results_file_with_one_row_per_trial(resumed):
    results = resumed[0]
    for name in ("trials.csv", "trials.parquet", "history.csv", "summary.md", "sweep.yaml", "environment.json",
                 "plots/answer.png", "plots/accuracy_vs_time.png", "plots/bytes_sent.png",
                 "plots/speedup_vs_workers.png", "plots/step_time_breakdown.png"):
        assert (results / name).is_file(), name
    trials = pd.read_csv(results / "trials.csv")
    assert len(trials) == 3 and trials.trial_id.is_unique
    assert {"trial_id", "name", "status", "reason", "compressor", "bits", "num_workers", "seed",
            *RESULT_COLUMNS} <= set(trials.columns)
    assert len(pd.read_parquet(results / "trials.parquet")) == 3
    history = pd.read_csv(results / "history.csv")
    assert sorted(history.groupby("name").size().tolist()) == [1, 2, 2]  # the failed trial ran 1 epoch
    environment = json.loads((results / "environment.json").read_text())
    assert environment["ray"] and environment["torch"] and environment["cpu_count"] >= 1


def test_values_are_sensible(resumed):
    trials = pd.read_csv(resumed[0] / "trials.csv").set_index("compressor")
    ok = trials[trials.status == "ok"]
    assert sorted(ok.index) == ["fp32", "qsgd"]
    assert ok.final_accuracy.between(0, 1).all() and ok.best_accuracy.between(0, 1).all()
    assert (ok.bytes_sent > 0).all() and (ok.train_time_s > 0).all() and (ok.step_time_s > 0).all()
    # mlp width 16, depth 1 on MNIST: only the 784x16 weight has >= 1024 elements.
    assert ok.parameters.tolist() == [784 * 16 + 16 + 16 * 10 + 10] * 2
    assert ok.compressible_share.tolist() == pytest.approx([784 * 16 / (784 * 16 + 16 + 16 * 10 + 10)] * 2)
    assert ok.epochs_run.tolist() == [2, 2]
    assert trials.loc["fp32", "speedup_vs_fp32"] == 1.0
    assert trials.loc["qsgd", "speedup_vs_fp32"] > 0
    # 4-bit QSGD sends several times fewer bytes than the fp32 allreduce
    assert trials.loc["qsgd", "bytes_sent"] < trials.loc["fp32", "bytes_sent"] / 2
    assert trials.loc["qsgd", "compression_ratio"] > 2


def test_a_raising_trial_is_recorded_as_failed_while_the_others_finish(resumed):
    results, _, _, again = resumed
    trials = pd.read_csv(results / "trials.csv").set_index("compressor")
    assert trials.loc["onebit", "status"] == "failed"
    assert "fail_at_epoch=2" in trials.loc["onebit", "reason"]
    assert trials.loc["onebit", "epochs_run"] == 1  # the second attempt's epoch 1, not both attempts'
    assert trials.loc["onebit", "attempts"] == 2
    assert trials.loc["fp32", "attempts"] == 1 and trials.loc["qsgd", "attempts"] == 1
    assert "FAILED" in again.stdout and "done 3/3" in again.stdout
    assert "fail_at_epoch=2" in (results / "summary.md").read_text()


# One run of a sweep on a local Ray for two tests: its 1-worker trials never end (1000 epochs), so one is
# placed and trains until the interrupt; of the two 1-worker trials running at once, the other waits for
# its 1.5 CPUs beyond placement_timeout_s (when the placed trial ended after 5 steps, within the other's
# 2 s wait on a quiet machine, both were placed in turn).
PLACEMENT = """\
name: place
workload: {dataset: synthetic, model: mlp, width: 16, depth: 1, epochs: 1000, batch_size: 32, num_samples: 32000,
           lr: 0.01, target_accuracy: 0.3, max_steps_per_epoch: 1000}
cluster: {cpus_per_worker: 1.5, placement_timeout_s: 2}
max_concurrent_trials: 2
baselines: false
sweep:
  compressor: [fp32, fp16]
  num_workers: [1, 2]
"""
EPOCH = re.compile(r"\] (.+?): epoch (\d+)/1000 ")


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (Ray's GCS, raylet, dashboard and workers of a local run)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def _start_time(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _started_below(pid: int) -> dict[int, str]:
    """Each process below ``pid``: its start time (to tell it from a later process with the same PID)."""
    return {p: t for p in _descendants(pid) - {pid} if (t := _start_time(p)) is not None}


def _end_left(started: dict[int, str], grace_s: float = 1.0) -> None:
    """SIGKILL to those of ``started`` still running after ``grace_s`` (the same processes: same start time)."""
    deadline = time.monotonic() + grace_s
    while (left := [p for p, t in started.items() if _start_time(p) == t and not _zombie(p)]) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _listening(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process name) of each TCP socket the processes ``pids`` listen on (from `ss`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [(line.split()[3], line.split('(("', 1)[1].split('"', 1)[0]) for line in out.splitlines()
            if any(f"pid={pid}," in line for pid in pids)]


def _prometheus_text(addresses: list[str]) -> str:
    """The Prometheus page of whichever of ``addresses`` serves one with our gauges, else ""."""
    for address in addresses:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as response:
                text = response.read().decode(errors="replace")
        except (OSError, ValueError, http.client.HTTPException):  # a gRPC port, say
            continue
        if "ray_lowprec_" in text:
            return text
    return ""


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """PLACEMENT run until its three unplaceable trials have records and the placed one trained an epoch after
    them, then interrupted (SIGINT); the TCP addresses its processes listen on and the Prometheus page of its
    gauges, seen while the placed trial trained (None without /proc and ss)."""
    tmp = tmp_path_factory.mktemp("place")
    sweep_file = tmp / "place.yaml"
    sweep_file.write_text(PLACEMENT)
    results = tmp / "results"
    # Ray exports the gathered metrics every 0.5 s instead of its default 10 s: the gauges show sooner.
    env = {**ray_env(tmp / "home"), "RAY_metrics_report_interval_ms": "500"}
    driver = subprocess.Popen(cli("run", str(sweep_file), "--results", str(results)), cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, addresses, metrics = [], None, ""
    records = lambda: list((results / "trials").glob("*.json"))  # noqa: E731
    started: dict[int, str] = {}  # the driver's processes, ended by PID should the driver not end them
    try:
        placed = _next_epoch(driver, seen)  # the placed trial's first epoch: every Ray service is up by then
        started.update(_started_below(driver.pid))
        if Path("/proc").is_dir() and shutil.which("ss") is not None:
            addresses = _listening(_descendants(driver.pid))
            deadline = time.monotonic() + 60  # Ray's metrics agent exports what it gathered every few seconds
            while "ray_lowprec_step_time_s{" not in metrics and time.monotonic() < deadline:
                metrics = _prometheus_text([a for a, _ in addresses])
                time.sleep(0.5)
        wait_for(lambda: len(records()) >= 3 or driver.poll() is not None, TIMEOUT_S, "the three failures' records")
        assert len(records()) == 3 and driver.poll() is None, "".join(seen)
        # the sweep goes on: the placed trial trains on after the others failed
        assert _next_epoch(driver, seen) == placed, "".join(seen)
        driver.send_signal(signal.SIGINT)
        out = "".join(seen) + driver.communicate(timeout=120)[0]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
            _end_left(started)
    return sweep_file, results, placed, out, driver.returncode, addresses, metrics


def _next_epoch(driver: subprocess.Popen, seen: list[str]) -> str:
    """Read the driver's output up to its next epoch line; the trial's label."""
    for line in driver.stdout:
        seen.append(line)
        if match := EPOCH.search(line):
            return match.group(1)
    raise AssertionError("the driver ended before an epoch line:\n" + "".join(seen)[-3000:])


def test_unplaceable_trials_fail_with_their_reason_and_the_sweep_goes_on(interrupted):
    # 2 CPUs: a 2-worker trial can never be placed; of the two 1-worker trials running at once,
    # one waits for the other's 1.5 CPUs beyond placement_timeout_s.
    _, results, placed, out, _, _, _ = interrupted
    trials = pd.read_csv(results / "trials.csv")
    never = trials[trials.num_workers == 2]
    assert never.status.tolist() == ["failed", "failed"] and never.attempts.tolist() == [0, 0]
    assert never.reason.str.contains("cannot place 2 workers of {CPU 1.5} each", regex=False).all()
    (one,) = trials[trials.num_workers == 1].to_dict("records")  # the placed one was interrupted: no record
    assert one["status"] == "failed", one["reason"]
    assert "were not placed within placement_timeout_s = 2 s" in one["reason"]
    assert placed.startswith("fp32" if one["compressor"] == "fp16" else "fp16") and "num_workers=1" in placed


@pytest.mark.skipif(not Path("/proc").is_dir() or shutil.which("ss") is None, reason="needs /proc and ss")
def test_a_local_run_listens_on_loopback_only_and_an_interrupt_says_how_to_resume(interrupted):
    sweep_file, results, _, out, returncode, addresses, metrics = interrupted
    assert len(addresses) >= 3, addresses  # the GCS, the raylet, the metrics agent at least
    exposed = [(a, name) for a, name in addresses
               if a.rsplit(":", 1)[0] not in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")]
    # Ray's services all listen on loopback. The one exception is torch's: rank 0's TCPStore (the
    # process group's rendezvous, which rank 0's worker starts) listens on every interface whatever host
    # it is given (torch 2.13). Process names are cut at 15 characters.
    assert [name for _, name in exposed] in ([], ["ray::TrialWorke"]), exposed
    # the gauges, as Ray exports them, with their tags, on a loopback endpoint
    assert "ray_lowprec_step_time_s{" in metrics and 'sweep="place"' in metrics
    assert returncode == 1, out[-3000:]
    assert "Tuner.restore" not in out and "Target accuracy" not in out
    assert "interrupted: 1 trial(s) not finished" in out, out[-3000:]
    assert f"lowprec run {sweep_file} --results {results} --resume" in out, out[-3000:]
    # interrupted: the trial that was running has no record (resume runs it); the failed ones have theirs
    assert len(list((results / "trials").glob("*.json"))) == 3
