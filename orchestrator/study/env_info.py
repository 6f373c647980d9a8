"""What a figure was measured on: one description for sweep results and benchmarks.

``describe()`` is the machine (CPU, cores, GPUs torch sees, versions, host,
date); ``collect()`` adds the Ray and numpy versions and is written as
``environment.json`` next to a sweep's results.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import platform
import socket
import time
from typing import Any, NamedTuple

import torch


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    # /proc/cpuinfo names the model on Linux; platform.processor() is often empty there.
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, Any]:
    """CPU, core count, GPUs torch sees, versions, host and the date (UTC)."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# The kernel counts CPU time in clock ticks of USER_HZ a second on each core.
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuTicks(NamedTuple):
    """The machine's CPU time so far in clock ticks: stolen, idle (with waiting for I/O) and all; and this
    process's own CPU time in seconds (every thread of it)."""
    stolen: int
    idle: int
    all: int
    own_s: float = 0.0


def cpu_ticks(stat: str = "/proc/stat") -> CpuTicks | None:
    """The machine's CPU time so far, from Linux's ``stat``; None elsewhere.

    Stolen time is what a virtual machine's hypervisor gave to other guests while this one had work to
    run: a noisy neighbour that makes one measurement slower than the next (``steal_share``). Idle time
    says whether the machine's cores, not waiting, set the pace (``idle_share``)."""
    try:
        with open(stat) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal; guest time is already counted in user and nice
    try:
        ticks = [int(x) for x in fields[1:9]]
    except ValueError:
        return None
    return CpuTicks(stolen=ticks[7], idle=ticks[3] + ticks[4], all=sum(ticks), own_s=time.process_time())


def _share(start: CpuTicks | None, end: CpuTicks | None, part: str) -> float:
    if start is None or end is None:
        return math.nan
    total = end.all - start.all
    # The kernel counts CPU time in clock ticks (USER_HZ, 100 a second on each core): steps shorter than
    # one tick can see none pass, and nothing was counted as stolen or idle. iowait may also run
    # backwards on a tickless kernel, so the share is kept within [0, 1].
    if total <= 0:
        return 0.0
    return min(max((getattr(end, part) - getattr(start, part)) / total, 0.0), 1.0)


def mem_available_bytes() -> int | None:
    """The memory available to new processes now (/proc/meminfo's MemAvailable); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def load_average() -> float:
    """The 1-minute load average (NaN where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return math.nan


def machine_id() -> float:
    """This machine's boot id as a number (network namespaces and containers on one kernel share it), exact in
    a float so that ranks can compare theirs with a min and a max; NaN where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return float(int(f.read().strip().replace("-", "")[:12], 16))
    except (OSError, ValueError):
        return math.nan


def others_cores(start: CpuTicks | None, end: CpuTicks | None, ours_s: float) -> float:
    """How many cores' worth of CPU time processes other than ours used between two ``cpu_ticks``: the
    machine's busy time (neither idle nor stolen) less ``ours_s`` (the CPU seconds of our processes on this
    machine), over the time that passed; at least 0; NaN where /proc/stat cannot be read or no tick passed."""
    if start is None or end is None or end.all <= start.all:
        return math.nan
    cores = os.cpu_count() or 1
    wall_s = (end.all - start.all) / cores / _TICKS_PER_S
    busy_s = ((end.all - start.all) - (end.idle - start.idle) - (end.stolen - start.stolen)) / _TICKS_PER_S
    return max(busy_s - ours_s, 0.0) / wall_s


def steal_share(start: CpuTicks | None, end: CpuTicks | None) -> float:
    """The share of all CPU time between two ``cpu_ticks`` that the hypervisor stole: 0 on bare metal and
    where no clock tick passed; NaN only where /proc/stat cannot be read."""
    return _share(start, end, "stolen")


def idle_share(start: CpuTicks | None, end: CpuTicks | None) -> float:
    """The share of all CPU time between two ``cpu_ticks`` that no process wanted: near 0 where the
    cores are the bottleneck; 0 where no clock tick passed (nothing was counted idle); NaN only where
    /proc/stat cannot be read."""
    return _share(start, end, "idle")


def collect() -> dict[str, Any]:
    """``describe()`` plus the versions of Ray and numpy.

    This describes the machine running the sweep driver; with ``--address`` the
    trials may run elsewhere (``ray_cluster_resources`` is added by the sweep).
    """
    return {**describe(), "ray": _version("ray"), "numpy": _version("numpy")}
