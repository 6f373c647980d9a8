"""Emulated hosts on one Linux machine: network namespaces joined by rate-limited links (no Ray).

Topology: host namespaces ``<prefix>-h0 .. h<N-1>``, each with a
veth ``eth0`` whose peer ``p<i>`` is a port of a bridge in a switch namespace
``<prefix>-sw``. Host i has the address ``<subnet>.<i+1>/24`` in 198.18.0.0/15
(the range set aside for benchmarks) and no default route: nothing is added to
the root namespace and no packet can leave the emulated network.

Each link is shaped both ways with tbf: the uplink on the host's ``eth0``, the
downlink on its switch port. tbf's burst must hold at least two 64 KiB GSO
packets and 1 ms at the rate, or TCP loses rate (iperf3 at 1gbit: 0.937 Gbit/s
with a 128 KiB burst, 0.364 with 15 KB). tbf counts frames without the wire's
preamble and gaps (~1.6% optimistic); latency cannot be added (no netem here).

Deleting a namespace does not end the processes in it, so every namespace's
inode is recorded as soon as it is made and ``processes`` finds ours by it
(orchestrator.cluster.emulation decides which inodes are still ours).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compressors.core.params import rate_bps

NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts a namespace under its name
BENCHMARK_NET = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544: for benchmarks only
MIN_BURST_BYTES = 128 * 1024
_PREFIX = re.compile(r"[a-z][a-z0-9]{0,7}")  # interface-safe: names stay under 15 characters


class NetworkError(RuntimeError):
    """The emulated network cannot be made, shaped or removed; says what is missing."""


def burst_bytes(rate: str) -> int:
    """tbf's burst for ``rate``: max(128 KiB, 1 ms at the rate)."""
    return max(MIN_BURST_BYTES, int(rate_bps(rate) / 8 / 1000))


def prefix_problem(prefix: object) -> str | None:
    """What is wrong with a cluster's prefix (None: nothing). It names namespaces, interfaces and the state
    folder, so only a short name of lowercase letters and digits will do: never a path or a pattern."""
    if isinstance(prefix, str) and _PREFIX.fullmatch(prefix):
        return None
    return "must be a lowercase letter and up to 7 more lowercase letters or digits, like lp"


def subnet_problem(subnet: object) -> str | None:
    """What is wrong with the first three octets of a network's /24 (None: nothing)."""
    try:
        net = ipaddress.ip_network(f"{subnet}.0/24") if isinstance(subnet, str) else None
    except ValueError:
        net = None
    if net is None or not net.subnet_of(BENCHMARK_NET):
        return f"must be the first three octets of a /24 in {BENCHMARK_NET}: 198.18.0 .. 198.19.255"
    return None


def problem() -> str | None:
    """Why this machine cannot make an emulated network (None if it can, as far as can be told
    without making one: tbf itself is tried when the links are shaped)."""
    if os.name != "posix" or not Path("/proc/self/ns/net").exists():
        return "network namespaces need Linux"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (install iproute2)"
    if os.geteuid() != 0:
        return ("making network namespaces and shaping links needs root (CAP_NET_ADMIN); run as root, e.g. "
                "with sudo")
    return None


