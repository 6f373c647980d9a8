"""What averaging cost, per call and per training step."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepStats:
    """What one averaging cost this rank (``numel``: elements averaged)."""
    bytes_sent: float = 0.0
    encode_s: float = 0.0
    comm_s: float = 0.0
    decode_s: float = 0.0
    numel: int = 0

    def __iadd__(self, other: StepStats) -> StepStats:
        self.bytes_sent += other.bytes_sent
        self.encode_s += other.encode_s
        self.comm_s += other.comm_s
        self.decode_s += other.decode_s
        self.numel += other.numel
        return self


@dataclass
class StepLedger:
    """``StepStats`` summed over the calls of a step (``current``), one entry per finished step (``history``).

    ``step`` counts finished steps; it survives a checkpoint (``history`` does not).
    """
    history: list[StepStats] = field(default_factory=list)
    current: StepStats = field(default_factory=StepStats)
    step: int = 0

    def add(self, stats: StepStats) -> None:
        self.current += stats

    def end_step(self) -> StepStats:
        """Close the step in progress: append it to ``history`` and return it."""
        done = self.current
        self.history.append(done)
        self.current = StepStats()
        self.step += 1
        return done
