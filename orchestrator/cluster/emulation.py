"""An emulated cluster on one machine: a Ray node per emulated host, links shaped to a bandwidth.

``up`` makes the hosts (``orchestrator.cluster.netns``), calibrates the links
(``orchestrator.cluster.calibrate``: unshaped, then at the bandwidth), and starts a Ray
head in host 0 and one Ray node in each other host, one at a time (parallel
starts race for the session's socket names). Every node offers one unit of the
custom resource ``emu_host``: a trial's workers ask for one each, so they land
on different hosts and talk over the shaped links (Ray's default packing would
put them on one host and bypass the links). The head offers one more CPU than
the others for the Tune trial functions.

The cluster's state (hosts, addresses, namespace inodes, calibrations, who owns
it) is a JSON file under ``STATE_ROOT/<prefix>/``; ``down`` ends every process
in the cluster's namespaces by PID, found by namespace inode even after a crash,
then removes the namespaces and the folder. The Ray address is reachable only
from inside the emulated hosts: drivers run in host 0 (``command``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compressors.core.params import rate_bps

from . import netns
from .calibrate import calibrate
from .netns import Network, NetworkError

# Runtime state of root's clusters (namespaces need root): gone with a reboot, as the namespaces are.
STATE_ROOT = Path("/run/lowprec-emu")
DEFAULT_PREFIX = "lp"
SWEEP_PREFIX = "lpsweep"  # a sweep's own cluster (cluster.emulate)
DEFAULT_SUBNET = "198.18.0"
RAY_PORT = 6379
HOST_RESOURCE = "emu_host"
# Below this multiple of the requested rate the veths themselves, not tbf, would set the pace under load.
HEADROOM = 3.0
_NODE_CPUS = 1
_OBJECT_STORE_BYTES = 200 * 1000**2
_STOP_WAIT_S = 10.0
# Every process of the cluster gets these. Token authentication is on in Ray 2.60 once
# ~/.ray/auth_token exists; nodes and drivers must agree, so it is off inside the emulation.
BASE_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "GLOO_SOCKET_IFNAME": "eth0",
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
ENV_VAR = "LOWPREC_EMULATION"  # set in drivers started by `command`: the prefix of their cluster


@dataclasses.dataclass
class Cluster:
    """The state of one emulated cluster (its JSON file)."""

    prefix: str
    subnet: str
    hosts: int
    bandwidth: str | None  # the rate the links are shaped to now
    inodes: list[int]  # of every namespace, hosts first: finds our processes after a crash
    owner_pid: int | None = None  # a sweep that brought it up for itself; None: `cluster up`
    ray: bool = True
    calibrations: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by rate; "unshaped"
    started_at: str = ""

    @property
    def network(self) -> Network:
        return Network(self.prefix, self.subnet, self.hosts)

    @property
    def address(self) -> str:
        """The Ray head's address (reachable from inside the hosts only)."""
        return f"{self.network.address(0)}:{RAY_PORT}"

    @property
    def folder(self) -> Path:
        return STATE_ROOT / self.prefix

    @property
    def temp_dir(self) -> Path:
        return self.folder / "ray"

    def env(self) -> dict[str, str]:
        """What a driver or command inside the cluster needs."""
        return {**BASE_ENV, "RAY_ADDRESS": self.address, ENV_VAR: self.prefix}

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run in emulated host ``host`` with the cluster's environment."""
        if not 0 <= host < self.hosts:
            raise ValueError(f"host must be in [0, {self.hosts - 1}], got {host}")
        return self.network.command(host, argv, self.env())

    def inside(self) -> bool:
        """Whether this process runs in the cluster's host 0 (where drivers run)."""
        return netns.netns_inode("/proc/self/ns/net") == self.inodes[0]

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1))
        os.replace(tmp, path)

    def shape(self, rate: str, recalibrate: bool = False) -> dict[str, Any] | None:
        """Shape every link to ``rate`` (Ray keeps running); with ``recalibrate``, measure it anew
        (also when a calibration at that rate exists). Returns the calibration at ``rate``, if any."""
        rate_bps(rate)  # a bad rate fails before anything changes
        if recalibrate and self.hosts >= 2:
            self.calibrations[rate] = calibrate(self.network, [rate])[0]
        else:
            self.network.shape(rate)
        self.bandwidth = rate
        self.save()
        return self.calibrations.get(rate)

    def processes(self) -> list[int]:
        return netns.processes(self.inodes)

    def summary(self) -> dict[str, Any]:
        """What a results folder records of the cluster its trials ran on."""
        return {"hosts": self.hosts, "bandwidth": self.bandwidth, "addresses": [self.network.address(i)
                for i in range(self.hosts)], "burst_bytes": netns.burst_bytes(self.bandwidth) if self.bandwidth
                else None, "calibrations": self.calibrations}


