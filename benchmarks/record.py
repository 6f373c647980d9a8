"""What every benchmark's JSON opens with, how it is saved, and the device and time budget several take."""
from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from orchestrator.study import env_info
from orchestrator.study.records import write_atomic


def header(module: str, argv: list[str], args: argparse.Namespace,
           info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The device measured (a GPU's name, else the CPU model), the date, the command as typed, the
    machine's description (``info``, default ``env_info.describe()``) and the arguments (but ``json``)."""
    info = env_info.describe() if info is None else info
    return {"device": info["gpus"][0] if args.device == "cuda" else info["cpu_model"], "date": info["date"],
            "command": " ".join([f"python -m {module}", *argv]), "machine": info,
            "args": {k: v for k, v in vars(args).items() if k != "json"}}


def deadline(budget_s: float | None) -> float:
    """The ``time.monotonic()`` after which a benchmark starts no measurement (none: never)."""
    return time.monotonic() + (budget_s if budget_s is not None else math.inf)


def past(stop_at: float) -> bool:
    """Whether ``deadline``'s time has come."""
    return time.monotonic() > stop_at


def save(record: dict[str, Any], path: str | None) -> None:
    """Write ``record`` as JSON to ``path`` (none: nowhere) through a temporary file and a rename."""
    if path:
        write_atomic(Path(path), json.dumps(record, indent=1))


def print_ending(record: dict[str, Any], planned: int, what: str, budget_s: float | None, path: str | None) -> None:
    """Say how many of the ``planned`` measurements (``what``) the budget left unmade, and where the
    record went."""
    if record["not_measured"]:
        print(f"# the budget of {budget_s:g} s ran out: {record['not_measured']} of {planned} {what} not made",
              flush=True)
    if path:
        print(f"# saved {path}", flush=True)


def names(text: str) -> list[str]:
    """The entries of a comma separated option, blanks dropped."""
    return [s.strip() for s in text.split(",") if s.strip()]


def subset(ap: argparse.ArgumentParser, option: str, text: str, valid: Iterable[str]) -> list[str]:
    """The entries of ``option``; exit 2 naming it unless they are a non-empty subset of ``valid``."""
    valid = list(valid)
    chosen = names(text)
    if not chosen or any(c not in valid for c in chosen):
        ap.error(f"{option}: a comma separated subset of {', '.join(valid)} expected")
    return chosen


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