def netns_inode(path: str | os.PathLike) -> int | None:
    """The inode that identifies a network namespace (a /run/netns entry or /proc/PID/ns/net)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass(frozen=True)
class Network:
    """N emulated hosts: names, addresses, and the commands that make, shape and remove them."""

    prefix: str
    subnet: str  # the first three octets: host i is f"{subnet}.{i + 1}"
    hosts: int
    mtu: int = 1500

    def __post_init__(self) -> None:
        for name, value, problem in (("prefix", self.prefix, prefix_problem(self.prefix)),
                                     ("subnet", self.subnet, subnet_problem(self.subnet))):
            if problem:
                raise ValueError(f"{name} {problem}, got {value!r}")
        if not 1 <= self.hosts <= 250:
            raise ValueError(f"hosts must be in [1, 250], got {self.hosts}")

    def host(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def names(self) -> list[str]:
        """Every namespace of the network, hosts first."""
        return [self.host(i) for i in range(self.hosts)] + [self.switch]

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def existing(self) -> list[str]:
        """The namespaces of this network that exist now."""
        return [name for name in self.names if (NETNS_DIR / name).exists()]

    def create(self, made: Callable[[list[int]], None]) -> None:
        """Make the hosts and the switch with their unshaped links. ``made`` is given the inodes of the
        namespaces made so far (in the order of ``names``) as soon as each exists, to be recorded.

        On a failure the namespaces it made are removed again and NetworkError says why.
        """
        taken = self.existing()
        if taken:
            raise NetworkError(f"namespace(s) {', '.join(taken)} exist already and no emulated cluster with prefix "
                               f"{self.prefix!r} recorded them: choose another --prefix, or remove them "
                               "(`ip netns del NAME`) if nothing uses them")
        inodes: list[int] = []
        try:
            for name in self.names:
                _run(["ip", "netns", "add", name])
                inodes.append(netns_inode(NETNS_DIR / name))
                made(list(inodes))
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "mtu", str(self.mtu), "up"])
            for i in range(self.hosts):
                host = self.host(i)
                _run(["ip", "-n", host, "link", "set", "lo", "up"])
                _run(["ip", "link", "add", "eth0", "netns", host, "mtu", str(self.mtu), "type", "veth",
                      "peer", "name", f"p{i}", "netns", self.switch, "mtu", str(self.mtu)])
                _run(["ip", "-n", host, "addr", "add", f"{self.address(i)}/24", "dev", "eth0"])
                _run(["ip", "-n", host, "link", "set", "eth0", "up"])
                _run(["ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up"])
        except NetworkError:
            self.delete(dict(zip(self.names, inodes)))
            raise

    def shape(self, rate: str) -> None:
        """Limit every link to ``rate`` each way (replaces the qdiscs in place: connections survive)."""
        burst = str(burst_bytes(rate))
        for i in range(self.hosts):
            for namespace, device in ((self.host(i), "eth0"), (self.switch, f"p{i}")):
                try:
                    _run(["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", device, "root",
                          "tbf", "rate", rate, "burst", burst, "latency", "50ms"])
                except NetworkError as error:
                    raise NetworkError(f"{error}; shaping needs the kernel's tbf qdisc (sch_tbf)") from None

    def unshape(self) -> None:
        """Remove every link's limit (the veth's own speed)."""
        for i in range(self.hosts):
            for namespace, device in ((self.host(i), "eth0"), (self.switch, f"p{i}")):
                subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", device, "root"],
                               capture_output=True)

    def qdiscs(self) -> list[str]:
        """Each host's uplink qdisc as tc shows it."""
        return [f"{self.host(i)} {self.address(i)}: "
                + _run(["ip", "netns", "exec", self.host(i), "tc", "qdisc", "show", "dev", "eth0"]).strip()
                for i in range(self.hosts)]

    def delete(self, recorded: Mapping[str, int | None]) -> list[str]:
        """Remove the namespaces of ``recorded`` (name: inode) that still have that inode, and no other (their
        processes must be ended first: see ``processes``); the names removed."""
        removed = []
        for name, inode in recorded.items():
            if inode is not None and netns_inode(NETNS_DIR / name) == inode:
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
                removed.append(name)
        return removed

    def command(self, i: int, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """``argv`` run in host i with ``env`` added to the caller's environment."""
        pairs = [f"{key}={value}" for key, value in (env or {}).items()]
        return ["ip", "netns", "exec", self.host(i), "env", *pairs, *argv]


def processes(inodes: Iterable[int]) -> list[int]:
    """PIDs of every process in a network namespace of ``inodes`` (named or already deleted)."""
    wanted = {inode for inode in inodes if inode}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()) and netns_inode(entry / "ns" / "net") in wanted:
            found.append(int(entry.name))
    return sorted(found)