def load(prefix: str = DEFAULT_PREFIX) -> Cluster | None:
    """The cluster with ``prefix``, if its state file exists."""
    path = STATE_ROOT / prefix / "state.json"
    try:
        return Cluster(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def current() -> Cluster | None:
    """The emulated cluster whose host 0 this process runs in, as a driver started by ``command``."""
    prefix = os.environ.get(ENV_VAR)
    cluster = load(prefix) if prefix else None
    return cluster if cluster is not None and cluster.inside() else None


def find(address: str) -> Cluster | None:
    """The emulated cluster whose Ray head is at ``address`` (host:port), if any."""
    for path in sorted(STATE_ROOT.glob("*/state.json")):
        cluster = load(path.parent.name)
        if cluster is not None and cluster.ray and cluster.address == address:
            return cluster
    return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def up(hosts: int, bandwidth: str, *, prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET,
       ray: bool = True, owner_pid: int | None = None, log: Callable[[str], None] = print) -> Cluster:
    """Make ``hosts`` emulated hosts with links shaped to ``bandwidth``, calibrate, start Ray.

    Refuses (NetworkError, having removed what it made) without root or tbf, when a cluster with
    ``prefix`` is up (one left by a sweep that crashed is removed first), and when the unshaped links
    are slower than ``bandwidth``; warns when they are less than ``HEADROOM`` times faster.
    """
    problem = netns.problem()
    if problem:
        raise NetworkError(f"cannot emulate a cluster here: {problem}")
    rate_bps(bandwidth)
    network = Network(prefix, subnet, hosts)
    old = load(prefix)
    if old is not None:
        if old.owner_pid is not None and not _alive(old.owner_pid):
            log(f"removing the emulated cluster {prefix!r} left by process {old.owner_pid}, which has ended")
            down(prefix, log=log)
        else:
            owner = f"sweep process {old.owner_pid}" if old.owner_pid else "`lowprec cluster up`"
            raise NetworkError(f"an emulated cluster with prefix {prefix!r} is up (started by {owner}): "
                               f"`lowprec cluster down --prefix {prefix}` first, or choose another --prefix")
    started = time.monotonic()
    cluster = Cluster(prefix, subnet, hosts, None, [], owner_pid=owner_pid, ray=ray,
                      started_at=datetime.datetime.now().isoformat(timespec="seconds"))
    cluster.folder.mkdir(parents=True, exist_ok=True)
    try:
        cluster.inodes = network.create()
        cluster.save()  # from here on `down` finds everything
        if hosts >= 2:
            unshaped, shaped = calibrate(network, [None, bandwidth])
            cluster.calibrations = {"unshaped": unshaped, bandwidth: shaped}
            cluster.bandwidth = bandwidth
            cluster.save()
            _check_headroom(unshaped["measured_bps"], bandwidth, log)
            log(f"links: {bandwidth} each way (burst {netns.burst_bytes(bandwidth)} B); calibrated "
                f"{shaped['measured_bps'] / 1e6:.1f} Mbit/s = {shaped['fraction']:.3f} of the rate "
                f"(unshaped {unshaped['measured_bps'] / 1e9:.2f} Gbit/s)")
        else:
            network.shape(bandwidth)
            cluster.bandwidth = bandwidth
        cluster.save()
        if ray:
            _start_ray(cluster)
        log(f"emulated cluster {prefix!r} up in {time.monotonic() - started:.0f} s: {hosts} hosts "
            f"{network.address(0)}..{network.address(hosts - 1)}" + (f", Ray at {cluster.address}" if ray else ""))
        return cluster
    except BaseException:
        down(prefix, log=lambda _: None)
        raise


def _check_headroom(unshaped_bps: float, bandwidth: str, log: Callable[[str], None]) -> None:
    wanted = rate_bps(bandwidth)
    if unshaped_bps < wanted:
        raise NetworkError(f"this machine cannot emulate {bandwidth}: unshaped, its links carried only "
                           f"{unshaped_bps / 1e9:.2f} Gbit/s; choose a lower bandwidth")
    if unshaped_bps < HEADROOM * wanted:
        log(f"warning: unshaped, the links carried {unshaped_bps / 1e9:.2f} Gbit/s, less than {HEADROOM:g}x "
            f"{bandwidth}: under training's CPU load the machine, not the links, may set the pace")


def _ray_binary() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise NetworkError("the `ray` command was not found beside this Python; install ray")
    return found


def _start_ray(cluster: Cluster) -> None:
    """Head in host 0, then one node per other host, one at a time."""
    ray = _ray_binary()
    network = cluster.network
    common = ["--object-store-memory", str(_OBJECT_STORE_BYTES), "--disable-usage-stats"]
    resources = json.dumps({HOST_RESOURCE: 1})
    for i in range(cluster.hosts):
        if i == 0:
            argv = [ray, "start", "--head", "--node-ip-address", network.address(0), "--port", str(RAY_PORT),
                    "--temp-dir", str(cluster.temp_dir), "--include-dashboard", "false",
                    "--num-cpus", str(_NODE_CPUS + 1)]
        else:
            argv = [ray, "start", "--address", cluster.address, "--node-ip-address", network.address(i),
                    "--num-cpus", str(_NODE_CPUS)]
        done = subprocess.run(network.command(i, [*argv, *common, "--resources", resources], BASE_ENV),
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            raise NetworkError(f"`ray start` in {network.host(i)} failed: {' '.join(tail)}")


def down(prefix: str = DEFAULT_PREFIX, log: Callable[[str], None] = print) -> int:
    """End every process of the cluster by PID, remove its namespaces and its folder; how many processes
    were ended. Finds the namespaces by name where the state file is gone."""
    cluster = load(prefix)
    inodes = list(cluster.inodes) if cluster else []
    names = sorted(p.name for p in netns.NETNS_DIR.glob(f"{prefix}-*")) if netns.NETNS_DIR.is_dir() else []
    inodes += [netns.netns_inode(netns.NETNS_DIR / name) for name in names]
    pids = netns.processes(inodes)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_WAIT_S
    while netns.processes(inodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    # Until none is left: a killed process lingers in /proc a moment, and one forked just before its
    # parent was listed for killing escapes that round.
    deadline = time.monotonic() + _STOP_WAIT_S
    while (left := netns.processes(inodes)) and time.monotonic() < deadline:
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.1)
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    shutil.rmtree(STATE_ROOT / prefix, ignore_errors=True)
    if names or cluster:
        log(f"emulated cluster {prefix!r} down: {len(pids)} process(es) ended, {len(names)} namespace(s) removed")
    return len(pids)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def status(prefix: str = DEFAULT_PREFIX) -> str:
    """Hosts, links, calibrations and processes of the cluster, as text."""
    cluster = load(prefix)
    if cluster is None:
        return f"no emulated cluster with prefix {prefix!r} (state: {STATE_ROOT / prefix})"
    lines = [f"emulated cluster {prefix!r}: {cluster.hosts} hosts, links {cluster.bandwidth} each way, "
             f"started {cluster.started_at}" + (f" by sweep process {cluster.owner_pid}" if cluster.owner_pid else ""),
             f"Ray: {cluster.address}" if cluster.ray else "Ray: not started"]
    missing = [name for name in cluster.network.names if name not in cluster.network.existing()]
    if missing:
        lines.append(f"missing namespaces: {', '.join(missing)} (`lowprec cluster down --prefix {prefix}`)")
    else:
        lines += cluster.network.qdiscs()
    for rate, result in cluster.calibrations.items():
        fraction = f" = {result['fraction']:.3f} of the rate" if "fraction" in result else ""
        lines.append(f"calibration {rate}: {result['measured_bps'] / 1e6:.1f} Mbit/s{fraction} "
                     f"(all_reduce of {result['bytes']} B, median of {result['repeats']})")
    pids = cluster.processes()
    rss = 0
    for pid in pids:
        try:
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    lines.append(f"processes: {len(pids)}, {rss / 1024**3:.2f} GiB resident")
    return "\n".join(lines)
