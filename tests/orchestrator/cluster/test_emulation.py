"""The emulated cluster (orchestrator/cluster/emulation.py): what it refuses without root or with bad
input (any user); links, Ray and a trial (root).

The root tests bring up 2 hosts at 100mbit under their own prefix and subnet
(``lpt``, 198.18.7.0/24), so a cluster of the user's is left alone, run one
sweep of two 2-worker trials through the command line and bring it down again
(about 2 minutes on the 2-core development machine). The network's names:
test_netns.py; an emulated cluster's sweep-file settings: tests/orchestrator/study/test_sweep_file.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from compressors.core.params import rate_bps
from orchestrator import cli
from orchestrator.cluster import emulation, netns
from orchestrator.cluster.netns import NetworkError
from tests.helpers import ROOT, write


# ---------------------------------------------------------------- without root


def test_without_root_up_refuses_saying_what_is_missing(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in netns.problem()
    with pytest.raises(NetworkError, match="cannot emulate a cluster here: .*needs root"):
        emulation.up(2, "100mbit", prefix="lpt", subnet="198.18.7")
    assert not (emulation.STATE_ROOT / "lpt").exists()


def test_a_bandwidth_without_an_emulated_cluster_is_refused_before_ray_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(emulation.ENV_VAR, raising=False)
    path = write(tmp_path, "name: emu\nworkload: {target_accuracy: 0.5, epochs: 1}\nbaselines: false\n"
                           "sweep: {bandwidth: 1gbit, compressor: [fp32]}\n")
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results")]) == 2
    assert "bandwidth shapes the links of an emulated cluster" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("argv, message", [
    (["cluster", "up", "--hosts", "1", "--bandwidth", "1gbit"], "--hosts must be >= 2"),
    (["cluster", "up", "--hosts", "2", "--bandwidth", "fast"], "--bandwidth must be a rate"),
    (["cluster", "shape", "1gbit", "--prefix", "lpnone"], "no emulated cluster with prefix 'lpnone'"),
])
def test_cluster_commands_refuse_bad_input(argv, message, capsys):
    assert cli.main(argv) in (1, 2)
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- root: links, Ray, one sweep

root_only = pytest.mark.skipif(netns.problem() is not None,
                               reason=f"the emulated cluster needs root, ip and tc: {netns.problem()}")
PREFIX, SUBNET = "lpt", "198.18.7"


@pytest.fixture(scope="module")
def cluster():
    emulation.down(PREFIX, log=lambda _: None)  # one a crashed run of these tests left behind
    up = emulation.up(2, "100mbit", prefix=PREFIX, subnet=SUBNET, log=lambda _: None)
    try:
        yield up
    finally:
        emulation.down(PREFIX, log=lambda _: None)


@pytest.mark.slow
@root_only
def test_calibration_measures_the_shaped_rate(cluster):
    measured = cluster.calibrations["100mbit"]
    assert 0.7 <= measured["fraction"] <= 1.1, measured
    assert measured["bytes"] == 6_250_000 and measured["repeats"] == 3
    # a one-float all_reduce over two hosts of this machine: microseconds, not the shaped transfer's 0.5 s
    assert 0 < measured["latency_s"] < 0.01, measured
    assert cluster.calibrations["unshaped"]["measured_bps"] > 3e8
    status = emulation.status(PREFIX)
    assert "2 hosts, links 100mbit each way" in status and "rate 100Mbit" in status


@pytest.mark.slow
@root_only
def test_exec_runs_in_the_named_host(cluster):
    done = subprocess.run([sys.executable, "-m", "orchestrator", "cluster", "exec", "--prefix", PREFIX, "1",
                           "ip", "-br", "addr", "show", "dev", "eth0"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and f"{SUBNET}.2/24" in done.stdout


@pytest.mark.slow
@root_only
def test_a_two_worker_trial_runs_on_two_hosts_at_the_links_rate(cluster, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: emu-root
        workload: {model: mlp, width: 512, depth: 2, epochs: 1, max_steps_per_epoch: 4, target_accuracy: 0.5}
        cluster: {cpus_per_worker: 0.49}
        sweep: {num_workers: 2, bandwidth: 100mbit, compressor: fp16}
        baselines: false
        """))
    results = tmp_path / "results"
    env = {**os.environ, "HOME": str(tmp_path)}  # no ~/.ray token of the user's
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(sweep), "--results", str(results),
                           "--address", cluster.address], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # One trial (each costs ~25 s of Ray start-up here): fp16's hook times its collectives, so its
    # communication shows the shaped rate; plain DDP's is not observable one by one.
    (trial,) = pd.read_csv(results / "trials.csv").to_dict("records")
    assert trial["status"] == "ok" and trial["compressor"] == "fp16"
    assert trial["worker_node_ips"] == f"{SUBNET}.1 {SUBNET}.2"
    assert trial["bandwidth"] == "100mbit"
    assert trial["calibrated_bps"] == cluster.calibrations["100mbit"]["measured_bps"]
    assert trial["calibrated_latency_s"] == cluster.calibrations["100mbit"]["latency_s"]
    assert trial["comm_s"] >= 0.7 * trial["bytes_sent"] * 8 / rate_bps("100mbit")
    environment = (results / "environment.json").read_text()
    assert '"emulation"' in environment and '"100mbit"' in environment


@pytest.mark.slow
@root_only
def test_down_leaves_no_namespace_and_no_process(cluster):
    assert cluster.processes(), "the cluster's Ray nodes should be running"
    emulation.down(PREFIX, log=lambda _: None)
    assert not any(Path("/run/netns").glob(f"{PREFIX}-*"))
    assert netns.processes(cluster.inodes) == []
    assert emulation.load(PREFIX) is None and not (emulation.STATE_ROOT / PREFIX).exists()
