"""The emulated cluster (orchestrator/cluster/emulation.py, procs.py, ray_nodes.py): what it refuses
without root or with bad input, what its state file lets `down` touch, what `shape` records when it fails
(any user: the namespaces are stand-in files, the kernel calls recorded); links, Ray and a trial (root).

The root tests bring up 2 hosts of 2 workers each at 100mbit under their own prefix
and subnet (``lpt``, 198.18.7.0/24), so a cluster of the user's is left alone, run
through the command line a 2-worker trial spread over both hosts and a 4-worker
trial that fills them, and bring it down again (about 3 minutes on the 2-core
development machine); and 2 hosts at 200kbit without Ray (``lpl``, 198.18.8.0/24)
beside a namespace made by hand. The network's names:
test_netns.py; an emulated cluster's sweep-file settings: tests/orchestrator/study/test_sweep_file.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from compressors.core.params import rate_bps
from orchestrator import cli
from orchestrator.cluster import calibrate, emulation, netns, procs, ray_nodes
from orchestrator.cluster.netns import NetworkError
from orchestrator.study.records import read_records
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


PREFIX_RULE = "must be a lowercase letter and up to 7 more lowercase letters or digits, like lp"
RATE_RULE = "must be a rate from 8kbit to 100gbit, like 100mbit or 2.5gbit"


@pytest.fixture
def state_root(tmp_path, monkeypatch):
    """The clusters' state under tmp_path/state, the named namespaces (stand-ins: files) under tmp_path/netns."""
    monkeypatch.setattr(emulation, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(netns, "NETNS_DIR", tmp_path / "netns")
    (tmp_path / "netns").mkdir()
    return tmp_path / "state"


def recorded(prefix: str, hosts: int, names: dict[str, int | None], **fields) -> emulation.Cluster:
    """A cluster's state file listing these namespaces: a stand-in file's inode, or an inode of no file."""
    inodes = [netns.netns_inode(netns.NETNS_DIR / name) if inode is None else inode for name, inode in names.items()]
    cluster = emulation.Cluster(prefix, "198.18.7", hosts, "1gbit", inodes, **fields)
    cluster.save()
    return cluster


@pytest.mark.parametrize("action", [["up", "--hosts", "2", "--bandwidth", "1gbit"], ["shape", "1gbit"],
                                    ["exec", "0", "true"], ["status"], ["down"]])
@pytest.mark.parametrize("prefix", ["../x", "..", "qa?z", "*"])
def test_every_verb_refuses_a_prefix_that_is_a_path_or_a_pattern(action, prefix, state_root, capsys):
    beside = state_root.parent / "x"  # `down --prefix ../x` removed this folder
    beside.mkdir()
    (netns.NETNS_DIR / "qazz-h0").touch()  # a namespace made by hand that `qa?z` and `*` match
    argv = ["cluster", action[0], "--prefix", prefix, *action[1:]]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"error: --prefix {PREFIX_RULE}, got {prefix!r}\n"
    assert beside.is_dir() and (netns.NETNS_DIR / "qazz-h0").exists()
    with pytest.raises(ValueError, match=f"^prefix {PREFIX_RULE}"):
        emulation.down(prefix)


def test_down_ends_only_recorded_processes_and_removes_only_recorded_namespaces(state_root, monkeypatch):
    for name in ("qaz-h0", "qaz-sw", "qaz-h1", "qazz-h0", "qa-h0"):
        (netns.NETNS_DIR / name).touch()
    # qaz-h1 was removed and made again by hand: the record has the inode of ours, which is gone
    cluster = recorded("qaz", 2, {"qaz-h0": None, "qaz-h1": 7, "qaz-sw": None})
    inode = {name: netns.netns_inode(netns.NETNS_DIR / name) for name in ("qaz-h0", "qaz-h1", "qazz-h0", "qa-h0")}
    # who is in which namespace: 11 in ours; 12 in the hand-made qaz-h1; 13 and 14 in our gone qaz-h1's inode,
    # which the kernel may have given to someone else's (13 carries the cluster's mark, 14 does not); 15, 16 beside
    table = {inode["qaz-h0"]: [11], inode["qaz-h1"]: [12], 7: [13, 14], inode["qazz-h0"]: [15], inode["qa-h0"]: [16]}
    ended, deleted = [], []
    monkeypatch.setattr(netns, "problem", lambda: None)
    monkeypatch.setattr(netns, "processes",
                        lambda inodes: sorted(p for i in inodes for p in table.get(i, []) if p not in ended))
    mark = (emulation.ENV_VAR, "qaz")
    monkeypatch.setattr(procs, "marked", lambda pid, name, value: pid == 13 and (name, value) == mark)
    monkeypatch.setattr(procs, "send", lambda pid, sig: ended.append(pid))
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: deleted.append(argv[-1]))
    assert cluster.processes() == [11, 13]
    assert emulation.down("qaz", log=lambda _: None) == 2
    assert sorted(set(ended)) == [11, 13]
    assert deleted == ["qaz-h0", "qaz-sw"]
    assert not (state_root / "qaz").exists()
    assert emulation.down("qaz", log=lambda _: None) is None  # nothing recorded: nothing touched


