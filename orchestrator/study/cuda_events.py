"""The GPU's own account of a training step, beside the CPU timestamps the results are made of.

The training loop times a step on the CPU: from its start to backward's return (where the step
clock splits compute from exposed communication), and to its end after a ``synchronize``
(``step_time_s``). On a GPU, kernels run after the CPU queued them, so backward's return can come
before the GPU has finished backward. CUDA events recorded on the current stream when backward and
the optimizer return say when the GPU got there; they are read after the step's last
``synchronize``, which the loop makes anyway, so they add no wait. The summary is what a user checks
the CPU's split against: how far apart the two accounts are, in seconds.
"""
from __future__ import annotations

import statistics

import torch

MARKS = ("backward", "optimizer")  # where the CPU marks a step after its start, in order


class EventClock:
    """On CUDA devices, one event per mark of each step; on others, nothing is recorded."""

    def __init__(self, device: torch.device) -> None:
        self.on = device.type == "cuda"
        self._marks: list[tuple[float, torch.cuda.Event]] = []
        self._steps: list[dict[str, float]] = []

    def mark(self, cpu_time: float) -> None:
        """The CPU reached the step's next mark (its start first) at ``cpu_time`` (perf_counter)."""
        if self.on:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((cpu_time, event))

    def end_step(self, step_time_s: float) -> None:
        """Read the step's events; call after the step's last synchronize, with its ``step_time_s``."""
        if not self.on:
            return
        (cpu_start, start), *rest = self._marks
        if len(rest) != len(MARKS):
            raise RuntimeError(f"a step has {len(rest)} marks after its start, not {len(MARKS)}")
        step = {"step_time_s": step_time_s}
        for name, (cpu_time, event) in zip(MARKS, rest):
            step[f"{name}_cpu_s"] = cpu_time - cpu_start
            step[f"{name}_gpu_s"] = start.elapsed_time(event) / 1e3
        self._steps.append(step)
        self._marks = []

    def summary(self) -> dict[str, float | int] | None:
        """Medians over the steps, in seconds: from the step's start to each mark by the CPU and by the
        GPU, and the GPU's lag behind the CPU at each mark (positive: GPU work was still queued
        when the CPU got there); the step's CPU time (``step_time_s``: to the synchronize after the
        optimizer) beside the GPU's time to the optimizer's end. None where nothing was recorded
        (CPU devices)."""
        if not self._steps:
            return None
        out: dict[str, float | int] = {"steps": len(self._steps),
                                       "step_time_s": statistics.median(s["step_time_s"] for s in self._steps)}
        for name in MARKS:
            cpu = [s[f"{name}_cpu_s"] for s in self._steps]
            gpu = [s[f"{name}_gpu_s"] for s in self._steps]
            out[f"{name}_cpu_s"] = statistics.median(cpu)
            out[f"{name}_gpu_s"] = statistics.median(gpu)
            out[f"{name}_gpu_lag_s"] = statistics.median(g - c for g, c in zip(gpu, cpu))
        return out
