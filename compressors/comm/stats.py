"""What averaging cost, per call and per training step."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


def span_union(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans: the wall time of collectives that may
    overlap one another (buckets in flight together), each second counted once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass
class StepStats:
    """What one averaging cost this rank (``numel``: elements averaged; ``bytes_inter``: the part of
    ``bytes_sent`` that went to ranks on other hosts).

    ``comm_spans`` are the (start, end) perf_counter times of each collective; a finished step's
    ``comm_s`` is their union (``span_union``), a call's the sum of its own.
    """
    bytes_sent: float = 0.0
    bytes_inter: float = 0.0
    encode_s: float = 0.0
    comm_s: float = 0.0
    decode_s: float = 0.0
    numel: int = 0
    comm_spans: list[tuple[float, float]] = field(default_factory=list, repr=False, compare=False)

    def __iadd__(self, other: StepStats) -> StepStats:
        """Add ``other`` field by field: a new field is summed without being listed here."""
        for f in fields(self):
            total = getattr(self, f.name)
            total += getattr(other, f.name)  # a list (comm_spans) extends in place
            setattr(self, f.name, total)
        return self


@dataclass
class StepLedger:
    """``StepStats`` summed over the calls of a step (``current``), one entry per finished step (``history``).

    ``step`` counts finished steps; it survives a checkpoint (``history`` does not). ``add`` and
    ``end_step`` may be called from the threads that complete overlapped collectives.
    """
    history: list[StepStats] = field(default_factory=list)
    current: StepStats = field(default_factory=StepStats)
    step: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, stats: StepStats) -> None:
        with self._lock:
            self.current += stats

    def end_step(self) -> StepStats:
        """Close the step in progress: append it to ``history`` and return it."""
        with self._lock:
            done = self.current
            if done.comm_spans:
                done.comm_s = span_union(done.comm_spans)
            self.history.append(done)
            self.current = StepStats()
            self.step += 1
            return done
