"""DDP communication hooks: explicit state objects and small hook functions over a ``GradBucket``.

Shaped like PyTorch's own ``model.register_comm_hook(state, hook)``: a hook is
a function ``hook(state, bucket) -> Future[Tensor]`` and everything it needs
lives in its state object.  :func:`comm_hook` builds the state for a
compressor; ``state.register(model)`` attaches it (``state.hook`` is the
function).  Three kinds:

- :class:`ReducerHookState` (our compressors): a ``Reducer`` and the index of
  the model's parameters (their keys).  :func:`reducer_hook` averages the
  bucket's per-parameter gradients through the Reducer, so per-column methods
  see real matrices, and closes the step at the bucket DDP reduces last.
- :class:`AllreduceHookState` (fp32): PyTorch's ``allreduce_hook``, what DDP
  does without a hook; for fp32 warm-up epochs before a compressed method
  (DDP takes one hook for its lifetime). A method that is plain DDP
  (``compressors.core.registry.plain_ddp``: the fp32 baseline) needs no hook
  at all: :class:`PlainDDPStats` counts what DDP's own averaging sends.
- :class:`CastHookState` (fp16/bf16 over ``allreduce``): PyTorch's
  ``fp16_compress_hook`` / ``bf16_compress_hook``.
- :class:`PowerSGDHookState` (``powersgd``): PyTorch's ``PowerSGDState`` and
  a ledger of ``StepStats``; :func:`powersgd_hook` runs ``powerSGD_hook``.

With ``overlap`` (the default) a hook returns its future unwaited, so DDP
overlaps bucket i's communication with the backward of the buckets after it:
our compressors encode in the hook and chain the rest on ``Future.then``
(``compressors.comm.pipeline``). Without it every hook runs its collectives to
completion: DDP cannot overlap them, and the per-phase timing is exact. The
numbers are the same both ways, bit for bit. Every state has ``compressor``,
``algorithm``, ``params``, ``overlap``, ``history`` (one ``StepStats`` per
finished step; its ``bytes_inter`` is what crossed hosts of the ``topology``),
``step`` and ``state_dict``/``load_state_dict``. The hooks work at any world
size, including a one-process group.

No ``from __future__ import annotations`` here: DDP compares the hooks'
annotations with ``dist.GradBucket`` and ``Future[Tensor]`` at registration.
"""
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

from ..comm import accounting
from ..core import registry
from ..comm.collectives import world_of
from ..comm.options import check_options, checkpoint, checkpoint_step, topology_of
from ..core.params import Param
from ..comm.reducer import Reducer
from ..comm.topology import Topology
from ..comm.stats import StepLedger, StepStats
from .step_clock import StepClock

POWERSGD = "powersgd"


def _powersgd_relations(params: dict[str, Any]) -> str | None:
    # PowerSGDState asserts this: error feedback and warm start need one uncompressed step first.
    if params["start_iter"] < 2 and (params["use_error_feedback"] or params["warm_start"]):
        return (f"start_iter={params['start_iter']} must be >= 2 with use_error_feedback or warm_start "
                "(PyTorch's PowerSGDState needs one uncompressed step first)")
    return None


# PyTorch's PowerSGDState options that change results, under its names (snake case; start_powerSGD_iter is
# start_iter). Its default start_powerSGD_iter is 1000, which a short study never reaches; 2 is the least it
# allows with error feedback or warm start.
registry.register_hook_method(POWERSGD, (
    Param("matrix_rank", 1, int, low=1, high=1024, doc="rank of PowerSGD's low-rank approximation of each gradient matrix"),
    Param("start_iter", 2, int, low=1, high=10**9,
          doc="steps averaged in fp32 before PowerSGD compresses (PyTorch's start_powerSGD_iter; its default is 1000)"),
    Param("min_compression_rate", 2.0, float, low=0,
          doc="a gradient matrix (n, m) is compressed only if (n + m) matrix_rank x this < n m; others go dense"),
    Param("use_error_feedback", True, bool, doc="add each bucket's compression error to its next gradient"),
    Param("warm_start", True, bool, doc="start each step's power iteration from the last step's Q"),
    Param("orthogonalization_epsilon", 0.0, float, low=0,
          doc="added to each column's norm in Gram-Schmidt (PyTorch's default 0; 1e-8 avoids dividing by zero)"),
), _powersgd_relations)
# Not offered: batched_powerSGD_hook. In torch 2.13 it hands a 2-D Q to _orthogonalize, which asserts 3-D
# (every call fails).


