"""The ``ray job submit`` lines of docs/sweeps.md ("On a Ray cluster"), run as the page writes them
against a new local cluster (CPU; over a minute on 2 cores, more when they are busy: most of it Ray
starting the cluster, the job's driver and the trial's worker).

The lines are read from the page's first ``bash`` block of that section, so page and test cannot
drift. What the page says is yours to change is all that changes: the sweep file (one 2-worker trial of
a user's own model file and compressor module beside it, tests/orchestrator/data/job_submit.yaml, given
relative to the checkout as the page gives its own),
the ``--results`` folder (one in the test's folder), and the ports: the ``ray start`` line gets
free ports, its own ``--temp-dir`` and ``--block`` appended (``--block`` keeps the cluster's processes
this test's children, so it ends exactly that cluster, by PID), and the submit line that dashboard
port. HOME is a folder of the test's, so the page's ``ray get-auth-token --generate`` makes a new
token there and the user's own ``~/.ray/auth_token`` plays no part; the head then has token
authentication on, as a user's head has once that file exists.

The job must succeed with the records at the absolute ``--results``; the same line with a relative
``--results`` must fail with ``run``'s one-line refusal and exit status 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from tests.distributed import free_port
from tests.helpers import ROOT, numba_cache_dir

DOC = ROOT / "docs" / "sweeps.md"
SECTION = "### On a Ray cluster: `ray job submit`"
DATA = "tests/orchestrator/data"  # relative to the checkout, the job's --working-dir
SWEEP = f"{DATA}/job_submit.yaml"
# The ray CLI of the Python running the tests, else the one on PATH.
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
# What the page's lines say that the test replaces (each must be there exactly once).
DOC_SWEEP = " sweeps/quickstart.yaml "
DOC_RESULTS = '--results "$PWD/results/quickstart"'
DOC_DASHBOARD = "http://127.0.0.1:8265"
START_S, JOB_S, STOP_S = 120, 300, 60
# Submitted again (before a job starts, or as a job that failed to start): the dashboard is not
# answering yet, or its job agent is not up yet, or Ray lost the race when the checkout's files change
# between hashing the working dir and uploading it (another process writing in the checkout).
RETRY = ("Failed to connect to Ray at address", "No available agent to submit job",
         "Failed to download runtime_env file package")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(RAY is None, reason="the `ray` command line is not installed")]


def documented_lines() -> tuple[str, str, str]:
    """The section's first bash block: its token, ``ray start`` and ``ray job submit`` lines."""
    text = DOC.read_text()
    section = text[text.index(SECTION):]
    block = section[section.index("```bash\n") + len("```bash\n"):]
    block = block[:block.index("```")]
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == 3, lines
    token, start, submit = lines
    assert token.startswith("ray get-auth-token --generate"), token
    assert " ray start --head" in start, start
    assert " ray job submit " in submit, submit
    for part in (DOC_SWEEP, DOC_RESULTS, DOC_DASHBOARD):
        assert submit.count(part) == 1, f"{part!r} not once in the submit line: {submit}"
    return token, start, submit


