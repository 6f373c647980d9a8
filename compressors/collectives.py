"""Averaging lists of gradients across a process group, compressed or not.

Each function here is a *program* (``compressors.pipeline``): a generator
that works in place on its tensors, yields each collective it starts
(``async_op=True``) and returns a ``StepStats``; ``pipeline.run`` runs it to
completion, ``pipeline.Pipeline`` overlapped. Phase k's collective goes over
``groups[k]`` (the same group twice when run to completion). Every program
gives the same result on every rank (decoded values are summed in rank order
everywhere), runs on gloo with CPU tensors and on NCCL with CUDA tensors. All
tensors of one call travel in one collective per phase; on gloo, a large
all_to_all or all_gather goes as point-to-point messages with the receives
posted first (``compressors.exchange``: gloo's own collectives reach half the
link rate), the same bytes to the same places.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from . import accounting, exchange, wire
from .base import Compressor
from .feedback import ErrorFeedback
from .pipeline import Program
from .stats import StepStats

Groups = Sequence["dist.ProcessGroup | None"]


class _Phases:
    """Charges wall time to phases; waits for the GPU so its work lands in the right phase."""

    def __init__(self, stats: StepStats, device: torch.device) -> None:
        self.stats = stats
        self.cuda = device.type == "cuda"
        self.last = self._now()

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def charge(self, phase: str) -> None:
        """Add the time since the last charge to ``phase`` (encode or decode)."""
        now = self._now()
        setattr(self.stats, f"{phase}_s", getattr(self.stats, f"{phase}_s") + now - self.last)
        self.last = now

    def collective(self, completed_at: float) -> None:
        """The collective started at the last charge completed at ``completed_at``: its span is comm time.
        Time from then to now (a stage waiting for its turn) is no phase's."""
        self.stats.comm_s += completed_at - self.last
        self.stats.comm_spans.append((self.last, completed_at))
        self.last = self._now()


# torch 2.13 renamed all_gather_into_tensor (and deprecated the old name); 2.11 has only the old one.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _gather_into(out: torch.Tensor, mine: torch.Tensor, world: int,
                 group: dist.ProcessGroup | None) -> dist.Work | exchange.Exchange | None:
    """All-gather ``mine`` (the same size on every rank) into ``out``; its work."""
    if world == 1:
        out.copy_(mine)
        return None
    if exchange.use_exchange(mine, mine.numel() * mine.element_size()):
        return exchange.all_gather(out, mine, group)
    return _all_gather(out, mine, group=group, async_op=True)


def world_of(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank, world size) in ``group``; (0, 1) without an initialised process group."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def allreduce_native(tensors: list[torch.Tensor], wire_dtype: torch.dtype, groups: Groups) -> Program:
    """Fused all_reduce of the tensors cast to ``wire_dtype`` (the fp32/fp16/bf16 baselines)."""
    stats = StepStats(numel=sum(t.numel() for t in tensors))
    if not tensors:
        return stats
    rank, world = world_of(groups[0])
    phases = _Phases(stats, tensors[0].device)
    # Divide before summing, as DDP does: a 16-bit sum can overflow where the mean fits.
    flat = torch.cat([t.reshape(-1).to(wire_dtype) for t in tensors]).div_(world)
    phases.charge("encode")
    phases.collective((yield dist.all_reduce(flat, group=groups[0], async_op=True) if world > 1 else None))
    flat = flat.to(torch.float32)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view(t.shape))
        offset += t.numel()
    phases.charge("decode")
    stats.bytes_sent = accounting.ring_allreduce_bytes(flat.numel() * wire_dtype.itemsize, world)
    return stats


def _compensate(ef: ErrorFeedback | None, key: int | tuple, x: torch.Tensor) -> torch.Tensor:
    return ef.compensate(key, x) if ef is not None else x.to(torch.float32)


def allgather_compressed(tensors: list[torch.Tensor], keys: list[int], compressor: Compressor,
                         ef: ErrorFeedback | None, step: int, groups: Groups) -> Program:
    """Every rank encodes, payloads are all-gathered, every rank decodes all and sums."""
    stats = StepStats(numel=sum(t.numel() for t in tensors))
    if not tensors:
        return stats
    rank, world = world_of(groups[0])
    phases = _Phases(stats, tensors[0].device)
    payloads = []
    for key, t in zip(keys, tensors):
        v = _compensate(ef, key, t)
        payload = compressor.encode(v, step=step, rank=rank, stream=_stream(key, 0, world))
        if ef is not None:
            ef.update(key, v, compressor.decode(payload))
        payloads.append(payload)
    mine = torch.cat(payloads)
    gathered = torch.empty(world * mine.numel(), dtype=torch.uint8, device=mine.device)
    phases.charge("encode")
    phases.collective((yield _gather_into(gathered, mine, world, groups[0])))
    sizes = [p.numel() for p in payloads]
    for i, t in enumerate(tensors):
        start = sum(sizes[:i])
        total = torch.zeros(t.shape, dtype=torch.float32, device=t.device)
        for r in range(world):  # decode-add: one pass per payload where the kernels allow
            base = r * mine.numel() + start
            compressor.decode(gathered[base:base + sizes[i]], out=total, add=True)
        t.copy_(total.div_(world))
    phases.charge("decode")
    stats.bytes_sent = accounting.allgather_bytes(mine.numel(), world)
    return stats