def test_down_ends_the_raylets_first_and_the_gcs_last_as_ray_stop_does(state_root, monkeypatch):
    """Ended all at once, Ray's services and its GCS wait on each other for over 10 s."""
    (netns.NETNS_DIR / "qaz-h0").touch()
    cluster = recorded("qaz", 1, {"qaz-h0": None})
    programs = {21: "gcs_server", 22: "python3.11", 23: "raylet", 24: "raylet", 25: "python3.11"}
    alive, signals = set(programs), []
    monkeypatch.setattr(netns, "problem", lambda: None)
    monkeypatch.setattr(netns, "processes", lambda inodes: sorted(alive))
    monkeypatch.setattr(procs, "program", programs.get)
    monkeypatch.setattr(procs, "send", lambda pid, sig: (signals.append((programs[pid], sig)), alive.discard(pid)))
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: None)
    assert emulation.down("qaz", log=lambda _: None) == 5
    assert signals == [("raylet", signal.SIGTERM)] * 2 + [("python3.11", signal.SIGTERM)] * 2 + [
        ("gcs_server", signal.SIGTERM)]
    assert cluster.processes() == []


def test_the_cluster_mark_is_read_from_the_process_environment():
    marked = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                              env={**os.environ, emulation.ENV_VAR: "qaz"}, stdout=subprocess.PIPE, text=True)
    try:
        # Until the child has run exec, /proc shows the environment it was forked with: this process's.
        assert marked.stdout.readline() == "up\n"
        assert procs.marked(marked.pid, emulation.ENV_VAR, "qaz")
        assert not procs.marked(marked.pid, emulation.ENV_VAR, "qa")
    finally:
        marked.kill()
        marked.wait()
        marked.stdout.close()


def test_a_refused_sweep_start_leaves_the_running_sweeps_cluster_alone(state_root, tmp_path, capsys, monkeypatch):
    """A second sweep with cluster.emulate while one runs: refused, and the first one's cluster stays up."""
    monkeypatch.delenv(emulation.ENV_VAR, raising=False)
    monkeypatch.setattr(netns, "problem", lambda: None)
    running = os.getppid()  # stands for the first sweep's process: alive, not this one
    recorded(emulation.SWEEP_PREFIX, 2, {}, owner_pid=running)
    touched = []
    monkeypatch.setattr(netns, "processes", lambda inodes: touched.append(inodes) or [])
    monkeypatch.setattr(procs, "send", lambda pid, sig: touched.append(pid))
    path = write(tmp_path, "name: emu\nworkload: {target_accuracy: 0.5, epochs: 1}\nbaselines: false\n"
                           "cluster: {emulate: {hosts: 2, bandwidth: 1gbit}}\nsweep: {compressor: [fp32]}\n")
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["run", str(path), "--results", str(tmp_path / "results")]) == 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert capsys.readouterr().err == (f"error: an emulated cluster with prefix 'lpsweep' is up (started by sweep "
                                       f"process {running}): `lowprec cluster down --prefix lpsweep` first, or "
                                       f"choose another --prefix\n")
    assert emulation.load(emulation.SWEEP_PREFIX).owner_pid == running and touched == []


def test_a_sweeps_own_cluster_gets_its_workers_per_host(state_root, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(emulation.ENV_VAR, raising=False)
    asked = []

    def refused(hosts, bandwidth, **options):
        asked.append((hosts, bandwidth, options["workers_per_host"]))
        raise NetworkError("cannot emulate a cluster here: stand-in")

    monkeypatch.setattr(emulation, "up", refused)
    path = write(tmp_path, "name: emu\nworkload: {target_accuracy: 0.5, epochs: 1}\nbaselines: false\n"
                           "cluster: {emulate: {hosts: 2, workers_per_host: 2, bandwidth: 1gbit}}\n"
                           "sweep: {num_workers: 4, compressor: [fp32]}\n")
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["run", str(path), "--results", str(tmp_path / "results")]) == 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert asked == [(2, "1gbit", 2)]
    assert capsys.readouterr().err == "error: cannot emulate a cluster here: stand-in\n"