def test_documented_job_submit_lines_run_on_a_local_cluster(tmp_path):
    token_line, start_line, submit_line = documented_lines()
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "PYTHONPATH")}
    env.update(HOME=str(home), PATH=f"{Path(RAY).parent}{os.pathsep}{env.get('PATH', '')}",
               RAY_USAGE_STATS_ENABLED="0", NUMBA_CACHE_DIR=numba_cache_dir(),  # the kernels compiled once
               RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")  # SIGTERM ends the head at once, not after 30 s

    done = _shell(token_line, env, 60)
    assert done.returncode == 0 and (home / ".ray" / "auth_token").is_file(), done.stdout

    # Ray's sockets live in the temp dir, whose paths must stay short: not under tmp_path.
    temp_dir = tempfile.mkdtemp(prefix="lowprec_ray_")
    dashboard_port = free_port()
    start_env, argv = _split_env(start_line)
    argv = [RAY if argv[0] == "ray" else argv[0], *argv[1:], "--block", f"--port={free_port()}",
            f"--dashboard-port={dashboard_port}", f"--dashboard-agent-listen-port={free_port()}",
            f"--ray-client-server-port={free_port()}", f"--temp-dir={temp_dir}", "--num-cpus=2"]
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    head_log = (tmp_path / "head.log").open("w")
    head = subprocess.Popen(argv, cwd=ROOT, env={**env, **start_env}, stdout=head_log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    results = tmp_path / "results" / "job_submit"
    try:
        status = _wait_for_dashboard(dashboard, head)
        assert status == 401, f"the head answers {status} without a token: token authentication is off"
        submit = submit_line.replace(DOC_DASHBOARD, dashboard).replace(DOC_SWEEP, f" {SWEEP} ")
        with ThreadPoolExecutor(2) as pool:  # the two jobs side by side: each mostly waits on Ray
            refusing = pool.submit(_submit, submit.replace(DOC_RESULTS, "--results results/job_submit"), env)
            submitting = pool.submit(_submit, submit.replace(DOC_RESULTS, f"--results {shlex.quote(str(results))}"),
                                     env)
            refused, submitted = refusing.result(), submitting.result()
    finally:
        _stop(head)
        head_log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)

    assert refused.returncode != 0, refused.stdout[-3000:]
    assert ("error: --results must be an absolute path under `ray job submit`, got 'results/job_submit'"
            in refused.stdout), refused.stdout[-3000:]
    assert "exit code 2" in refused.stdout, refused.stdout[-3000:]
    assert submitted.returncode == 0, submitted.stdout[-5000:]
    assert "succeeded" in submitted.stdout and f"results: {results}" in submitted.stdout, submitted.stdout[-5000:]
    assert "Connected to Ray cluster" in submitted.stdout  # the driver joined the cluster, did not start its own
    (record_path,) = (results / "trials").glob("*.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok", record.get("traceback") or record["reason"]
    # The user's model and compressor, found beside the sweep file in the job's copy of the working dir
    assert len(record["worker_node_ips"]) == 2
    assert record["model_summary"]["parameters"] == 16 * 8 + 8 + 8 * 10 + 10
    assert record["settings"]["model"].endswith(f"{DATA}/my_models.py:tiny_mlp")
    digests = {Path(source["reference"].split(":")[0]).name: source["sha256"] for source in record["sources"]}
    assert digests == {name: hashlib.sha256((ROOT / DATA / name).read_bytes()).hexdigest()
                       for name in ("my_models.py", "my_compressor.py")}
    (row,) = pd.read_csv(results / "trials.csv").to_dict("records")
    assert row["status"] == "ok" and row["compressor"] == "truncate16" and row["parameters"] == 226
    # Two ranks, each sending the upper halves of its gradient's bits: the compressed collectives ran.
    assert row["bytes_sent"] > 0 and row["time_to_target_s"] > 0


def _split_env(line: str) -> tuple[dict[str, str], list[str]]:
    """A shell line's leading NAME=value assignments and its argv (its comment dropped)."""
    words = shlex.split(line, comments=True)
    env = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def _shell(line: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``bash -c line`` in the checkout, stdout and stderr together; its process group killed after ``timeout``."""
    process = subprocess.Popen(["bash", "-c", line], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate(timeout=10)
        pytest.fail(f"gave up after {timeout} s: {line}\n{out[-3000:]}")
    return subprocess.CompletedProcess(line, process.returncode, out, "")


def _submit(line: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    for _ in range(3):
        done = _shell(line, env, JOB_S)
        if not any(reason in done.stdout for reason in RETRY):
            break
        time.sleep(2)
    return done


def _wait_for_dashboard(url: str, head: subprocess.Popen) -> int:
    """The HTTP status the dashboard answers a request without a token with, once it answers."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert head.poll() is None, "`ray start` exited: see head.log"
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the dashboard did not answer at {url} within {START_S} s")


def _stop(head: subprocess.Popen) -> None:
    """End the cluster by PID: SIGTERM to ``ray start --block``, which ends its processes; then SIGKILL to
    any of them (and their children, such as the job's driver) still there."""
    processes = _descendants(head.pid)
    if head.poll() is None:
        head.terminate()
        try:
            head.wait(STOP_S)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(10)
    for pid, started in processes.items():
        if _start_time(pid) == started:  # still the same process, not a new one with its number
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _descendants(pid: int) -> dict[int, str]:
    """Each process below ``pid``: its start time (to tell it from a later process with the same PID)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        started = _start_time(child)
        if started is not None:
            found[child] = started
            todo.extend(children.get(child, []))
    return found


def _start_time(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
