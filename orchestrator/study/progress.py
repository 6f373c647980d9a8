"""One-line-per-event progress of a running sweep in the terminal (no Ray)."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO


class Progress:
    """Counts trials and prints a line per epoch and per finished trial.

    Each line starts with the sweep's state: elapsed time, trials finished of
    all, running, and failed (diverged ones count as finished, not failed).
    """

    def __init__(self, total: int, finished: int = 0, stream: TextIO = sys.stdout):
        self.total = total
        self.finished = finished
        self.failed = 0
        self.running: set[str] = set()
        self.stream = stream
        self._start = time.monotonic()

    def _say(self, text: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - self._start), 60)
        state = (f"[{minutes:3d}:{seconds:02d} | done {self.finished}/{self.total} | "
                 f"running {len(self.running)} | failed {self.failed}]")
        print(f"{state} {text}", file=self.stream, flush=True)

    def started(self, name: str) -> None:
        self.running.add(name)
        self._say(f"{name}: started")

    def epoch(self, name: str, metrics: dict[str, Any], epochs: int) -> None:
        parts = [f"epoch {metrics.get('epoch', '?')}/{epochs}"]
        # metrics by their own names and units, as in the results tables
        for key, digits in (("test_accuracy", 4), ("test_loss", 4), ("train_time_s", 1), ("step_time_s", 4),
                            ("compression_ratio", 1)):
            if _finite(metrics.get(key)):
                parts.append(f"{key} {metrics[key]:.{digits}f}")
        if metrics.get("status") == "diverged":
            parts.append("DIVERGED")
        self._say(f"{name}: " + "  ".join(parts))

    def finished_trial(self, name: str, status: str, reason: str | None, history: list[dict[str, Any]]) -> None:
        self.running.discard(name)
        self.finished += 1
        self.failed += status == "failed"
        last = history[-1] if history else {}
        if status == "ok":
            tta = last.get("time_to_target_s")
            reached = f"target reached at {tta:.1f}s" if _finite(tta) else "target not reached"
            found = [f"{name} {last[key]:.4f}" for key, name in (("test_accuracy", "accuracy"), ("test_loss", "test loss"))
                     if _finite(last.get(key))]
            text = ", ".join(["ok", *found, reached])
        else:
            text = f"{status.upper()}: {reason}"
        self._say(f"{name}: {text}")

    def note(self, text: str) -> None:
        self._say(text)


def _finite(value: object) -> bool:
    # the loop reports NaN where a metric has no meaning (compression ratio of one worker)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
