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
- :class:`CastHookState` (fp16/bf16 over ``allreduce``): PyTorch's
  ``fp16_compress_hook`` / ``bf16_compress_hook``.
- :class:`PowerSGDHookState` (``powersgd``): PyTorch's ``PowerSGDState`` and
  a ledger of ``StepStats``; :func:`powersgd_hook` runs ``powerSGD_hook``.

Every hook runs its collectives to completion, so the timing of
encode/communicate/decode is exact but DDP cannot overlap that communication
with the rest of backward.  Every state has ``compressor``, ``algorithm``,
``params``, ``history`` (one ``StepStats`` per finished step), ``step`` and
``state_dict``/``load_state_dict``.  The hooks work at any world size,
including a one-process group.

No ``from __future__ import annotations`` here: DDP compares the hooks'
annotations with ``dist.GradBucket`` and ``Future[Tensor]`` at registration.
"""
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

from . import accounting, registry
from .collectives import world_of
from .params import Param
from .reducer import Reducer
from .stats import StepLedger, StepStats

POWERSGD = "powersgd"
registry.register_hook_method(POWERSGD, (
    Param("matrix_rank", 1, int, low=1, high=1024, doc="rank of PowerSGD's low-rank approximation of each gradient matrix"),
))
# PowerSGD averages in fp32 for this many steps before it compresses (PyTorch's minimum with error feedback).
START_POWERSGD_ITER = 2


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

    def _check_state(self, state: dict[str, Any]) -> None:
        if (state["compressor"], state["algorithm"]) != (self.compressor, self.algorithm):
            raise ValueError(f"state of {state['compressor']}/{state['algorithm']} cannot be loaded into "
                             f"{self.compressor}/{self.algorithm}")


# ---------------------------------------------------------------- our compressors, through a Reducer


def reducer_hook(state: "ReducerHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket's per-parameter gradients with the state's Reducer (keys: parameter indices)."""
    keys = [state.param_index[p] for p in bucket.parameters()]
    state.reducer.reduce(bucket_views(bucket), keys)
    if bucket.is_last():
        state.reducer.end_step()
    return _done(bucket.buffer())


class ReducerHookState(HookState):
    """A ``Reducer`` and ``param_index`` (parameter -> its index in ``model.parameters()``, its key)."""

    hook = staticmethod(reducer_hook)

    def __init__(self, reducer: Reducer) -> None:
        self.reducer = reducer
        self.param_index: dict[torch.nn.Parameter, int] = {}

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


# ---------------------------------------------------------------- PyTorch's fp16 / bf16 hooks


class _LedgerState(HookState):
    """A state whose hook records its own ``StepStats``."""

    def __init__(self, compressor: str, algorithm: str, params: dict[str, Any],
                 group: dist.ProcessGroup | None) -> None:
        self.compressor = compressor
        self.algorithm = algorithm
        self.params = params
        self.group = group
        self.ledger = StepLedger()

    history = property(lambda self: self.ledger.history, doc="One ``StepStats`` per finished step.")
    step = property(lambda self: self.ledger.step, doc="Finished steps.")

    def _record(self, bucket: dist.GradBucket, start: float, result: torch.Tensor, bytes_sent: float) -> None:
        if result.is_cuda:
            torch.cuda.synchronize()
        self.ledger.add(StepStats(bytes_sent=bytes_sent, comm_s=time.perf_counter() - start,
                                  numel=bucket.buffer().numel()))
        if bucket.is_last():
            self.ledger.end_step()


_CAST_HOOKS = {torch.float16: default_hooks.fp16_compress_hook, torch.bfloat16: default_hooks.bf16_compress_hook}


