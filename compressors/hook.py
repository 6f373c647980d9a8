"""DDP communication hooks: ours over per-parameter gradients, and PyTorch's own by name.

A hook gets a ``GradBucket``.  Ours averages the bucket's per-parameter
gradients (so per-column methods see real matrices) through the Reducer and
hands back the bucket buffer.  The compressed collectives run to completion
inside the hook, so the timing of encode/comm/decode is exact but DDP cannot
overlap that communication with the rest of backward.

No ``from __future__ import annotations`` here: DDP compares the hooks'
annotations with ``dist.GradBucket`` and ``Future[Tensor]`` at registration.
"""
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from . import accounting
from .collectives import StepStats, world_of
from .reducer import Reducer


def _done(value: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(value)
    return fut


def _bucket_views(bucket: dist.GradBucket) -> list[torch.Tensor]:
    """Per-parameter views into the bucket's flat buffer, in bucket order."""
    buffer = bucket.buffer()
    views, offset = [], 0
    for grad in bucket.gradients():
        views.append(buffer[offset:offset + grad.numel()].view(grad.shape))
        offset += grad.numel()
    return views


def _compressed_hook(reducer: Reducer, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    keys = [reducer.param_index[p] for p in bucket.parameters()]
    reducer._average(_bucket_views(bucket), keys)
    if bucket.is_last():
        reducer.end_step()
    return _done(bucket.buffer())


def powersgd_bytes(shapes: list[torch.Size], matrix_rank: int, world: int, compressing: bool) -> float:
    """Bytes PowerSGD's hook sends for one bucket (its own rule for what it compresses)."""
    if not compressing:
        return accounting.ring_allreduce_bytes(4 * sum(s.numel() for s in shapes), world)
    dense, low_rank = 0, 0
    for shape in shapes:
        rows, cols = (shape[0], shape.numel() // shape[0]) if len(shape) > 1 else (0, 0)
        if len(shape) > 1 and (rows + cols) * matrix_rank * 2 < rows * cols:
            low_rank += (rows + cols) * matrix_rank
        else:
            dense += shape.numel()
    return sum(accounting.ring_allreduce_bytes(4 * n, world) for n in (dense, low_rank) if n)


def _torch_hook(reducer: Reducer, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's fp16/bf16/PowerSGD hook, run to completion so it can be timed and counted."""
    _, world = world_of(reducer.group)
    shapes = [g.shape for g in bucket.gradients()]
    start = time.perf_counter()
    if reducer.compressor == "powersgd":
        state = reducer._hook_state
        compressing = state.iter >= state.start_powerSGD_iter
        result = powersgd.powerSGD_hook(state, bucket).wait()
        sent = powersgd_bytes(shapes, state.matrix_approximation_rank, world, compressing)
    else:
        fn = default_hooks.fp16_compress_hook if reducer.compressor == "fp16" else default_hooks.bf16_compress_hook
        result = fn(reducer.group, bucket).wait()
        sent = accounting.ring_allreduce_bytes(2 * bucket.buffer().numel(), world)
    if result.is_cuda:
        torch.cuda.synchronize()
    reducer._current += StepStats(bytes_sent=sent, comm_s=time.perf_counter() - start,
                                  numel=bucket.buffer().numel())
    if bucket.is_last():
        reducer.end_step()
    return _done(result)


Hook = Callable[[Reducer, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def prepare(reducer: Reducer, model: torch.nn.parallel.DistributedDataParallel) -> Hook:
    """Bind ``reducer`` to ``model``'s parameters and choose its hook function.

    powersgd, and fp16/bf16 over ``allreduce``, use PyTorch's own hooks
    (``powerSGD_hook``, ``fp16_compress_hook``, ``bf16_compress_hook``);
    everything else goes through the Reducer's collectives.
    """
    reducer.param_index = {p: i for i, p in enumerate(model.module.parameters())}
    if reducer.compressor == "powersgd":
        reducer._hook_state = powersgd.PowerSGDState(
            process_group=reducer.group, matrix_approximation_rank=reducer.params["matrix_rank"],
            start_powerSGD_iter=2, random_seed=reducer.params["seed"])
        return _torch_hook
    if reducer.compressor in ("fp16", "bf16") and reducer.algorithm == "allreduce":
        return _torch_hook
    return _compressed_hook


def register(reducer: Reducer, model: torch.nn.parallel.DistributedDataParallel) -> None:
    """Attach ``reducer`` as ``model``'s communication hook."""
    model.register_comm_hook(reducer, prepare(reducer, model))


class HookSwitch:
    """One DDP hook that hands each bucket to the active Reducer.

    DDP takes a single hook for its lifetime; this lets training start with
    fp32 warm-up epochs and switch to the compressed method.
    """

    def __init__(self, active: Reducer) -> None:
        self.active = active
        self._hooks: dict[int, Hook] = {}

    def register(self, model: torch.nn.parallel.DistributedDataParallel, reducers: list[Reducer]) -> None:
        self._hooks = {id(r): prepare(r, model) for r in reducers}
        model.register_comm_hook(self, _switch_hook)


def _switch_hook(switch: HookSwitch, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return switch._hooks[id(switch.active)](switch.active, bucket)
