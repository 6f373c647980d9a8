"""``Reducer``: one compressor + one algorithm + residual memory, for lists of gradients or DDP."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from . import collectives
from .collectives import StepStats
from .feedback import ErrorFeedback
from .registry import NATIVE, check_params, get

ALGORITHMS = ("allreduce", "allgather", "sra")


def algorithms(compressor: str) -> tuple[str, ...]:
    """The algorithms ``compressor`` can average with (powersgd: its own hook)."""
    if compressor == "powersgd":
        return ("powersgd",)
    return ALGORITHMS if compressor in NATIVE else ALGORITHMS[1:]


def default_algorithm(compressor: str) -> str:
    """allreduce for the native baselines, sra for compressed methods, powersgd for itself."""
    return algorithms(compressor)[0] if compressor in NATIVE or compressor == "powersgd" else "sra"


_WIRE_DTYPES = {"none": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Reducer:
    """Averages gradients across ``group`` with ``compressor`` over ``algorithm``.

    ``algorithm`` defaults to ``allreduce`` for the native baselines (none,
    fp16, bf16) and ``sra`` for the compressed methods; ``powersgd`` is
    PyTorch's hook and only works through ``register``.  Tensors with fewer
    than ``min_compress_numel`` elements travel in one fused fp32 all_reduce.
    ``error_feedback`` defaults to what the method needs (onebit, adaptive,
    topk) and may be switched on for the others.  Statistics: ``history``
    holds one ``StepStats`` per finished step.
    """

    def __init__(self, compressor: str = "none", algorithm: str | None = None, *,
                 min_compress_numel: int = 1024, group: dist.ProcessGroup | None = None,
                 error_feedback: bool | None = None, **params: Any) -> None:
        self.compressor = compressor
        self.params = check_params(compressor, **params)
        algorithm = algorithm or default_algorithm(compressor)
        valid = algorithms(compressor)
        if algorithm not in valid:
            raise ValueError(f"algorithm {algorithm!r} is invalid for {compressor!r}; valid: {list(valid)}")
        if min_compress_numel < 0:
            raise ValueError(f"min_compress_numel={min_compress_numel} is invalid; valid: an int >= 0")
        self.algorithm = algorithm
        self.min_compress_numel = min_compress_numel
        self.group = group
        self.codec = None if compressor == "powersgd" else get(compressor, **self.params)
        if error_feedback is None:
            error_feedback = bool(self.codec is not None and self.codec.needs_error_feedback)
        self.ef = ErrorFeedback() if error_feedback and self.codec is not None else None
        self.server_ef = ErrorFeedback() if self.ef is not None and algorithm == "sra" else None
        self.step = 0
        self.history: list[StepStats] = []
        self._current = StepStats()
        self._hook_state: Any = None  # PowerSGDState when registered with powersgd

    def __repr__(self) -> str:
        return f"Reducer({self.compressor!r}, algorithm={self.algorithm!r}, {self.params})"

    def average(self, tensors: list[torch.Tensor], keys: list[int] | None = None) -> StepStats:
        """Average ``tensors`` across the group in place; one call is one step."""
        stats = self._average(tensors, keys if keys is not None else list(range(len(tensors))))
        self.end_step()
        return stats

    def _average(self, tensors: list[torch.Tensor], keys: list[int]) -> StepStats:
        if self.codec is None:
            raise ValueError("powersgd runs as a DDP hook: use Reducer.register(ddp_model)")
        # fp32 over allreduce has nothing to compress: every tensor joins the one fused fp32 all_reduce.
        fused = self.compressor == "none" and self.algorithm == "allreduce"
        small = [t for t in tensors if fused or t.numel() < self.min_compress_numel]
        large = [(k, t) for k, t in zip(keys, tensors) if not fused and t.numel() >= self.min_compress_numel]
        stats = collectives.allreduce_native(small, torch.float32, self.group)
        large_keys = [k for k, _ in large]
        large_tensors = [t for _, t in large]
        if self.algorithm == "allreduce":
            stats += collectives.allreduce_native(large_tensors, _WIRE_DTYPES[self.compressor], self.group)
        elif self.algorithm == "allgather":
            stats += collectives.allgather_compressed(large_tensors, large_keys, self.codec, self.ef,
                                                      self.step, self.group)
        else:
            stats += collectives.sra_compressed(large_tensors, large_keys, self.codec, self.ef,
                                                self.server_ef, self.step, self.group)
        self._current += stats
        return stats

    def end_step(self) -> None:
        self.history.append(self._current)
        self._current = StepStats()
        self.step += 1

    def register(self, model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Attach as ``model``'s DDP communication hook."""
        from .hook import register
        register(self, model)

    def state_dict(self) -> dict:
        state: dict[str, Any] = {"compressor": self.compressor, "algorithm": self.algorithm, "step": self.step}
        if self.ef is not None:
            state["ef"] = self.ef.state_dict()
        if self.server_ef is not None:
            state["server_ef"] = self.server_ef.state_dict()
        if self._hook_state is not None:
            state["powersgd"] = self._hook_state.__getstate__()
        return state

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        if (state["compressor"], state["algorithm"]) != (self.compressor, self.algorithm):
            raise ValueError(f"state of {state['compressor']}/{state['algorithm']} cannot be loaded into "
                             f"{self.compressor}/{self.algorithm}")
        self.step = state["step"]
        if self.ef is not None:
            self.ef.load_state_dict(state["ef"], device)
        if self.server_ef is not None:
            self.server_ef.load_state_dict(state["server_ef"], device)
        if "powersgd" in state and self._hook_state is not None:
            group = self._hook_state.process_group
            self._hook_state.__setstate__(state["powersgd"])
            self._hook_state.process_group = group