def cast_hook(state: "CastHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's fp16/bf16 compress hook over the whole bucket, run to completion, timed and counted."""
    _, world = world_of(state.group)
    start = time.perf_counter()
    result = _CAST_HOOKS[state.cast_dtype](state.group, bucket).wait()
    state._record(bucket, start, result,
                  accounting.ring_allreduce_bytes(state.cast_dtype.itemsize * bucket.buffer().numel(), world))
    return _done(result)


class CastHookState(_LedgerState):
    """fp16/bf16 over ``allreduce``: PyTorch's ``fp16_compress_hook``/``bf16_compress_hook``."""

    hook = staticmethod(cast_hook)

    def __init__(self, compressor: str, params: dict[str, Any], group: dist.ProcessGroup | None) -> None:
        super().__init__(compressor, "allreduce", params, group)
        self.cast_dtype = registry.COMPRESSORS[compressor].cast_dtype

    def state_dict(self) -> dict[str, Any]:
        return {"compressor": self.compressor, "algorithm": self.algorithm, "step": self.ledger.step}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self._check_state(state)
        self.ledger.step = state["step"]


# ---------------------------------------------------------------- PyTorch's PowerSGD


def powersgd_hook(state: "PowerSGDHookState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's ``powerSGD_hook``, run to completion, timed and counted."""
    ps = state.powersgd
    _, world = world_of(ps.process_group)
    shapes = [tuple(g.shape) for g in bucket.gradients()]
    compressing = ps.iter >= ps.start_powerSGD_iter
    start = time.perf_counter()
    result = torch_powersgd.powerSGD_hook(ps, bucket).wait()
    sent = accounting.powersgd_bytes(shapes, ps.matrix_approximation_rank, world, compressing,
                                     ps.min_compression_rate)
    state._record(bucket, start, result, sent)
    return _done(result)


class PowerSGDHookState(_LedgerState):
    """PyTorch's ``PowerSGDState`` (``powersgd``) and a ledger of ``StepStats``."""

    hook = staticmethod(powersgd_hook)

    def __init__(self, params: dict[str, Any], group: dist.ProcessGroup | None) -> None:
        super().__init__(POWERSGD, POWERSGD, params, group)
        self.powersgd = torch_powersgd.PowerSGDState(
            process_group=group, matrix_approximation_rank=params["matrix_rank"],
            start_powerSGD_iter=START_POWERSGD_ITER, random_seed=params["seed"])

    def state_dict(self) -> dict[str, Any]:
        return {"compressor": self.compressor, "algorithm": self.algorithm, "step": self.ledger.step,
                "powersgd": self.powersgd.__getstate__()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self._check_state(state)
        self.ledger.step = state["step"]
        group = self.powersgd.process_group
        self.powersgd.__setstate__(state["powersgd"])
        self.powersgd.process_group = group


# ---------------------------------------------------------------- the factory and the switch


def comm_hook(compressor: str = "fp32", algorithm: str | None = None, *, min_compress_numel: int = 1024,
              group: dist.ProcessGroup | None = None, error_feedback: bool | None = None,
              impl: str = "auto", **params: Any) -> HookState:
    """The hook state for ``compressor`` over ``algorithm`` (defaults as ``compressors.default_algorithm``).

    powersgd, and fp16/bf16 over ``allreduce``, use PyTorch's own hooks
    (``powerSGD_hook``, ``fp16_compress_hook``, ``bf16_compress_hook``);
    everything else goes through a ``Reducer`` (``min_compress_numel``,
    ``error_feedback``, ``impl`` and ``params`` as there).  Unknown names,
    algorithms and parameters raise ValueError naming the valid ones.
    """
    if compressor in registry.HOOK_METHODS:
        valid = registry.algorithms(compressor)
        if algorithm is not None and algorithm not in valid:
            raise ValueError(f"algorithm {algorithm!r} is invalid for {compressor!r}; valid: {list(valid)}")
        if min_compress_numel < 0:
            raise ValueError(f"min_compress_numel={min_compress_numel} is invalid; valid: an int >= 0")
        if impl == "numba":
            raise ValueError(f"{compressor} has no Numba kernels (it runs PyTorch's hook): use impl 'auto'")
        # PowerSGD applies its own rule for what it compresses (min_compression_rate); no error_feedback switch.
        return PowerSGDHookState(registry.check_params(compressor, **params), group)
    reducer = Reducer(compressor, algorithm, min_compress_numel=min_compress_numel, group=group,
                      error_feedback=error_feedback, impl=impl, **params)
    if reducer.algorithm == "allreduce" and reducer.codec.cast_dtype in _CAST_HOOKS:
        return CastHookState(compressor, reducer.params, group)
    return ReducerHookState(reducer)


def switch_hook(switch: "HookSwitch", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Hand the bucket to the switch's active state."""
    state = switch.active
    return state.hook(state, bucket)


class HookSwitch:
    """One DDP hook that hands each bucket to the active state.

    DDP takes a single hook for its lifetime; this lets training start with
    fp32 warm-up epochs and switch to the compressed method: ``register``
    the model with every state once, then set ``active`` (one of them)
    between steps.
    """

    def __init__(self, active: HookState) -> None:
        self._active = active
        self.states: list[HookState] | None = None

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
