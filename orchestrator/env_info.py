"""What the results were measured on: written as ``environment.json`` next to them."""

from __future__ import annotations

import importlib.metadata
from typing import Any


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> dict[str, Any]:
    """Versions of Python, torch, Ray and numpy, the host, its CPU and the GPUs torch sees.

    This describes the machine running the sweep driver; with ``--address`` the
    trials may run elsewhere (``ray_cluster_resources`` is added by the sweep).
    """
    from compressors import machine

    return {**machine.describe(), "ray": _version("ray"), "numpy": _version("numpy")}