def test_calibration_transfers_take_at_most_two_seconds_at_the_rate():
    """1 MiB three times at 200kbit took minutes and hit the calibration's 120 s timeout."""
    sizes = {rate: calibrate.buffer_bytes(rate) for rate in ("8kbit", "200kbit", "4mbit", "10mbit", "100mbit")}
    assert sizes == {"8kbit": 2000, "200kbit": 50_000, "4mbit": 1_000_000, "10mbit": 1024**2, "100mbit": 6_250_000}
    for rate in ("8kbit", "9kbit", "200kbit", "1mbit", "8.3mbit", "10mbit", "1gbit", "100gbit"):
        assert calibrate.buffer_bytes(rate) * 8 / rate_bps(rate) <= 2.0
    # the warm-up also empties the links' token buckets, so the timed transfers show the rate
    assert calibrate.warm_up_bytes("200kbit") == 50_000 + netns.burst_bytes("200kbit")


def test_a_failed_calibration_leaves_the_state_naming_the_rate_tc_has(state_root, monkeypatch):
    cluster = recorded("qaz", 2, {})
    shaped, seen = [], []
    monkeypatch.setattr(netns.Network, "shape", lambda network, rate: shaped.append(rate))

    def failing(network, rates):
        seen.append(emulation.load("qaz").bandwidth)
        raise RuntimeError("link calibration between qaz-h0 and qaz-h1 failed: rank 0: timed out")

    monkeypatch.setattr(emulation, "calibrate", failing)
    with pytest.raises(RuntimeError, match="link calibration"):
        cluster.shape("8kbit", recalibrate=True)
    assert seen == [None]  # while tc changes, the state names no rate
    assert shaped == ["8kbit"] and emulation.load("qaz").bandwidth == "8kbit"


def test_a_shaping_that_fails_leaves_no_rate_in_the_state(state_root, monkeypatch):
    cluster = recorded("qaz", 2, {})

    def failing(network, rate):
        raise NetworkError("`ip netns exec qaz-h1 tc qdisc replace ...` failed: Cannot open network namespace")

    monkeypatch.setattr(netns.Network, "shape", failing)
    with pytest.raises(NetworkError):
        cluster.shape("8kbit")
    assert emulation.load("qaz").bandwidth is None
    assert "links at no recorded rate (being shaped, or that failed: `lowprec cluster shape RATE --prefix qaz`)" \
        in emulation.status("qaz")


def test_shape_refuses_a_rate_the_unshaped_links_could_not_carry_as_up_does(state_root, capsys, monkeypatch):
    recorded("qaz", 2, {}, calibrations={"unshaped": {"measured_bps": 7e9}})
    monkeypatch.setattr(netns.Network, "shape", lambda network, rate: pytest.fail("the links were re-shaped"))
    assert cli.main(["cluster", "shape", "100gbit", "--prefix", "qaz"]) == 1
    assert capsys.readouterr().err == ("error: this machine cannot emulate 100gbit: unshaped, its links carried "
                                       "only 7 Gbit/s; choose a lower bandwidth\n")
    assert emulation.load("qaz").bandwidth == "1gbit"