def _stream(key: int, part: int, world: int) -> int:
    """A distinct random stream per tensor and chunk (part ``world`` is the server's re-encode)."""
    return (key & 0xFFFFFF) * (world + 1) + part


def row_chunks(shape: tuple[int, ...], world: int, key: int) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of the 2-D view, one per rank, on column boundaries.

    Rows are split as evenly as possible (the first ``rows % world`` ranks
    get one more); a tensor with a single row (0-D/1-D) goes whole to one
    rank, chosen by its key to spread the load.
    """
    rows, _ = wire.matrix_shape(shape)
    if rows == 1:
        owner = key % world
        return [(0, 1) if r == owner else (0, 0) for r in range(world)]
    base, extra = divmod(rows, world)
    bounds, start = [], 0
    for r in range(world):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _chunk(matrix: torch.Tensor, bounds: tuple[int, int]) -> torch.Tensor:
    return matrix[bounds[0]:bounds[1]]


def sra_compressed(tensors: list[torch.Tensor], keys: list[int], compressor: Compressor,
                   ef: ErrorFeedback | None, server_ef: ErrorFeedback | None, step: int,
                   groups: Groups) -> Program:
    """Reduce-scatter then all-gather, both compressed (the CNTK/LBANN/DeepSpeed/CGX pattern).

    Each rank encodes one chunk per destination; ``all_to_all_single`` sends
    chunk r to rank r, which decodes and averages the N copies of its chunk,
    adds its server residual and re-encodes; ``all_gather`` spreads the
    re-encoded chunks and every rank decodes them into the full tensor.
    """
    stats = StepStats(numel=sum(t.numel() for t in tensors))
    if not tensors:
        return stats
    rank, world = world_of(groups[0])
    device = tensors[0].device
    phases = _Phases(stats, device)
    layout = []  # per tensor: (matrix shape, chunk bounds per rank)
    per_dest: list[list[torch.Tensor]] = [[] for _ in range(world)]
    for key, t in zip(keys, tensors):
        shape2 = wire.matrix_shape(tuple(t.shape))
        bounds = row_chunks(tuple(t.shape), world, key)
        layout.append((shape2, bounds))
        # The residual lives in the 2-D view's shape, step after step.
        v = _compensate(ef, key, t.reshape(shape2))
        decoded = []
        for r in range(world):
            payload = compressor.encode(_chunk(v, bounds[r]), step=step, rank=rank, stream=_stream(key, r, world))
            per_dest[r].append(payload)
            if ef is not None:
                decoded.append(compressor.decode(payload))
        if ef is not None:
            ef.update(key, v, torch.cat(decoded).reshape(shape2))
    send_sizes = [sum(p.numel() for p in ps) for ps in per_dest]
    send = torch.cat([p for ps in per_dest for p in ps])
    # What every rank sends to me has the size of my chunks' payloads.
    my_sizes = [compressor.payload_nbytes((b[rank][1] - b[rank][0], s2[1])) for s2, b in layout]
    recv = torch.empty(world * sum(my_sizes), dtype=torch.uint8, device=device)
    phases.charge("encode")
    work = None
    if world == 1:
        recv.copy_(send)
    elif exchange.use_exchange(send, max(send_sizes)):  # rank r's chunks' size: the same on every rank
        work = exchange.all_to_all(recv, [sum(my_sizes)] * world, send, send_sizes, groups[0])
    else:
        work = dist.all_to_all_single(recv, send, output_split_sizes=[sum(my_sizes)] * world,
                                      input_split_sizes=send_sizes, group=groups[0], async_op=True)
    phases.collective((yield work))

    # Server side: average my chunk of every tensor, re-encode it.
    server_payloads = []
    for i, (key, (shape2, bounds)) in enumerate(zip(keys, layout)):
        rows = bounds[rank][1] - bounds[rank][0]
        total = torch.zeros((rows, shape2[1]), dtype=torch.float32, device=device)
        for r in range(world):
            start = r * sum(my_sizes) + sum(my_sizes[:i])
            compressor.decode(recv[start:start + my_sizes[i]], out=total, add=True)
        total /= world
        phases.charge("decode")
        w = _compensate(server_ef, key, total)
        payload = compressor.encode(w, step=step, rank=rank, stream=_stream(key, world, world))
        if server_ef is not None:
            server_ef.update(key, w, compressor.decode(payload))
        server_payloads.append(payload)
        phases.charge("encode")
    mine = torch.cat(server_payloads)

    # Chunks differ in size by a row at most; all_gather needs equal sizes, so pad.
    sizes_of = [[compressor.payload_nbytes((b[r][1] - b[r][0], s2[1])) for s2, b in layout] for r in range(world)]
    width = max(sum(s) for s in sizes_of)
    padded = torch.zeros(width, dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    gathered = torch.empty(world * width, dtype=torch.uint8, device=device)
    phases.charge("encode")
    phases.collective((yield _gather_into(gathered, padded, world, groups[1])))

    for i, (t, (shape2, bounds)) in enumerate(zip(tensors, layout)):
        whole = torch.empty(shape2, dtype=torch.float32, device=device)
        for r in range(world):  # each rank's rows decode in place
            start = r * width + sum(sizes_of[r][:i])
            compressor.decode(gathered[start:start + sizes_of[r][i]], out=whole[bounds[r][0]:bounds[r][1]])
        t.copy_(whole.reshape(t.shape))
    phases.charge("decode")
    stats.bytes_sent = accounting.alltoall_bytes(send_sizes, rank) + accounting.allgather_bytes(width, world)
    return stats
