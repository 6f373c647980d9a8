"""Running collective programs: to completion, or overlapped and chained on futures.

A *program* is a generator (``compressors.comm.collectives``): it does its local
work (encode, decode), starts at most one collective with ``async_op=True``
and yields its ``dist.Work`` (or None where nothing went over the wire; or an
``exchange.Exchange``, point-to-point messages that wait and give a future as
a Work does), and is resumed with the time that collective completed; its
return value is the result. The same program runs both ways, so both give the
same numbers, bit for bit:

- ``run``: wait for each collective in turn (exact per-phase timing);
- ``Pipeline.launch``: the first stage runs in the caller's thread (inside a
  DDP hook: encode and start the first collective), each later stage in a
  ``Future.then`` callback once its collective has completed; the caller gets
  a future at once and goes on (DDP: with the rest of backward).

Why a pipeline rather than free-running callbacks: every rank must start the
collectives of one process group in the same order. Stage 0 of every program
runs in the caller's thread, in launch order; stage k >= 1 runs in the thread
that completed a collective, at a time that differs between ranks, so stage k
of a program waits until stage k of the program launched before it has run,
and programs start the collectives of stage k on a process group of their own
(``phase_groups``): the order on each group is then the launch order.
"""
from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import torch
import torch.distributed as dist

Program = Generator["dist.Work | None", float, Any]


def _completed(work: dist.Work | None) -> torch.futures.Future:
    """A future of the time ``work`` completed (now, for no work)."""
    if work is None:
        done: torch.futures.Future = torch.futures.Future()
        done.set_result(time.perf_counter())
        return done
    return work.get_future().then(lambda fut: (fut.wait(), time.perf_counter())[1])


def run(program: Program) -> Any:
    """Run ``program`` to completion in this thread, waiting for each collective; its return value."""
    try:
        work = next(program)
        while True:
            if work is not None:
                work.wait()
            work = program.send(time.perf_counter())
    except StopIteration as stop:
        return stop.value


MAX_STAGES = 8  # a program starts at most this many collectives


class _Stages:
    """Per launched program: a future per stage that completes once that stage has run; a stage after the
    program's last one completes when the program launched before it has run that stage, so that a
    program ending early (no tensors to send, say) does not let the next one overtake the one before."""

    def __init__(self, finished: bool = False) -> None:
        self.done = [torch.futures.Future() for _ in range(MAX_STAGES + 1)]
        if finished:
            for fut in self.done:
                fut.set_result(None)

    def mark(self, stage: int) -> None:
        self.done[stage].set_result(None)

    def finish(self, stage: int, before: _Stages) -> None:
        """The program ended at ``stage``."""
        self.done[stage].set_result(None)
        for later in range(stage + 1, MAX_STAGES + 1):
            before.done[later].then(lambda _, fut=self.done[later]: fut.set_result(None))


class Pipeline:
    """Launches programs overlapped, keeping every process group's collectives in launch order."""

    def __init__(self) -> None:
        self._previous = _Stages(finished=True)  # nothing launched before the first program: no stage waits

    def launch(self, program: Program) -> torch.futures.Future:
        """Run ``program``'s first stage now; a future of its return value (or of its exception)."""
        result: torch.futures.Future = torch.futures.Future()
        stages, before = _Stages(), self._previous
        self._previous = stages

        def advance(stage: int, completed_at: float | None) -> None:
            try:
                work = next(program) if completed_at is None else program.send(completed_at)
                if stage == MAX_STAGES:
                    raise RuntimeError(f"a program may start at most {MAX_STAGES} collectives")
            except StopIteration as stop:
                stages.finish(stage, before)
                result.set_result(stop.value)
                return
            except BaseException as error:  # the program's own failure: DDP re-raises it from backward
                stages.finish(stage, before)
                result.set_exception(error)
                return
            stages.mark(stage)
            both = torch.futures.collect_all([_completed(work), before.done[stage + 1]])
            both.then(lambda fut: _resume(stage + 1, fut))

        def _resume(stage: int, both: torch.futures.Future) -> None:
            try:
                collective, _ = both.value()
                completed_at = collective.wait()
            except BaseException as error:  # the collective failed (a peer died, a timeout)
                stages.finish(stage, before)
                result.set_exception(error)
                return
            advance(stage, completed_at)

        advance(0, None)
        return result
