"""Why a trial failed, in the words of what failed: the exception's type and first message line, or how
its worker died. The record keeps the whole traceback; the reason is what the tables and progress show.
"""
from __future__ import annotations

import re


def reason_of(error: BaseException) -> str:
    """``Type: first message line`` of an exception (its type alone where the message is empty)."""
    text = str(error).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def death_reason(text: str, rank: int | None) -> str:
    """Why a worker process ended without a Python error, from Ray's account of its death (``text``)."""
    who = "a worker" if rank is None else f"the worker of rank {rank}"
    pid = re.search(r"\bpid:? (\d+)", text)
    who += f" (pid {pid.group(1)})" if pid else ""
    if re.search(r"memory monitor|low on memory|OutOfMemory", text, re.IGNORECASE):
        return f"{who} was killed by Ray's memory monitor: its node ran low on memory"
    return (f"{who} died without a Python error: killed (the kernel's OOM killer, a signal) or crashed (a "
            "segfault in native code); its log is in Ray's session folder")
