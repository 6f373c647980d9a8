"""``Reducer``: one compressor + one algorithm + residual memory, averaging lists of tensors.

It knows nothing of DDP: ``compressors.ddp`` adapts it to DDP's communication hooks.
"""
from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import torch
import torch.distributed as dist

from . import collectives, pipeline
from .feedback import ErrorFeedback, MomentumCorrection
from .options import check_options, checkpoint, checkpoint_step, topology_of
from ..core import registry
from ..core.base import get
from .stats import StepLedger, StepStats
from .topology import Topology, build_hierarchy, discover

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def phase_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """A second process group over ``group``'s ranks, for the collectives that overlapped programs start
    from callbacks (``compressors.comm.pipeline``). A collective call: every rank of the job makes it, in the
    same order. None without a group of more than one rank."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size(group) == 1:
        return None
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    return dist.new_group(ranks, backend=dist.get_backend(group))


class Reducer:
    """Averages tensors across ``group`` with ``compressor`` over ``algorithm``.

    ``algorithm`` defaults to ``allreduce`` for the casts (fp32, fp16, bf16)
    and ``sra`` for the compressed methods.  Tensors with fewer than
    ``min_compress_numel`` elements travel in one fused fp32 all_reduce.
    ``error_feedback`` defaults to what the method needs (its codec's
    ``needs_error_feedback``: the biased ones) and may be switched on for the others. ``impl`` picks the codec's
    implementation (``compressors.get``); its kernels are compiled here.

    A training step may average its tensors in several calls (DDP's buckets):
    ``reduce`` each part, then ``end_step``; ``average`` does both for one call.
    With ``overlap`` (a collective call: it makes a process group), ``reduce_async``
    returns at once with a future while the collectives run; the numbers are
    those of ``reduce``, bit for bit.
    ``history`` holds one ``StepStats`` per finished step, ``step`` counts them
    (it drives the stochastic rounding and survives ``state_dict``).

    ``topology`` says which host each rank of ``group`` runs on (default: each its own host); it
    splits ``bytes_sent`` into what crosses hosts (``bytes_inter``) and what stays inside one.
    ``algorithm="hierarchical"`` averages inside each host at ``intra`` precision (fp32, fp16, bf16)
    and compresses only across hosts, with ``inter`` (sra or allgather); without a topology it asks
    every rank for its host (``topology.discover``: a collective call, as making its groups is).
    ``momentum`` (default 0.9) is for a codec that ``owns_momentum`` (DGC): its memory keeps the
    velocity, and the optimizer must run without momentum.
    """

    def __init__(self, compressor: str = "fp32", algorithm: str | None = None, *,
                 min_compress_numel: int = 1024, group: dist.ProcessGroup | None = None,
                 error_feedback: bool | None = None, impl: str = "auto", overlap: bool = False,
                 topology: Topology | None = None, intra: str = "fp32", inter: str = "sra",
                 momentum: float | None = None, **params: Any) -> None:
        self.compressor = compressor
        self.codec = get(compressor, impl=impl, **params)  # unknown names and bad parameters raise here
        # Kernels compile (or load from their cache) now, not in a timed step: on the device of the impl's
        # kernels. With impl auto, CUDA tensors' kernels load at their first step (where the tensors live is
        # not known here).
        self.codec.warm_up(registry.IMPL_DEVICES[impl] or "cpu")
        self.params = self.codec.config  # every parameter, defaults filled
        options = check_options(compressor, algorithm, min_compress_numel=min_compress_numel, impl=impl,
                                intra=intra, inter=inter, momentum=momentum)
        self.algorithm = algorithm = options.algorithm
        self.min_compress_numel = min_compress_numel
        self.group = group
        self.overlap = overlap
        # Phase 2 (sra's all_gather) gets a group of its own when it is started from callbacks.
        self._groups = (group, phase_group(group) if overlap else group)
        self._pipeline = pipeline.Pipeline() if overlap else None
        # What DDP does with no hook has nothing to compress: every tensor joins the one fused fp32 all_reduce.
        self._fused = registry.plain_ddp(compressor, algorithm)
        if error_feedback is None:
            error_feedback = self.codec.needs_error_feedback
        rank, world = collectives.world_of(group)
        if options.momentum is not None:
            if not error_feedback:
                raise ValueError(f"{compressor} keeps the momentum in its memory: error_feedback cannot be off")
            # Local clipping (the paper's): N independent gradients clipped to clip_norm / sqrt(N) sum to a
            # norm of about clip_norm.
            self.ef = MomentumCorrection(options.momentum, self.params["clip_norm"] / math.sqrt(world))
        else:
            self.ef = ErrorFeedback() if error_feedback else None
        hierarchical = algorithm == "hierarchical"
        self.server_ef = ErrorFeedback() if self.ef is not None and (
            algorithm == "sra" or hierarchical and inter == "sra") else None
        if hierarchical and topology is None:
            topology = discover(group)
        self.topology = topology_of(topology, world)
        self._hierarchy = build_hierarchy(self.topology, group, 2 if overlap else 1) if hierarchical else None
        self._intra_dtype, self._inter = _DTYPES[intra], inter
        # The share of a flat collective's bytes that crosses hosts: a ring's to the next rank, the
        # others' to every other rank alike.
        self._ring_share = self.topology.inter_share_ring(rank)
        self._peers_share = self.topology.inter_share_peers(rank)
        self._ledger = StepLedger()

    def __repr__(self) -> str:
        return f"Reducer({self.compressor!r}, algorithm={self.algorithm!r}, {self.params})"

    @property
    def history(self) -> list[StepStats]:
        """One ``StepStats`` per finished step."""
        return self._ledger.history

    @property
    def step(self) -> int:
        """Finished steps."""
        return self._ledger.step

    @property
    def current(self) -> StepStats:
        """What the step in progress has cost so far."""
        return self._ledger.current

    def reduce(self, tensors: list[torch.Tensor], keys: list[Hashable]) -> StepStats:
        """Average ``tensors`` across the group in place, as part of the step in progress.

        ``keys`` name the tensors (e.g. parameter indices), the same on every
        rank and at every step: residuals are kept per key, and a key picks
        its tensor's random stream.  Returns what this call cost (also added
        to the step's ``StepStats``); the step stays open.
        """
        stats = StepStats()
        for program in self._programs(tensors, keys):
            stats += pipeline.run(program)
        self._ledger.add(stats)
        return stats

    def reduce_async(self, tensors: list[torch.Tensor], keys: list[Hashable]) -> torch.futures.Future[StepStats]:
        """``reduce`` overlapped: encodes and starts the first collectives now, returns a future of the
        call's ``StepStats`` (added to the step when it completes). Needs ``overlap``."""
        if self._pipeline is None:
            raise RuntimeError("reduce_async needs a Reducer made with overlap=True")
        futures = [self._pipeline.launch(program) for program in self._programs(tensors, keys)]

        def add(done: torch.futures.Future) -> StepStats:
            stats = StepStats()
            for fut in done.value():
                stats += fut.wait()
            self._ledger.add(stats)
            return stats

        return torch.futures.collect_all(futures).then(add)

    def _programs(self, tensors: list[torch.Tensor], keys: list[Hashable]) -> list[pipeline.Program]:
        if len(keys) != len(tensors):
            raise ValueError(f"{len(tensors)} tensors but {len(keys)} keys")
        small = [(k, t) for k, t in zip(keys, tensors) if self._fused or t.numel() < self.min_compress_numel]
        large = [(k, t) for k, t in zip(keys, tensors) if not self._fused and t.numel() >= self.min_compress_numel]
        if self.ef is not None:
            for k, t in small:
                self.ef.uncompressed(k, t)  # DGC's memory sends it as its velocity
        programs = [_inter_share(collectives.allreduce_native([t for _, t in small], torch.float32, self._groups),
                                 self._ring_share)]
        large_keys = [k for k, _ in large]
        large_tensors = [t for _, t in large]
        step = self._ledger.step
        codec = self.codec.at_step(step)
        if self.algorithm == "allreduce":
            programs.append(_inter_share(collectives.allreduce_native(large_tensors, codec.cast_dtype,
                                                                      self._groups), self._ring_share))
        elif self.algorithm == "allgather":
            programs.append(_inter_share(collectives.allgather_compressed(large_tensors, large_keys, codec,
                                                                          self.ef, step, self._groups),
                                         self._peers_share))
        elif self.algorithm == "sra":
            programs.append(_inter_share(collectives.sra_compressed(large_tensors, large_keys, codec, self.ef,
                                                                    self.server_ef, step, self._groups),
                                         self._peers_share))
        else:  # it counts what crosses hosts itself
            programs.append(collectives.hierarchical_compressed(large_tensors, large_keys, codec, self.ef,
                                                                self.server_ef, step, self._hierarchy,
                                                                self._intra_dtype, self._inter))
        return programs

    def end_step(self) -> StepStats:
        """Close the step in progress; returns its ``StepStats`` (also appended to ``history``)."""
        return self._ledger.end_step()

    def average(self, tensors: list[torch.Tensor], keys: list[Hashable] | None = None) -> StepStats:
        """``reduce`` then ``end_step``: one call is one step (keys default to 0, 1, ...)."""
        self.reduce(tensors, keys if keys is not None else list(range(len(tensors))))
        return self.end_step()

    def state_dict(self) -> dict[str, Any]:
        """Residuals (worker and server side) and the step counter, on the CPU."""
        state = checkpoint(self.compressor, self.algorithm, self._ledger.step)
        if self.ef is not None:
            state["ef"] = self.ef.state_dict()
        if self.server_ef is not None:
            state["server_ef"] = self.server_ef.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self._ledger.step = checkpoint_step(state, self.compressor, self.algorithm)
        if self.ef is not None:
            self.ef.load_state_dict(state["ef"], device)
        if self.server_ef is not None:
            self.server_ef.load_state_dict(state["server_ef"], device)


def _inter_share(program: pipeline.Program, share: float) -> pipeline.Program:
    """``program``, its ``bytes_inter`` set to ``share`` of its bytes."""
    stats = yield from program
    stats.bytes_inter = stats.bytes_sent * share
    return stats
