"""What a figure was measured on: one description for sweep results and benchmarks.

``describe()`` is the machine (CPU, cores, GPUs torch sees, versions, host,
date); ``collect()`` adds the Ray and numpy versions and is written as
``environment.json`` next to a sweep's results.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
from typing import Any

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


def collect() -> dict[str, Any]:
    """``describe()`` plus the versions of Ray and numpy.

    This describes the machine running the sweep driver; with ``--address`` the
    trials may run elsewhere (``ray_cluster_resources`` is added by the sweep).
    """
    return {**describe(), "ray": _version("ray"), "numpy": _version("numpy")}