@pytest.mark.parametrize("argv, status, message", [
    (["up", "--hosts", "1", "--bandwidth", "1gbit"], 2, "--hosts must be an int in [2, 64], got 1"),
    (["up", "--hosts", "251", "--bandwidth", "1gbit"], 2, "--hosts must be an int in [2, 64], got 251"),
    (["up", "--hosts", "2", "--bandwidth", "1gbit", "--workers_per_host", "0"], 2,
     "--workers_per_host must be an int in [1, 16], got 0"),
    (["up", "--hosts", "2", "--bandwidth", "1gbit", "--workers_per_host", "17"], 2,
     "--workers_per_host must be an int in [1, 16], got 17"),
    (["up", "--hosts", "2", "--bandwidth", "fast"], 2, f"--bandwidth {RATE_RULE}, got 'fast'"),
    (["up", "--hosts", "2", "--bandwidth", "7kbit"], 2, f"--bandwidth {RATE_RULE}, got '7kbit'"),
    (["up", "--hosts", "2", "--bandwidth", "1gbit", "--subnet", "10.0.0"], 2,
     "--subnet must be the first three octets of a /24 in 198.18.0.0/15: 198.18.0 .. 198.19.255, got '10.0.0'"),
    (["shape", "200gbit", "--prefix", "qaz"], 2, f"RATE {RATE_RULE}, got '200gbit'"),
    (["shape", "1gbit", "--prefix", "lpnone"], 1,
     "no emulated cluster with prefix 'lpnone': `lowprec cluster up --prefix lpnone` first"),
    (["exec", "0"], 2, "cluster exec needs a command: lowprec cluster exec [--prefix P] I CMD [ARG ...]"),
    (["exec", "--prefix", "qaz", "2", "true"], 2, "I must be a host of the cluster 'qaz', in [0, 1], got 2"),
    (["exec", "--prefix", "lpnone", "0", "true"], 1,
     "no emulated cluster with prefix 'lpnone': `lowprec cluster up --prefix lpnone` first"),
])
def test_cluster_commands_exit_2_for_bad_input_and_1_when_they_cannot_act(argv, status, message, state_root,
                                                                         capsys):
    recorded("qaz", 2, {})
    assert cli.main(["cluster", *argv]) == status
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize("argv", [["0", "ip", "addr", "--prefix", "qaz"], ["0", "--prefix", "qaz", "true"],
                                  ["0", "env", "--prefix=qaz"]])
def test_exec_refuses_a_prefix_after_the_host_number(argv, state_root, capsys, monkeypatch):
    """Everything from CMD on is CMD's: `exec 0 CMD --prefix P` ran CMD in the default cluster with --prefix P."""
    monkeypatch.setattr(subprocess, "call", lambda argv: pytest.fail(f"ran {argv}"))
    assert cli.main(["cluster", "exec", *argv]) == 2
    assert capsys.readouterr().err.startswith("error: --prefix after the host number is refused: exec's options go "
                                              "before it (lowprec cluster exec --prefix P I CMD ...)")


def test_up_refuses_workers_per_host_out_of_range_before_anything_is_made(state_root, monkeypatch):
    monkeypatch.setattr(netns, "problem", lambda: None)
    monkeypatch.setattr(netns.Network, "create", lambda network, made: pytest.fail("namespaces were made"))
    for count in (0, 17):
        with pytest.raises(ValueError, match=rf"^workers_per_host must be in \[1, 16\], got {count}$"):
            emulation.up(2, "1gbit", workers_per_host=count, prefix="qaz", subnet="198.18.7")
    assert not (state_root / "qaz").exists()


def test_each_hosts_ray_node_offers_workers_per_host_slots_and_a_cpu_for_each(state_root, monkeypatch):
    cluster = recorded("qaz", 2, {}, workers_per_host=3)
    started = []
    monkeypatch.setattr(ray_nodes, "_ray_binary", lambda: "ray")
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: started.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))
    ray_nodes.start(cluster.network, cluster.hosts, cluster.workers_per_host, cluster.temp_dir, cluster.address,
                    cluster.node_env())
    offered = [(argv[argv.index("--num-cpus") + 1], argv[argv.index("--resources") + 1]) for argv in started]
    assert [argv[3] for argv in started] == ["qaz-h0", "qaz-h1"]
    # the head's one more CPU is for the Tune trial functions
    assert offered == [("4", '{"emu_host": 3}'), ("3", '{"emu_host": 3}')]


def test_the_state_and_what_a_results_folder_records_name_workers_per_host(state_root):
    cluster = recorded("qaz", 2, {}, workers_per_host=2)
    assert emulation.load("qaz").workers_per_host == 2
    assert cluster.summary()["workers_per_host"] == 2
    assert "2 hosts, links 1gbit each way, 2 worker(s) per host" in emulation.status("qaz")
    # a state file written before hosts had several workers: one each
    state = state_root / "qaz" / "state.json"
    state.write_text(state.read_text().replace('"workers_per_host": 2,', ""))
    assert "workers_per_host" not in state.read_text() and emulation.load("qaz").workers_per_host == 1


# ---------------------------------------------------------------- root: links, Ray, two trials

root_only = pytest.mark.skipif(netns.problem() is not None,
                               reason=f"the emulated cluster needs root, ip and tc: {netns.problem()}")
PREFIX, SUBNET = "lpt", "198.18.7"


@pytest.fixture(scope="module")
def cluster():
    emulation.down(PREFIX, log=lambda _: None)  # one a crashed run of these tests left behind
    up = emulation.up(2, "100mbit", workers_per_host=2, prefix=PREFIX, subnet=SUBNET, log=lambda _: None)
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
    assert "2 hosts, links 100mbit each way, 2 worker(s) per host" in status and "rate 100Mbit" in status


