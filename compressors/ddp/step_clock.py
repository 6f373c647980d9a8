"""Where a DDP training step's time goes: computing, and waiting for communication it did not hide.

With overlap, a step's communication runs beside its backward, so the phases
no longer add up to the step. What a step is charged instead, from this
rank's main thread:

- the time inside communication hooks (encoding, starting collectives; all of
  a hook that runs its collectives to completion);
- the tail: from the later of the last gradient computed and the last hook's
  return, to the end of ``backward()`` (DDP waiting for the buckets' futures
  and copying their averages into the gradients).

Their sum is ``exposed_comm_s``; ``compute_s`` is the step's wall time minus
it. Plain DDP (no hook) has a tail only. The times are the CPU's: on a GPU,
backward's kernels may still run when the last gradient is queued, so there
the split is an estimate.
"""
from __future__ import annotations

import math
import time

import torch


class StepClock:
    """Watches a module's gradients (post-accumulate hooks) and the hook calls reported to it."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._handles = [p.register_post_accumulate_grad_hook(self._gradient_ready)
                         for p in module.parameters() if p.requires_grad]
        self.start()

    def _gradient_ready(self, _param: torch.Tensor) -> None:
        self._last_gradient = time.perf_counter()

    def start(self) -> None:
        """A step begins: forget the last one."""
        self._in_hooks = 0.0
        self._last_gradient = self._last_hook = -math.inf

    def hook_call(self, started: float, ended: float) -> None:
        """A communication hook ran in the main thread from ``started`` to ``ended`` (perf_counter)."""
        self._in_hooks += ended - started
        self._last_hook = ended

    def exposed_s(self, backward_end: float) -> float:
        """The step's exposed communication, ``backward()`` having returned at ``backward_end``."""
        computed = max(self._last_gradient, self._last_hook)
        tail = backward_end - computed if computed > -math.inf else 0.0
        return self._in_hooks + max(0.0, tail)

    def remove(self) -> None:
        """Take the gradient hooks off the module."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
