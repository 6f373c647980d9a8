"""What the results were measured on: written as ``environment.json`` next to them."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import sys
from typing import Any


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    # /proc/cpuinfo names the model on Linux; platform.processor() is often empty there
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect() -> dict[str, Any]:
    """Versions of Python, torch, Ray and numpy, the host, its CPU and the GPUs torch sees.

    This describes the machine running the sweep driver; with ``--address`` the
    trials may run elsewhere (``ray_cluster_resources`` is added by the sweep).
    """
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "ray": _version("ray"),
        "numpy": _version("numpy"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.version.cuda,
        "gpus": gpus,
    }