@pytest.mark.slow
@root_only
def test_exec_runs_in_the_named_host(cluster, capfd):
    # the command line in this process (a new interpreter took seconds to import it); the command's output
    # is its child's, on this process's stdout
    assert cli.main(["cluster", "exec", "--prefix", PREFIX, "1", "ip", "-br", "addr", "show", "dev", "eth0"]) == 0
    assert f"{SUBNET}.2/24" in capfd.readouterr().out


def _run_on(cluster, sweep: Path, tmp_path: Path) -> Path:
    """``lowprec run`` of ``sweep`` on the emulated cluster; its results folder."""
    results = tmp_path / "results"
    env = {**os.environ, "HOME": str(tmp_path)}  # no ~/.ray token of the user's
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(sweep), "--results", str(results),
                           "--address", cluster.address], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return results


@pytest.mark.slow
@root_only
def test_a_two_worker_trial_runs_on_two_hosts_at_the_links_rate(cluster, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    # More than half of a host's 2 CPUs (the head's 3) per worker: one worker per host, so the two talk over
    # the shaped link (packed, Ray would put both on one host).
    sweep.write_text(textwrap.dedent("""\
        name: emu-root
        workload: {model: mlp, width: 512, depth: 2, epochs: 1, max_steps_per_epoch: 4, target_accuracy: 0.5}
        cluster: {cpus_per_worker: 1.6}
        sweep: {num_workers: 2, bandwidth: 100mbit, compressor: fp16}
        baselines: false
        predictor_inputs: false
        """))
    results = _run_on(cluster, sweep, tmp_path)
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
def test_a_four_worker_trial_puts_two_workers_on_each_host(cluster, tmp_path):
    """A trial's workers are packed onto hosts (PACK) and the ranks of a host numbered consecutively."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent("""\
        name: emu-hosts
        workload: {model: mlp, width: 8, depth: 1, dataset: synthetic, epochs: 1, max_steps_per_epoch: 3,
                   target_accuracy: 0.1}
        sweep: {num_workers: 4, compressor: fp32}
        baselines: false
        predictor_inputs: false
        """))
    results = _run_on(cluster, sweep, tmp_path)
    (record,) = read_records(results)
    assert record["status"] == "ok"
    ips = record["worker_node_ips"]
    assert ips.count(f"{SUBNET}.1") == 2 and ips.count(f"{SUBNET}.2") == 2, ips
    assert ips[0] == ips[1] and ips[2] == ips[3], ips
    assert record["link"]["workers_per_host"] == 2
    assert json.loads((results / "environment.json").read_text())["emulation"]["workers_per_host"] == 2


@pytest.mark.slow
@root_only
def test_a_low_rate_is_calibrated_and_down_spares_a_namespace_it_did_not_make():
    """200kbit: 1 MiB three times could not finish in the calibration's 120 s. The links only, no Ray."""
    prefix, stranger = "lpl", "lpl-h9"  # the old `down` removed every namespace named lpl-*
    emulation.down(prefix, log=lambda _: None)  # one a crashed run of this test left behind
    subprocess.run(["ip", "netns", "del", stranger], capture_output=True)
    subprocess.run(["ip", "netns", "add", stranger], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", stranger, "sleep", "60"])
    try:
        cluster = emulation.up(2, "200kbit", prefix=prefix, subnet="198.18.8", ray=False, log=lambda _: None)
        measured = cluster.calibrations["200kbit"]
        assert measured["bytes"] == 50_000 and 0.7 <= measured["fraction"] <= 1.1, measured
        status = emulation.status(prefix)
        assert "2 hosts, links 200kbit each way" in status and "rate 200Kbit" in status
        emulation.down(prefix, log=lambda _: None)
        assert emulation.load(prefix) is None and cluster.standing() == []
        assert (netns.NETNS_DIR / stranger).exists() and sleeper.poll() is None
    finally:
        emulation.down(prefix, log=lambda _: None)
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "del", stranger], capture_output=True)


@pytest.mark.slow
@root_only
def test_down_leaves_no_namespace_and_no_process(cluster):
    assert cluster.processes(), "the cluster's Ray nodes should be running"
    emulation.down(PREFIX, log=lambda _: None)
    assert not any(Path("/run/netns").glob(f"{PREFIX}-*"))
    assert netns.processes(cluster.inodes) == []
    assert emulation.load(PREFIX) is None and not (emulation.STATE_ROOT / PREFIX).exists()
