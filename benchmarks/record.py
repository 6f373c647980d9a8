"""What every benchmark's JSON opens with, and the device and time budget several of them take."""
from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch

from orchestrator.study import env_info


def header(module: str, argv: list[str], device: str, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The device measured (a GPU's name, else the CPU model), the date, the command as typed and the
    machine's description (``info``, default ``env_info.describe()``)."""
    info = env_info.describe() if info is None else info
    return {"device": info["gpus"][0] if device == "cuda" else info["cpu_model"], "date": info["date"],
            "command": " ".join([f"python -m {module}", *argv]), "machine": info}


def deadline(budget_s: float | None) -> float:
    """The ``time.monotonic()`` after which a benchmark starts no measurement (none: never)."""
    return time.monotonic() + (budget_s if budget_s is not None else math.inf)


def add_options(ap: argparse.ArgumentParser) -> None:
    """``--device`` and ``--budget-s``, which several benchmarks take alike."""
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--budget-s", type=float, default=None, help="start no measurement after this many seconds")


def check_options(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 naming the option where ``add_options``' values cannot be used."""
    if args.budget_s is not None and not 0 < args.budget_s < math.inf:
        ap.error(f"--budget-s: a number of seconds > 0 expected, got {args.budget_s}")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available")
