"""End-to-end sweeps on a local Ray through the command line (CPU, gloo; about 3 minutes on 2 cores).

One tiny sweep of three 2-worker trials runs twice: the driver is killed after
the first trial's record appears, then ``--resume`` finishes the rest. One
trial raises at epoch 2 (``fail_at_epoch``) and must be recorded as failed
while the others finish. A second test submits a one-trial sweep as a Ray job
to a cluster started with ``ray start --head``.

Every Ray process runs with HOME in a temporary folder, so a token in the
user's ``~/.ray/auth_token`` (Ray 2.60 token authentication) plays no part.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.tables import RESULT_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300
# The ray CLI of the Python running the tests, whatever PATH says.
RAY = str(Path(sys.executable).parent / "ray")
pytestmark = pytest.mark.slow

TINY = """\
# three tiny trials on two workers; the onebit one fails on purpose in epoch 2
name: tiny
workload: {dataset: mnist, model: mlp, width: 16, depth: 1, epochs: 2, batch_size: 32,
           lr: 0.1, target_accuracy: 0.3, max_steps_per_epoch: 10}
cluster: {cpus_per_worker: 0.49}
baselines: false
sweep:
  num_workers: 2
  compressor: [fp32, {name: qsgd, bits: 4}, {name: onebit, workload: {fail_at_epoch: 2}}]
"""


def ray_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
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
    try:
        wait_for(lambda: any((results / "trials").glob("*.json")) or driver.poll() is not None,
                 TIMEOUT_S, "the first trial record")
        driver.send_signal(signal.SIGKILL)  # no chance to clean up: as if the machine lost the driver
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    (first,) = [json.loads(p.read_text()) for p in (results / "trials").glob("*.json")]
    again = subprocess.run(cli("run", str(sweep_file), "--results", str(results), "--resume"),
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return results, first, (tmp / "first.log").read_text(), again


def test_resume_runs_only_the_unfinished_trials(resumed):
    results, first, first_log, again = resumed
    assert again.returncode == 0, again.stdout + again.stderr
    assert "running 2 trial(s) of tiny" in again.stdout
    assert f"{first['name']}: started" not in again.stdout
    records = [json.loads(p.read_text()) for p in (results / "trials").glob("*.json")]
    assert len(records) == 3
    assert [r for r in records if r["trial_id"] == first["trial_id"]] == [first]  # untouched


def test_every_results_file_with_one_row_per_trial(resumed):
    results = resumed[0]
    for name in ("trials.csv", "trials.parquet", "history.csv", "summary.md", "sweep.yaml", "environment.json",
                 "plots/accuracy_vs_time.png", "plots/speedup_vs_workers.png", "plots/step_time_breakdown.png"):
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
    assert trials.loc["onebit", "epochs_run"] == 1
    assert "FAILED" in again.stdout and "done 3/3" in again.stdout
    assert "fail_at_epoch=2" in (results / "summary.md").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_job_submit_to_a_running_cluster(tmp_path):
    sweep_file = tmp_path / "job.yaml"
    sweep_file.write_text(TINY.replace("name: tiny", "name: job").replace(
        "  compressor: [fp32, {name: qsgd, bits: 4}, {name: onebit, workload: {fail_at_epoch: 2}}]", "  compressor: [fp32]"))
    env = ray_env(tmp_path / "home")
    env["RAY_AUTH_MODE"] = "disabled"  # head and client agree: loopback only, no token
    gcs_port, dashboard = free_port(), f"http://127.0.0.1:{free_port()}"
    head_log = (tmp_path / "head.log").open("w")
    # --block keeps the head's processes ours: terminating it stops exactly this cluster
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={gcs_port}", f"--dashboard-port={dashboard.split(':')[-1]}",
         "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         # The agent's fixed default port (52365) may still be held by a Ray that an earlier test stopped.
         f"--dashboard-agent-listen-port={free_port()}"],
        env=env, stdout=head_log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _answers(f"{dashboard}/api/jobs/") or head.poll() is not None, 120, "the Ray head")
        assert head.poll() is None, (tmp_path / "head.log").read_text()
        command = [RAY, "job", "submit", "--address", dashboard, "--working-dir", str(ROOT), "--",
                   "python", "-m", "orchestrator", "run", str(sweep_file), "--results", str(tmp_path / "results" / "job")]
        for _ in range(10):  # the dashboard answers a few seconds before its job agent is up
            submit = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
            if "No available agent to submit job" not in submit.stderr + submit.stdout:
                break
            time.sleep(2)
    finally:
        head.terminate()
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            head.kill()
        head_log.close()
        _forget_cluster(gcs_port)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "succeeded" in submit.stdout + submit.stderr
    assert "Connected to Ray cluster" in submit.stdout + submit.stderr  # joined, did not start its own
    trials = pd.read_csv(tmp_path / "results" / "job" / "trials.csv")
    assert trials.status.tolist() == ["ok"] and trials.speedup_vs_fp32.tolist() == [1.0]


def _forget_cluster(gcs_port: int) -> None:
    """`ray start` records its address for later `ray.init()` calls; a stopped head must not stay there."""
    current = Path("/tmp/ray/ray_current_cluster")
    if current.is_file() and current.read_text().strip().endswith(f":{gcs_port}"):
        current.unlink()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
