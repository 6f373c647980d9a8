"""An emulated cluster on one machine: a Ray node per emulated host, links shaped to a bandwidth.

``up`` makes the hosts (``orchestrator.cluster.netns``), calibrates the links
(``orchestrator.cluster.calibrate``: unshaped, then at the bandwidth), and starts a Ray
node in each host (``orchestrator.cluster.ray_nodes``), each with ``workers_per_host``
worker slots (a multi-GPU node's GPUs). The workers of one host share its namespace and
talk over its own address, unshaped; those of different hosts over the shaped links.

The cluster's state (hosts, addresses, namespace inodes, calibrations, who owns
it) is a JSON file under ``STATE_ROOT/<prefix>/``, claimed before anything is
made (one cluster per prefix) and updated as each namespace is made. ``down``
touches only what that file recorded: it ends the processes in the recorded
namespaces by PID (found by namespace inode, even after a crash;
``orchestrator.cluster.procs``), removes the namespaces that still have their
recorded inode, then the folder. The Ray address is reachable only from inside
the emulated hosts: drivers run in host 0 (``command``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compressors.core.params import RATE, Param, rate_bps

from . import netns, procs, ray_nodes
from .calibrate import calibrate
from .netns import Network, NetworkError
from .ray_nodes import RAY_PORT

# Runtime state of root's clusters (namespaces need root): gone with a reboot, as the namespaces are.
STATE_ROOT = Path("/run/lowprec-emu")
DEFAULT_PREFIX = "lp"
SWEEP_PREFIX = "lpsweep"  # a sweep's own cluster (cluster.emulate)
DEFAULT_SUBNET = "198.18.0"
MAX_WORKERS_PER_HOST = 16  # the GPUs of the largest common node
# Below this multiple of the requested rate the veths themselves, not tbf, would set the pace under load.
HEADROOM = 3.0
# Every process of the cluster gets these. Token authentication is on in Ray 2.60 once
# ~/.ray/auth_token exists; nodes and drivers must agree, so it is off inside the emulation.
BASE_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "GLOO_SOCKET_IFNAME": "eth0",
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
# The prefix of their cluster, in every process the cluster starts (Ray nodes, drivers, workers): tells ours
# from others' in a namespace whose name is gone, whose inode the kernel may have reused.
ENV_VAR = "LOWPREC_EMULATION"
BANDWIDTH = Param("bandwidth", None, RATE)  # the command line's and `up`'s: no null


def folder_of(prefix: str) -> Path:
    """The state folder of the cluster with ``prefix``; ValueError where ``prefix`` is not a cluster's name (a path
    or a pattern must never reach the file system or the namespaces)."""
    problem = netns.prefix_problem(prefix)
    if problem:
        raise ValueError(f"prefix {problem}, got {prefix!r}")
    return STATE_ROOT / prefix


def rate_text(bps: float) -> str:
    """A measured rate for people: 7.61 kbit/s, 95.1 Mbit/s, 9.41 Gbit/s."""
    for scale, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def _check_rate(rate: str) -> str:
    """``rate`` as tc writes it, or ValueError naming the valid range."""
    problem = BANDWIDTH.problem(rate)
    if problem:
        raise ValueError(f"bandwidth {problem}, got {rate!r}")
    return BANDWIDTH.check("bandwidth", rate)


@dataclasses.dataclass
class Cluster:
    """The state of one emulated cluster (its JSON file)."""

    prefix: str
    subnet: str
    hosts: int
    bandwidth: str | None  # the rate the links are shaped to now; None while being shaped (or after that failed)
    inodes: list[int]  # of every namespace made so far, in the order of ``network.names`` (hosts first)
    workers_per_host: int = 1  # the worker slots of each host's Ray node (ray_nodes.HOST_RESOURCE)
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
        return folder_of(self.prefix)

    @property
    def temp_dir(self) -> Path:
        return self.folder / "ray"

    def node_env(self) -> dict[str, str]:
        """What every process the cluster starts runs with: its Ray nodes, and through them their workers."""
        return {**BASE_ENV, ENV_VAR: self.prefix}

    def env(self) -> dict[str, str]:
        """What a driver or command inside the cluster needs."""
        return {**self.node_env(), "RAY_ADDRESS": self.address}

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run in emulated host ``host`` with the cluster's environment."""
        if not 0 <= host < self.hosts:
            raise ValueError(f"host must be in [0, {self.hosts - 1}], got {host}")
        return self.network.command(host, argv, self.env())

    def inside(self) -> bool:
        """Whether this process runs in the cluster's host 0 (where drivers run)."""
        return bool(self.inodes) and netns.netns_inode("/proc/self/ns/net") == self.inodes[0]

    def _write(self, replace: bool) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "state.json"
        tmp = self.folder / f"state.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1))
        try:
            if replace:
                os.replace(tmp, path)
                return True
            os.link(tmp, path)  # creates the file whole, or fails where it exists
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def save(self) -> None:
        self._write(replace=True)

    def claim(self) -> bool:
        """Write the state file only where none exists: whether the prefix is now this cluster's."""
        return self._write(replace=False)

    def shape(self, rate: str, recalibrate: bool = False,
              log: Callable[[str], None] = lambda _: None) -> dict[str, Any] | None:
        """Shape every link to ``rate`` (Ray keeps running); with ``recalibrate``, measure it anew
        (also when a calibration at that rate exists). Returns the calibration at ``rate``, if any.

        Refuses before anything changes a rate outside the valid range (ValueError) or one the unshaped
        links could not carry (NetworkError), as ``up`` does. While tc changes the links the state names no
        rate; after a failed calibration the links are shaped to ``rate`` all the same, so that the state
        never names a rate tc does not have.
        """
        rate = _check_rate(rate)
        problem = self.rate_problem(rate)
        if problem:
            raise NetworkError(problem)
        _warn_headroom(self.calibrations, rate, log)
        self.bandwidth = None
        self.save()
        shaped = False
        try:
            if recalibrate and self.hosts >= 2:
                self.calibrations[rate] = calibrate(self.network, [rate])[0]  # shapes the links itself
                shaped = True
        finally:
            if not shaped:  # also where a calibration's ranks stopped before or while shaping
                self.network.shape(rate)
            self.bandwidth = rate
            self.save()
        return self.calibrations.get(rate)

    def rate_problem(self, rate: str) -> str | None:
        """Why the links cannot emulate ``rate``: faster than they carried unshaped (None: they can, or no
        unshaped calibration tells)."""
        unshaped = self.calibrations.get("unshaped", {}).get("measured_bps")
        if unshaped is not None and unshaped < rate_bps(rate):
            return (f"this machine cannot emulate {rate}: unshaped, its links carried only {rate_text(unshaped)}; "
                    "choose a lower bandwidth")
        return None

    def namespaces(self) -> dict[str, int]:
        """The namespaces the state recorded: name, inode."""
        return dict(zip(self.network.names, self.inodes))

    def standing(self) -> list[str]:
        """The recorded namespaces that exist under their name with their recorded inode."""
        return [name for name, inode in self.namespaces().items()
                if netns.netns_inode(netns.NETNS_DIR / name) == inode]

    def processes(self) -> list[int]:
        """PIDs of the cluster's processes: every process in a recorded namespace that still stands; in one
        whose name is gone, only those that carry the cluster's ``ENV_VAR`` (once a namespace is freed the
        kernel may give its inode to a new one, not ours)."""
        standing = set(self.standing())
        named = [inode for name, inode in self.namespaces().items() if name in standing]
        nameless = [inode for name, inode in self.namespaces().items() if name not in standing]
        marked = [pid for pid in netns.processes(nameless) if procs.marked(pid, ENV_VAR, self.prefix)]
        return sorted(set(netns.processes(named)) | set(marked))

    def summary(self) -> dict[str, Any]:
        """What a results folder records of the cluster its trials ran on."""
        return {"hosts": self.hosts, "workers_per_host": self.workers_per_host, "bandwidth": self.bandwidth,
                "addresses": [self.network.address(i) for i in range(self.hosts)],
                "burst_bytes": netns.burst_bytes(self.bandwidth) if self.bandwidth else None,
                "calibrations": self.calibrations}


