"""A training step's time on three clocks, read in one place.

- the CPU's wall clock (``time.perf_counter``) from the step's start to its end, the GPU's queue
  drained at both ends (``torch.cuda.synchronize``): the step's time;
- the step clock (``compressors.ddp.step_clock.StepClock``) at backward's return: how much of the
  step waited on communication (exposed), so compute = step - exposed;
- CUDA events (``orchestrator.study.cuda_events``) at the start, backward's return and the optimizer's:
  when the GPU, not the CPU, got there (nothing on other devices).

The loop calls ``start``, ``backward_done`` and ``step_done`` around each step; ``new_epoch`` empties
the lists of the epoch's steps.
"""
from __future__ import annotations

import time

import torch

from compressors.ddp.step_clock import StepClock

from .cuda_events import EventClock


class StepTimer:
    """Times a module's steps; ``clock`` is the step clock its communication hooks report to. Without
    ``hooks`` (a periodic sync: no DDP) nothing is exposed in backward, only what ``step_done`` is told."""

    def __init__(self, module: torch.nn.Module, device: torch.device, hooks: bool = True) -> None:
        self.clock = StepClock(module)
        self._hooks = hooks
        self.events = EventClock(device)
        self._cuda = device.type == "cuda"
        self._start = 0.0
        self.step_times: list[float] = []  # this epoch's steps, in seconds
        self.exposed: list[float] = []  # their exposed communication, in seconds

    def new_epoch(self) -> None:
        self.step_times, self.exposed = [], []

    def _sync(self) -> None:
        # The CPU's clock counts the GPU's work only once the queue is drained.
        if self._cuda:
            torch.cuda.synchronize()

    def start(self) -> None:
        """The step begins: its batch is on the device."""
        self._sync()
        self._start = time.perf_counter()
        self.clock.start()
        self.events.mark(self._start)

    def backward_done(self) -> None:
        """``backward()`` returned: what of it waited on communication."""
        end = time.perf_counter()
        self.exposed.append(self.clock.exposed_s(end) if self._hooks else 0.0)
        self.events.mark(end)

    def step_done(self, waited: float = 0.0) -> None:
        """The step is done: its time. ``waited``: seconds it spent on an exchange after the optimizer's step
        (a periodic sync's), exposed communication too."""
        self.events.mark(time.perf_counter())
        self._sync()
        self.step_times.append(time.perf_counter() - self._start)
        self.exposed[-1] += waited
        self.events.end_step(self.step_times[-1])
