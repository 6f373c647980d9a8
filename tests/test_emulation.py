"""The emulated cluster: rates, namespaces, sweep-file checks (any user); links, Ray and a trial (root).

The root tests bring up 2 hosts at 100mbit under their own prefix and subnet
(``lpt``, 198.18.7.0/24), so a cluster of the user's is left alone, run one
sweep of two 2-worker trials through the command line and bring it down again
(about 2 minutes on the 2-core development machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from compressors.core.params import RATE, Param, rate_bps
from orchestrator import cli
from orchestrator.cluster import emulation, netns
from orchestrator.study.sweep_file import ConfigError, load_sweep
from orchestrator.cluster.netns import Network, NetworkError

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- rates and the network's names


@pytest.mark.parametrize("text, bps", [("100mbit", 1e8), ("1gbit", 1e9), ("2.5gbit", 2.5e9), ("8kbit", 8e3),
                                       ("1Gbit", 1e9), ("500000bit", 5e5)])
def test_rates_are_read_as_tc_writes_them(text, bps):
    assert rate_bps(text) == bps


@pytest.mark.parametrize("text", ["fast", "100", "-1mbit", "nanmbit", "1 gbit", "1tbit", "1e9bit", "", None, 1e9])
def test_a_rate_that_is_not_one_raises(text):
    with pytest.raises(ValueError, match="is not a rate like 100mbit"):
        rate_bps(text)


@pytest.mark.parametrize("value", ["1kbit", "200gbit", "fast", 100, float("nan")])
def test_rates_outside_the_range_or_not_rates_are_invalid_settings(value):
    param = Param("bandwidth", None, RATE)
    assert param.problem(value) == "must be a rate from 8kbit to 100gbit, like 100mbit or 2.5gbit"
    assert param.check("x", "1GBIT") == "1gbit"


def test_burst_holds_two_gso_packets_or_one_millisecond():
    assert netns.burst_bytes("100mbit") == 131072
    assert netns.burst_bytes("1gbit") == 131072
    assert netns.burst_bytes("10gbit") == 1_250_000


def test_network_names_addresses_and_commands():
    network = Network("lpt", "198.18.7", 3)
    assert network.names == ["lpt-h0", "lpt-h1", "lpt-h2", "lpt-sw"]
    assert [network.address(i) for i in range(3)] == ["198.18.7.1", "198.18.7.2", "198.18.7.3"]
    assert network.command(1, ["ray", "status"], {"A": "1"}) == ["ip", "netns", "exec", "lpt-h1", "env", "A=1",
                                                                 "ray", "status"]


@pytest.mark.parametrize("prefix, subnet, hosts, match", [
    ("LP", "198.18.0", 2, "prefix 'LP'"), ("lp-x", "198.18.0", 2, "prefix"), ("lpabcdefg", "198.18.0", 2, "prefix"),
    ("lp", "10.0.0", 2, "198.18.0.0/15"), ("lp", "198.20.0", 2, "198.18.0.0/15"), ("lp", "198.18", 2, "subnet"),
    ("lp", "198.18.0", 0, "hosts"), ("lp", "198.18.0", 251, "hosts")])
def test_a_network_outside_the_benchmark_range_or_badly_named_is_refused(prefix, subnet, hosts, match):
    with pytest.raises(ValueError, match=match):
        Network(prefix, subnet, hosts)
    Network("lp", "198.19.255", 2)  # the top of the range is in it


def test_without_root_up_refuses_saying_what_is_missing(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in netns.problem()
    with pytest.raises(NetworkError, match="cannot emulate a cluster here: .*needs root"):
        emulation.up(2, "100mbit", prefix="lpt", subnet="198.18.7")
    assert not (emulation.STATE_ROOT / "lpt").exists()


# ---------------------------------------------------------------- sweep files


HEADER = "name: emu\nworkload: {target_accuracy: 0.5, epochs: 1}\nbaselines: false\n"


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(HEADER + textwrap.dedent(text))
    return path


def test_emulate_sets_every_trials_bandwidth(tmp_path):
    sweep = load_sweep(_sweep(tmp_path, """\
        cluster: {emulate: {hosts: 4, bandwidth: 100MBIT}}
        sweep: {num_workers: [2, 4], compressor: [fp32]}
        """))
    assert sweep.cluster["emulate"] == {"hosts": 4, "bandwidth": "100mbit"}
    assert [t["bandwidth"] for t in sweep.trials] == ["100mbit", "100mbit"]


def test_a_bandwidth_axis_names_the_trials_and_runs_them_one_at_a_time(tmp_path):
    sweep = load_sweep(_sweep(tmp_path, """\
        cluster: {emulate: {hosts: 2}}
        sweep: {num_workers: 2, bandwidth: [100mbit, 1gbit], compressor: [fp32]}
        """))
    assert [t["name"] for t in sweep.trials] == ["fp32 bandwidth=100mbit num_workers=2 seed=0",
                                                 "fp32 bandwidth=1gbit num_workers=2 seed=0"]
    assert len({t["trial_id"] for t in sweep.trials}) == 2
    assert load_sweep(_sweep(tmp_path, "sweep: {compressor: [fp32]}\n")).trials[0]["bandwidth"] is None


@pytest.mark.parametrize("text, line, match", [
    ("cluster: {emulate: {bandwidth: 1gbit}}\n", 4, "cluster.emulate needs hosts"),
    ("cluster: {emulate: {hosts: 2}}\n", 4, "needs a bandwidth"),
    ("cluster: {emulate: {hosts: 1, bandwidth: 1gbit}}\n", 4, r"hosts must be an int in \[2, 64\]"),
    ("cluster: {emulate: {host: 2, bandwidth: 1gbit}}\n", 4, "unknown key 'host' in cluster.emulate .did you mean 'hosts'"),
    ("cluster: {emulate: {hosts: 2, bandwidth: fast}}\n", 4, "bandwidth must be a rate from 8kbit to 100gbit"),
    ("cluster: {emulate: {hosts: 2, bandwidth: 1gbit}}\nsweep: {bandwidth: [1gbit]}\n", 5, "set in both"),
    ("cluster: {emulate: {hosts: 2, bandwidth: 1gbit}}\nsweep: {num_workers: [2, 3]}\n", 5,
     "num_workers 3 is more than the 2 emulated hosts"),
    ("max_concurrent_trials: 2\ncluster: {emulate: {hosts: 2}}\nsweep: {bandwidth: [1gbit, 100mbit]}\n", 4,
     "trials run one at a time"),
    ("sweep: {bandwidth: [nanmbit]}\n", 4, r"sweep.bandwidth\[0\] must be a rate"),
])
def test_emulation_mistakes_name_the_key_and_line(tmp_path, text, line, match):
    with pytest.raises(ConfigError, match=match) as error:
        load_sweep(_sweep(tmp_path, text))
    assert error.value.line == line


def test_a_bandwidth_without_an_emulated_cluster_is_refused_before_ray_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(emulation.ENV_VAR, raising=False)
    path = _sweep(tmp_path, "sweep: {bandwidth: 1gbit, compressor: [fp32]}\n")
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