def load(prefix: str = DEFAULT_PREFIX) -> Cluster | None:
    """The cluster with ``prefix``, if its state file exists (ValueError for a prefix that is no cluster's
    name; NetworkError for a state file that cannot be read)."""
    path = folder_of(prefix) / "state.json"
    try:
        return Cluster(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as error:
        raise NetworkError(f"the state of the emulated cluster {prefix!r} ({path}) cannot be read: {error}") from None


def current() -> Cluster | None:
    """The emulated cluster whose host 0 this process runs in, as a driver started by ``command``."""
    prefix = os.environ.get(ENV_VAR)
    cluster = load(prefix) if prefix and netns.prefix_problem(prefix) is None else None
    return cluster if cluster is not None and cluster.inside() else None


def find(address: str) -> Cluster | None:
    """The emulated cluster whose Ray head is at ``address`` (host:port), if any."""
    for path in sorted(STATE_ROOT.glob("*/state.json")):
        if netns.prefix_problem(path.parent.name) is not None:
            continue
        cluster = load(path.parent.name)
        if cluster is not None and cluster.ray and cluster.address == address:
            return cluster
    return None


def up(hosts: int, bandwidth: str, *, workers_per_host: int = 1, prefix: str = DEFAULT_PREFIX,
       subnet: str = DEFAULT_SUBNET, ray: bool = True, owner_pid: int | None = None,
       log: Callable[[str], None] = print) -> Cluster:
    """Make ``hosts`` emulated hosts with links shaped to ``bandwidth``, calibrate, start Ray with
    ``workers_per_host`` worker slots on each host.

    Refuses bad arguments (ValueError) before anything is made. Refuses (NetworkError, having removed what
    it made and nothing else) without root or tbf, when a cluster with ``prefix`` is up (one left by a
    sweep that crashed is removed first), and when the unshaped links are slower than ``bandwidth``; warns
    when they are less than ``HEADROOM`` times faster.
    """
    problem = netns.problem()
    if problem:
        raise NetworkError(f"cannot emulate a cluster here: {problem}")
    bandwidth = _check_rate(bandwidth)
    if not 1 <= workers_per_host <= MAX_WORKERS_PER_HOST:
        raise ValueError(f"workers_per_host must be in [1, {MAX_WORKERS_PER_HOST}], got {workers_per_host}")
    network = Network(prefix, subnet, hosts)  # checks the prefix, subnet and hosts
    cluster = Cluster(prefix, subnet, hosts, None, [], workers_per_host, owner_pid=owner_pid, ray=ray,
                      started_at=datetime.datetime.now().isoformat(timespec="seconds"))
    _claim(cluster, log)
    started = time.monotonic()
    try:
        _make(cluster, network, bandwidth, log)
        log(f"emulated cluster {prefix!r} up in {time.monotonic() - started:.0f} s: {hosts} hosts "
            f"{network.address(0)}..{network.address(hosts - 1)}, {workers_per_host} worker(s) per host"
            + (f", Ray at {cluster.address}" if ray else ""))
        return cluster
    except BaseException:
        down(prefix, log=lambda _: None, owner_pid=owner_pid)
        raise


def _claim(cluster: Cluster, log: Callable[[str], None]) -> None:
    """Make the prefix the cluster's, first removing a cluster with it that a sweep left when it ended;
    NetworkError naming who started the one that is up."""
    if cluster.claim():
        return
    prefix = cluster.prefix
    old = load(prefix)
    if old is not None and old.owner_pid is not None and not procs.alive(old.owner_pid):
        log(f"removing the emulated cluster {prefix!r} left by process {old.owner_pid}, which has ended")
        down(prefix, log=log, owner_pid=old.owner_pid)
    if not cluster.claim():
        old = load(prefix)
        owner = ("another process" if old is None else f"sweep process {old.owner_pid}" if old.owner_pid
                 else "`lowprec cluster up`")
        raise NetworkError(f"an emulated cluster with prefix {prefix!r} is up (started by {owner}): "
                           f"`lowprec cluster down --prefix {prefix}` first, or choose another --prefix")


def _make(cluster: Cluster, network: Network, bandwidth: str, log: Callable[[str], None]) -> None:
    """Make the claimed cluster's hosts, shape (and with two hosts or more, calibrate) their links, start Ray."""
    def record(inodes: list[int]) -> None:  # from here on `down` finds everything made
        cluster.inodes = inodes
        cluster.save()

    network.create(record)
    if cluster.hosts >= 2:
        _calibrate_links(cluster, network, bandwidth, log)
    else:
        network.shape(bandwidth)
        cluster.bandwidth = bandwidth
    cluster.save()
    if cluster.ray:
        ray_nodes.start(cluster.network, cluster.hosts, cluster.workers_per_host, cluster.temp_dir, cluster.address,
                        cluster.node_env())


def _calibrate_links(cluster: Cluster, network: Network, bandwidth: str, log: Callable[[str], None]) -> None:
    """Measure the links unshaped, then shaped to ``bandwidth``; NetworkError where they are too slow for it."""
    unshaped, shaped = calibrate(network, [None, bandwidth])
    cluster.calibrations = {"unshaped": unshaped, bandwidth: shaped}
    cluster.bandwidth = bandwidth
    cluster.save()
    problem = cluster.rate_problem(bandwidth)
    if problem:
        raise NetworkError(problem)
    _warn_headroom(cluster.calibrations, bandwidth, log)
    log(f"links: {bandwidth} each way (burst {netns.burst_bytes(bandwidth)} B); calibrated "
        f"{rate_text(shaped['measured_bps'])} = {shaped['fraction']:.3f} of the rate "
        f"(unshaped {rate_text(unshaped['measured_bps'])})")


def _warn_headroom(calibrations: dict[str, dict[str, Any]], rate: str, log: Callable[[str], None]) -> None:
    unshaped = calibrations.get("unshaped", {}).get("measured_bps")
    if unshaped is not None and unshaped < HEADROOM * rate_bps(rate):
        log(f"warning: unshaped, the links carried {rate_text(unshaped)}, less than {HEADROOM:g}x "
            f"{rate}: under training's CPU load the machine, not the links, may set the pace")


def down(prefix: str = DEFAULT_PREFIX, log: Callable[[str], None] = print, *,
         owner_pid: int | None = None) -> int | None:
    """End the cluster's processes by PID, remove its namespaces and its state folder; how many processes
    were ended, or None where no cluster with ``prefix`` is recorded (with ``owner_pid``: none that
    process brought up). Only what the state file recorded is touched: see ``Cluster.processes`` and
    ``Network.delete``; a namespace not recorded there is left alone whatever its name."""
    cluster = load(prefix)
    if cluster is None or (owner_pid is not None and cluster.owner_pid != owner_pid):
        return None
    problem = netns.problem()
    if problem:
        raise NetworkError(f"cannot bring the emulated cluster {prefix!r} down here: {problem}")
    pids = cluster.processes()
    procs.end(pids, cluster.processes)
    removed = cluster.network.delete(cluster.namespaces())
    shutil.rmtree(cluster.folder, ignore_errors=True)
    log(f"emulated cluster {prefix!r} down: {len(pids)} process(es) ended, {len(removed)} namespace(s) removed")
    return len(pids)


def status(prefix: str = DEFAULT_PREFIX) -> str:
    """Hosts, links, calibrations and processes of the cluster, as text."""
    cluster = load(prefix)
    if cluster is None:
        return f"no emulated cluster with prefix {prefix!r} (state: {folder_of(prefix)})"
    links = (f"links {cluster.bandwidth} each way" if cluster.bandwidth else "links at no recorded rate (being "
             f"shaped, or that failed: `lowprec cluster shape RATE --prefix {prefix}`)")
    lines = [f"emulated cluster {prefix!r}: {cluster.hosts} hosts, {links}, {cluster.workers_per_host} worker(s) "
             f"per host, started {cluster.started_at}" + (f" by sweep process {cluster.owner_pid}" if cluster.owner_pid else ""),
             f"Ray: {cluster.address}" if cluster.ray else "Ray: not started"]
    standing = cluster.standing()
    missing = [name for name in cluster.network.names if name not in standing]
    if missing:
        lines.append(f"missing namespaces: {', '.join(missing)} (`lowprec cluster down --prefix {prefix}`)")
    else:
        lines += cluster.network.qdiscs()
    for rate, result in cluster.calibrations.items():
        fraction = f" = {result['fraction']:.3f} of the rate" if "fraction" in result else ""
        lines.append(f"calibration {rate}: {rate_text(result['measured_bps'])}{fraction} "
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
