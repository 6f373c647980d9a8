"""``OuterSync``: workers step alone; every ``inner_steps`` steps (per fragment) they average their outer
gradients through a ``Reducer`` and an outer optimizer moves the global parameters.

- local SGD (Stich 2019; Lin et al. 2020): the average of the workers' parameters every H steps. It
  travels as an outer gradient (global minus local parameters, small where the parameters are large)
  applied by an outer SGD of lr 1 without momentum, which lands exactly on the average;
- DiLoCo (Douillard et al. 2023, arXiv 2311.08105): the same outer gradient, averaged, applied by SGD
  with Nesterov momentum (``outer_lr``, ``outer_momentum``); the inner optimizer is the trial's;
- Streaming DiLoCo (2025, arXiv 2501.18512): ``fragments`` exchanged on a staggered schedule
  (``schedule``); with ``overlap_steps`` = tau > 0 an exchange runs in a thread of its own while tau
  inner steps go on, then merges: the worker's fragment becomes MERGE_ALPHA of its own parameters
  (tau steps on) plus 1 - MERGE_ALPHA of the new global ones, the paper's mixing.

The global parameters are the same on every rank (each applies the same averaged outer gradient);
``evaluated()`` puts them in the model for an evaluation. ``history`` has one ``StepStats`` per step:
empty where nothing was exchanged, an exchange's at the step it ended.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from ..comm.reducer import Reducer
from ..comm.stats import StepStats
from .schedule import due_fragments, min_gap, split_fragments

# Streaming DiLoCo's mixing factor: the worker's own share of an overlapped fragment at its merge.
MERGE_ALPHA = 0.5


@dataclass
class _InFlight:
    """An overlapped exchange: its fragment, the step it merges after, its averaged outer gradients."""

    fragment: int
    merge_at: int
    done: Future  # of (StepStats, averaged outer gradients)


class OuterSync:
    """The outer loop over ``params`` (the model's, in order). ``reducer`` averages the outer gradients
    (``warm``, where given, in the warm-up epochs: ``for_epoch``); ``outer_lr`` and ``outer_momentum``
    make the outer SGD (Nesterov where the momentum is > 0). ``overlap_steps`` > 0 needs reducers over a
    process group of their own (the training loop's collectives go on meanwhile) and must be below
    floor(inner_steps / fragments), the fewest steps between two exchanges: one is in flight at a time."""

    def __init__(self, params: list[torch.nn.Parameter], reducer: Reducer, *, inner_steps: int,
                 outer_lr: float = 1.0, outer_momentum: float = 0.0, fragments: int = 1, overlap_steps: int = 0,
                 warm: Reducer | None = None) -> None:
        if fragments < 1 or inner_steps < fragments:
            raise ValueError(f"inner_steps={inner_steps} must be at least fragments={fragments} (>= 1)")
        if not 0 <= overlap_steps < min_gap(inner_steps, fragments):
            raise ValueError(f"overlap_steps={overlap_steps} must be in [0, floor(inner_steps / fragments) = "
                             f"{min_gap(inner_steps, fragments)})")
        self.params = params
        self.inner_steps, self.fragments, self.overlap_steps = inner_steps, fragments, overlap_steps
        self.parts = split_fragments([p.numel() for p in params], fragments)
        with torch.no_grad():
            self.global_params = [p.detach().clone() for p in params]
        self.outer = [torch.optim.SGD([self.global_params[i] for i in part], lr=outer_lr, momentum=outer_momentum,
                                      nesterov=outer_momentum > 0) for part in self.parts]
        self.reducer = self.main = reducer
        self.warm = warm
        self.history: list[StepStats] = []
        self.step = 0
        self._in_flight: _InFlight | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="outer-sync") if overlap_steps else None

    @property
    def period(self) -> int:
        """Steps in which every parameter is exchanged once: inner_steps."""
        return self.inner_steps

    def for_epoch(self, epoch: int, warmup_epochs: int) -> OuterSync:
        """Exchange with the warm-up reducer in the first ``warmup_epochs`` epochs, the main one after;
        returns this (its ``history`` gains a step's statistics per step)."""
        self.reducer = self.warm if self.warm is not None and epoch <= warmup_epochs else self.main
        return self

    def after_step(self) -> float:
        """Call after each optimizer step: run the exchanges due now. Returns the seconds this step
        waited on them (a blocking exchange whole; an overlapped one, its outer gradients' computing and
        what was left of it at its merge)."""
        self.step += 1
        stats, waited = StepStats(), 0.0
        if self._in_flight is not None and self._in_flight.merge_at == self.step:
            start = time.perf_counter()
            done, averaged = self._in_flight.done.result()
            self._apply(self._in_flight.fragment, averaged, MERGE_ALPHA)
            self._in_flight = None
            stats += done
            waited += time.perf_counter() - start
        for fragment in due_fragments(self.step, self.inner_steps, self.fragments):
            start = time.perf_counter()
            outer_grads = self._outer_gradients(fragment)
            if self._thread is not None:
                self._in_flight = _InFlight(fragment, self.step + self.overlap_steps,
                                            self._thread.submit(self._average, fragment, outer_grads, self.reducer))
            else:
                done, averaged = self._average(fragment, outer_grads, self.reducer)
                self._apply(fragment, averaged, 0.0)
                stats += done
            waited += time.perf_counter() - start
        self.history.append(stats)
        return waited

    def end_step(self) -> None:
        """Nothing: ``after_step`` closed the step's statistics (the training loop calls both)."""

    def _outer_gradients(self, fragment: int) -> list[torch.Tensor]:
        """The fragment's outer gradients: global minus local parameters."""
        with torch.no_grad():
            return [self.global_params[i] - self.params[i].detach() for i in self.parts[fragment]]

    def _average(self, fragment: int, outer_grads: list[torch.Tensor], reducer: Reducer
                 ) -> tuple[StepStats, list[torch.Tensor]]:
        """Average the outer gradients over the workers (in place; keys: the parameters' indices, so each
        keeps its residual across exchanges)."""
        stats = reducer.average(outer_grads, list(self.parts[fragment]))
        return stats, outer_grads

    def _apply(self, fragment: int, averaged: list[torch.Tensor], alpha: float) -> None:
        """The outer optimizer's step on the fragment's global parameters, then the worker's parameters
        become ``alpha`` of their own plus ``1 - alpha`` of the global ones."""
        part, optimizer = self.parts[fragment], self.outer[fragment]
        with torch.no_grad():
            for i, grad in zip(part, averaged):
                self.global_params[i].grad = grad
            optimizer.step()
            for i in part:
                self.global_params[i].grad = None
                if alpha:
                    self.params[i].mul_(alpha).add_(self.global_params[i], alpha=1 - alpha)
                else:
                    self.params[i].copy_(self.global_params[i])

    @contextlib.contextmanager
    def evaluated(self) -> Iterator[None]:
        """The global parameters in the model while the block runs; the worker's own after."""
        with torch.no_grad():
            own = [p.detach().clone() for p in self.params]
            for p, g in zip(self.params, self.global_params):
                p.copy_(g)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, o in zip(self.params, own):
                    p.copy_(o)

    def close(self, failed: bool = False) -> None:
        """Wait for an exchange in flight (its collectives must end before the process group does); it is
        not merged: training has ended. After a failure nothing is waited for (a peer may be gone)."""
        if self._thread is not None:
            if not failed and self._in_flight is not None:
                self._in_flight.done.result()
            self._thread.shutdown(wait=not failed, cancel_futures=True)
        self._in_flight = None
