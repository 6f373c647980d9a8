"""The processes of an emulated cluster, by PID: whether one carries the cluster's mark, which program it
runs, and ending them in the order Ray's own ``ray stop`` ends its services."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

WAIT_S = 10.0  # for the staged ends together, then again for the kills
_STOP_ORDER = {"raylet": 0, "gcs_server": 2}  # the stages, by program; every other process is 1


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (also one of another user's)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def marked(pid: int, name: str, value: str) -> bool:
    """Whether process ``pid`` was started with the environment variable ``name`` set to ``value``."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in environ.split(b"\0")


def program(pid: int) -> str:
    """The file name of the program process ``pid`` runs ("" once it is gone)."""
    try:
        return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")).name
    except OSError:
        return ""


def send(pid: int, sig: int) -> None:
    """Signal ``pid``; one that is gone already is left be."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def end(pids: list[int], left: Callable[[], list[int]], wait_s: float = WAIT_S) -> None:
    """End ``pids``, ``left()`` listing those of them (and of their kind) still alive: in ``ray stop``'s order,
    the raylets, then the other services, then the GCS, each stage asked to end (SIGTERM) and waited for;
    then killed until none is left. Ended all at once, the services wait on the GCS and the GCS on them, for
    over 10 s; in this order all end within a second."""
    stages: dict[int, list[int]] = {}
    for pid in pids:
        stages.setdefault(_STOP_ORDER.get(program(pid), 1), []).append(pid)
    for _, stage in sorted(stages.items()):
        for pid in stage:
            send(pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s / len(stages)
        while set(stage) & set(left()) and time.monotonic() < deadline:
            time.sleep(0.05)
    # Until none is left: a killed process lingers in /proc a moment, and one forked just before its
    # parent was listed for killing escapes that round.
    deadline = time.monotonic() + wait_s
    while (alive_now := left()) and time.monotonic() < deadline:
        for pid in alive_now:
            send(pid, signal.SIGKILL)
        time.sleep(0.1)