def _done(value: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(value)
    return fut


def _module(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def bucket_views(bucket: dist.GradBucket) -> list[torch.Tensor]:
    """Per-parameter views into the bucket's flat buffer, in bucket order."""
    buffer = bucket.buffer()
    views, offset = [], 0
    for grad in bucket.gradients():
        views.append(buffer[offset:offset + grad.numel()].view(grad.shape))
        offset += grad.numel()
    return views


class HookState(ABC):
    """What every hook state offers; subclasses set ``hook`` and keep the statistics."""

    hook: Callable  # hook(state, bucket) -> Future[Tensor]
    compressor: str
    algorithm: str
    params: dict[str, Any]
    overlap: bool
    _pending: list[torch.futures.Future]  # the step's bucket futures, while it overlaps

    def _finish(self, bucket: dist.GradBucket, fut: torch.futures.Future[torch.Tensor]
                ) -> torch.futures.Future[torch.Tensor]:
        """What the hook returns for ``fut`` (the bucket's averaged buffer): with ``overlap`` the future
        itself, the last bucket's only once every bucket of the step is done and the step is closed;
        without, its value, waited for here."""
        if not self.overlap:
            value = fut.wait()
            if bucket.is_last():
                self._end_step()
            return _done(value)
        self._pending.append(fut)
        if not bucket.is_last():
            return fut
        pending, self._pending = self._pending, []

        def close(done: torch.futures.Future) -> torch.Tensor:
            values = [f.wait() for f in done.value()]  # re-raises the first bucket that failed
            self._end_step()
            return values[-1]

        return torch.futures.collect_all(pending).then(close)

    @abstractmethod
    def _end_step(self) -> None:
        """Close the step's statistics."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.compressor!r}, algorithm={self.algorithm!r}, {self.params})"

    @property
    @abstractmethod
    def history(self) -> list[StepStats]:
        """One ``StepStats`` per finished step."""

    @property
    @abstractmethod
    def step(self) -> int:
        """Finished steps."""

    def bind(self, model: torch.nn.Module) -> None:
        """Learn what the hook needs of ``model`` (a DDP model or its module) before the first step."""

    def register(self, model: torch.nn.parallel.DistributedDataParallel) -> None:
        """``bind`` then ``model.register_comm_hook(self, self.hook)``."""
        self.bind(model)
        model.register_comm_hook(self, type(self).hook)

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume this state."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        """Resume from ``state_dict()``'s output."""


# ---------------------------------------------------------------- our compressors, through a Reducer


def reducer_hook(state: "ReducerHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket's per-parameter gradients with the state's Reducer (keys: parameter indices)."""
    keys = [state.param_index[p] for p in bucket.parameters()]
    buffer = bucket.buffer()
    if state.overlap:
        averaged = state.reducer.reduce_async(bucket_views(bucket), keys).then(lambda fut: (fut.wait(), buffer)[1])
    else:
        state.reducer.reduce(bucket_views(bucket), keys)
        averaged = _done(buffer)
    return state._finish(bucket, averaged)


class ReducerHookState(HookState):
    """A ``Reducer`` and ``param_index`` (parameter -> its index in ``model.parameters()``, its key)."""

    hook = staticmethod(reducer_hook)

    def __init__(self, reducer: Reducer) -> None:
        self.reducer = reducer
        self.overlap = reducer.overlap
        self._pending = []
        self.param_index: dict[torch.nn.Parameter, int] = {}

    def _end_step(self) -> None:
        self.reducer.end_step()

    compressor = property(lambda self: self.reducer.compressor)
    algorithm = property(lambda self: self.reducer.algorithm)
    params = property(lambda self: self.reducer.params)
    history = property(lambda self: self.reducer.history, doc="One ``StepStats`` per finished step.")
    step = property(lambda self: self.reducer.step, doc="Finished steps.")

    def bind(self, model: torch.nn.Module) -> None:
        self.param_index = {p: i for i, p in enumerate(_module(model).parameters())}

    def state_dict(self) -> dict[str, Any]:
        return self.reducer.state_dict()

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self.reducer.load_state_dict(state, device)


# ---------------------------------------------------------------- PyTorch's own hooks, and none


class _LedgerState(HookState):
    """A state whose hook records its own ``StepStats``: PyTorch's hooks, whose collectives are ring
    all_reduces. They share one checkpoint (``state_dict``), which a subclass extends with ``_own_state``."""

    def __init__(self, compressor: str, algorithm: str, params: dict[str, Any], group: dist.ProcessGroup | None,
                 overlap: bool, topology: Topology | None) -> None:
        self.compressor = compressor
        self.algorithm = algorithm
        self.params = params
        self.group = group
        self.overlap = overlap
        self._pending = []
        self.ledger = StepLedger()
        rank, world = world_of(group)
        # A ring sends to the next rank: all of it crosses hosts, or none.
        self._inter_share = topology_of(topology, world).inter_share_ring(rank)

    history = property(lambda self: self.ledger.history, doc="One ``StepStats`` per finished step.")
    step = property(lambda self: self.ledger.step, doc="Finished steps.")

    def _end_step(self) -> None:
        self.ledger.end_step()

    def _timed(self, bucket: dist.GradBucket, start: float, fut: torch.futures.Future[torch.Tensor],
               bytes_sent: float) -> torch.futures.Future[torch.Tensor]:
        """``fut`` (a PyTorch hook's), counted and timed from ``start`` to its completion as one collective."""
        numel = bucket.buffer().numel()

        def record(done: torch.futures.Future) -> torch.Tensor:
            result = done.value()
            if result.is_cuda:
                torch.cuda.synchronize()
            end = time.perf_counter()
            self.ledger.add(StepStats(bytes_sent=bytes_sent, bytes_inter=bytes_sent * self._inter_share,
                                      comm_s=end - start, numel=numel, comm_spans=[(start, end)]))
            return result

        return fut.then(record)

    def _own_state(self) -> dict[str, Any]:
        """What the checkpoint holds beyond the configuration and the step."""
        return {}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        """Resume what ``_own_state`` saved."""

    def state_dict(self) -> dict[str, Any]:
        return {**checkpoint(self.compressor, self.algorithm, self.ledger.step), **self._own_state()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self.ledger.step = checkpoint_step(state, self.compressor, self.algorithm)
        self._load_own_state(state)


def allreduce_hook(state: "AllreduceHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's ``allreduce_hook`` (DDP's own averaging) over the bucket, timed and counted."""
    _, world = world_of(state.group)
    start = time.perf_counter()
    fut = default_hooks.allreduce_hook(state.group, bucket)
    sent = accounting.ring_allreduce_bytes(4 * bucket.buffer().numel(), world)
    return state._finish(bucket, state._timed(bucket, start, fut, sent))


class AllreduceHookState(_LedgerState):
    """fp32: PyTorch's ``allreduce_hook``, DDP's own bucketed average (for fp32 warm-up epochs)."""

    hook = staticmethod(allreduce_hook)


_CAST_HOOKS = {torch.float16: default_hooks.fp16_compress_hook, torch.bfloat16: default_hooks.bf16_compress_hook}


def cast_hook(state: "CastHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's fp16/bf16 compress hook over the whole bucket, timed and counted."""
    _, world = world_of(state.group)
    start = time.perf_counter()
    fut = _CAST_HOOKS[state.cast_dtype](state.group, bucket)
    sent = accounting.ring_allreduce_bytes(state.cast_dtype.itemsize * bucket.buffer().numel(), world)
    return state._finish(bucket, state._timed(bucket, start, fut, sent))


class CastHookState(_LedgerState):
    """fp16/bf16 over ``allreduce``: PyTorch's ``fp16_compress_hook``/``bf16_compress_hook``."""

    hook = staticmethod(cast_hook)
    cast_dtype = property(lambda self: registry.COMPRESSORS[self.compressor].cast_dtype,
                          doc="The dtype the gradients travel in.")


class PlainDDPStats:
    """The statistics of plain DDP (no hook: DDP's own bucketed all_reduce), which no hook counts: the bytes
    of ring all_reduces of every gradient in fp32 (``accounting``), those that cross hosts of ``topology``
    as a ring's do; its collectives' own time is not observable (NaN). ``end_step`` after each step."""

    def __init__(self, numel: int, group: dist.ProcessGroup | None = None, topology: Topology | None = None) -> None:
        rank, world = world_of(group)
        self.numel = numel
        self.bytes_sent = accounting.ring_allreduce_bytes(4 * numel, world)
        self.bytes_inter = self.bytes_sent * topology_of(topology, world).inter_share_ring(rank)
        self.history: list[StepStats] = []

    def end_step(self) -> None:
        self.history.append(StepStats(bytes_sent=self.bytes_sent, bytes_inter=self.bytes_inter, comm_s=math.nan,
                                      numel=self.numel))


# ---------------------------------------------------------------- PyTorch's PowerSGD


def _settle(target: torch.futures.Future, source: torch.futures.Future) -> None:
    try:
        target.set_result(source.value())
    except BaseException as error:
        target.set_exception(error)


def powersgd_hook(state: "PowerSGDHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's ``powerSGD_hook``, timed and counted.

    Overlapped, a bucket's hook starts once the bucket before it is done: PowerSGD starts its second
    all_reduce from a callback, on the group of its first, and on gloo callbacks run when the first
    completes, at times that differ between ranks; one bucket at a time keeps the order the same."""
    ps = state.powersgd
    _, world = world_of(ps.process_group)
    shapes = [tuple(g.shape) for g in bucket.gradients()]
    result: torch.futures.Future[torch.Tensor] = torch.futures.Future()

    def start(before: torch.futures.Future | None) -> None:
        try:
            if before is not None:
                before.wait()  # an earlier bucket failed: start nothing more
            compressing = ps.iter >= ps.start_powerSGD_iter
            sent = accounting.powersgd_bytes(shapes, ps.matrix_approximation_rank, world, compressing,
                                             ps.min_compression_rate)
            begun = time.perf_counter()
            fut = state._timed(bucket, begun, torch_powersgd.powerSGD_hook(ps, bucket), sent)
        except BaseException as error:
            result.set_exception(error)
            return
        fut.then(lambda done: _settle(result, done))

    before, state._tail = state._tail, result
    if before is None or not state.overlap:
        start(before)
    else:
        before.then(start)
    return state._finish(bucket, result)


class PowerSGDHookState(_LedgerState):
    """PyTorch's ``PowerSGDState`` (``powersgd``) and a ledger of ``StepStats``."""

    hook = staticmethod(powersgd_hook)

    def __init__(self, compressor: str, algorithm: str, params: dict[str, Any], group: dist.ProcessGroup | None,
                 overlap: bool, topology: Topology | None) -> None:
        super().__init__(compressor, algorithm, params, group, overlap, topology)
        self._tail: torch.futures.Future | None = None  # the last bucket's future
        self.powersgd = torch_powersgd.PowerSGDState(
            process_group=group, matrix_approximation_rank=params["matrix_rank"],
            start_powerSGD_iter=params["start_iter"], min_compression_rate=params["min_compression_rate"],
            use_error_feedback=params["use_error_feedback"], warm_start=params["warm_start"],
            orthogonalization_epsilon=params["orthogonalization_epsilon"], random_seed=params["seed"])

    def _own_state(self) -> dict[str, Any]:
        return {"powersgd": self.powersgd.__getstate__()}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        # PowerSGDState's own state leaves its process group out: this state's stays.
        group = self.powersgd.process_group
        self.powersgd.__setstate__(state["powersgd"])
        self.powersgd.process_group = group


# ---------------------------------------------------------------- the factory and the switch


# The state of each hook-only method this module registers.
_HOOK_ONLY_STATES: dict[str, type[_LedgerState]] = {POWERSGD: PowerSGDHookState}


def _pytorch_state(compressor: str, algorithm: str | None) -> type[_LedgerState] | None:
    """The state of PyTorch's own hook for ``compressor`` over ``algorithm`` (None: its default), if one
    does what our Reducer would: DDP's all_reduce for plain DDP, the fp16/bf16 compress hooks for those
    casts over a native all_reduce. None otherwise (an unknown name or algorithm too: the Reducer says so)."""
    if registry.plain_ddp(compressor, algorithm):
        return AllreduceHookState
    codec = registry.COMPRESSORS.get(compressor)
    if codec is not None and codec.cast_dtype in _CAST_HOOKS and \
            (algorithm or registry.default_algorithm(compressor)) == "allreduce":
        return CastHookState
    return None


def comm_hook(compressor: str = "fp32", algorithm: str | None = None, *, min_compress_numel: int = 1024,
              group: dist.ProcessGroup | None = None, error_feedback: bool | None = None,
              impl: str = "auto", overlap: bool = True, topology: Topology | None = None, intra: str = "fp32",
              inter: str = "sra", momentum: float | None = None, **params: Any) -> HookState:
    """The hook state for ``compressor`` over ``algorithm`` (defaults as ``compressors.default_algorithm``).

    powersgd, fp32, and fp16/bf16 over ``allreduce``, use PyTorch's own hooks
    (``powerSGD_hook``, ``allreduce_hook``, ``fp16_compress_hook``,
    ``bf16_compress_hook``); everything else goes through a ``Reducer``
    (``min_compress_numel``, ``error_feedback``, ``impl`` and ``params`` as
    there). ``overlap``: return each bucket's future unwaited (the module
    docstring); for a Reducer it is a collective call (it makes a process
    group). ``topology``: which host each rank runs on (what crosses hosts; the hierarchical algorithm's
    levels, with ``intra`` and ``inter``, as the Reducer's); ``momentum``: the Reducer's (DGC's velocity).
    Every option is checked as the Reducer checks it (``compressors.comm.options``): unknown names,
    algorithms and parameters raise ValueError naming the valid ones.
    """
    if registry.hook_only(compressor):
        options = check_options(compressor, algorithm, min_compress_numel=min_compress_numel, impl=impl,
                                intra=intra, inter=inter, momentum=momentum)
        # PowerSGD applies its own rule for what it compresses (min_compression_rate); no error_feedback switch.
        return _HOOK_ONLY_STATES[compressor](compressor, options.algorithm, registry.check_params(compressor, **params),
                                             group, overlap, topology)
    pytorch_state = _pytorch_state(compressor, algorithm)
    # The Reducer checks every setting; it is the hook only where PyTorch has none.
    reducer = Reducer(compressor, algorithm, min_compress_numel=min_compress_numel, group=group,
                      error_feedback=error_feedback, impl=impl, overlap=overlap and pytorch_state is None,
                      topology=topology, intra=intra, inter=inter, momentum=momentum, **params)
    if pytorch_state is None:
        return ReducerHookState(reducer)
    return pytorch_state(compressor, reducer.algorithm, reducer.params, group, overlap, reducer.topology)


def switch_hook(switch: "HookSwitch", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Hand the bucket to the switch's active state (timed for the switch's clock, if it has one)."""
    state = switch.active
    started = time.perf_counter()
    fut = state.hook(state, bucket)
    if switch.clock is not None:
        switch.clock.hook_call(started, time.perf_counter())
    return fut


class HookSwitch:
    """One DDP hook that hands each bucket to the active state.

    DDP takes a single hook for its lifetime; this lets training start with
    fp32 warm-up epochs and switch to the compressed method: ``register``
    the model with every state once, then set ``active`` (one of them)
    between steps. With a ``StepClock`` it reports each hook call's time.
    """

    def __init__(self, active: HookState, clock: StepClock | None = None) -> None:
        self._active = active
        self.states: list[HookState] | None = None
        self.clock = clock  # told how long each hook call held the main thread

    @property
    def active(self) -> HookState:
        return self._active

    @active.setter
    def active(self, state: HookState) -> None:
        self._check(state, self.states)
        self._active = state

    @staticmethod
    def _check(state: HookState, states: Sequence[HookState] | None) -> None:
        if states is not None and not any(state is s for s in states):
            raise ValueError(f"{state!r} was not registered with this HookSwitch; registered: {list(states)}")

    def register(self, model: torch.nn.parallel.DistributedDataParallel, states: Sequence[HookState]) -> None:
        """Bind every state to ``model`` and attach the switch as its communication hook."""
        states = list(states)
        self._check(self._active, states)
        for state in states:
            state.bind(model)
        self.states = states
        model.register_comm_hook(self, switch_hook)
