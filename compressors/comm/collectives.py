"""Averaging lists of gradients across a process group, compressed or not.

Each function here is a *program* (``compressors.comm.pipeline``): a generator
that works in place on its tensors, yields each collective it starts
(``async_op=True``) and returns a ``StepStats``; ``pipeline.run`` runs it to
completion, ``pipeline.Pipeline`` overlapped. Phase k's collective goes over
``groups[k]`` (the same group twice when run to completion). Every program
gives the same result on every rank (decoded values are summed in rank order
everywhere), runs on gloo with CPU tensors and on NCCL with CUDA tensors. All
tensors of one call travel in one collective per phase; on gloo, a large
all_to_all or all_gather over a shaped link goes as point-to-point messages with
the receives posted first (``compressors.comm.exchange``: gloo's own collectives
reach half the link rate), the same bytes to the same places. The hierarchical
algorithm's phases inside a host take gloo's own collectives: no link there is
shaped, and an exchange costs a send or receive call per peer from Python (and a
thread, overlapped).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from . import accounting, exchange
from ..core import wire
from ..core.base import Compressor
from .feedback import ErrorFeedback
from .pipeline import Program
from .stats import StepStats
from .topology import Hierarchy

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


def _gather_into(out: torch.Tensor, mine: torch.Tensor, world: int, group: dist.ProcessGroup | None,
                 exchange_ok: bool = True) -> dist.Work | exchange.Exchange | None:
    """All-gather ``mine`` (the same size on every rank) into ``out``; its work. ``exchange_ok`` False:
    gloo's own collective whatever the size (inside a host: see the module's docstring)."""
    if world == 1:
        out.copy_(mine)
        return None
    if exchange_ok and exchange.use_exchange(mine, mine.numel() * mine.element_size()):
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
    vs = [_compensate(ef, key, t) for key, t in zip(keys, tensors)]
    # the bucket's tensors in one call each way: one payload, a header per tensor
    mine = compressor.encode_many(vs, step=step, rank=rank, streams=[_stream(key, 0, world) for key in keys])
    if ef is not None:
        decoded = [torch.empty(v.shape, dtype=torch.float32, device=v.device) for v in vs]
        compressor.decode_many(mine, decoded)
        for key, v, d in zip(keys, vs, decoded):
            ef.update(key, v, d)
    gathered = torch.empty(world * mine.numel(), dtype=torch.uint8, device=mine.device)
    phases.charge("encode")
    phases.collective((yield _gather_into(gathered, mine, world, groups[0])))
    totals = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in tensors]
    for r in range(world):  # decode-add: one pass per payload where the kernels allow
        compressor.decode_many(gathered[r * mine.numel():(r + 1) * mine.numel()], totals, add=True)
    for t, total in zip(tensors, totals):
        t.copy_(total.div_(world))
    phases.charge("decode")
    stats.bytes_sent = accounting.allgather_bytes(mine.numel(), world)
    return stats


def _stream(key: int, part: int, world: int) -> int:
    """A distinct random stream per tensor and chunk (part ``world`` is the server's re-encode)."""
    return (key & 0xFFFFFF) * (world + 1) + part


def split(shape: tuple[int, ...], world: int, key: int, axis: int = 0) -> list[tuple[int, int]]:
    """Ranges ``[start, stop)`` of the 2-D view's rows (``axis`` 0) or columns (1), one per rank.

    They are split as evenly as possible (the first ``n % world`` ranks get
    one more); a tensor with a single row (0-D/1-D) goes whole to one rank,
    chosen by its key to spread the load, as the row range ``(0, 1)`` (its
    axis is 0 whatever ``axis`` says: see ``chunk_axis``).
    """
    rows, cols = wire.matrix_shape(shape)
    if rows == 1:
        owner = key % world
        return [(0, 1) if r == owner else (0, 0) for r in range(world)]
    base, extra = divmod(cols if axis else rows, world)
    bounds, start = [], 0
    for r in range(world):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_axis(shape: tuple[int, ...], compressor: Compressor) -> int:
    """The axis ``split`` cuts along for this compressor: its ``split_axis``, but rows for a single row."""
    return compressor.split_axis if wire.matrix_shape(shape)[0] > 1 else 0


def chunk_shape(shape: tuple[int, ...], bounds: tuple[int, int], axis: int) -> tuple[int, ...]:
    """The shape one rank's chunk of a ``shape`` tensor is encoded in: a slice of the 2-D view, or
    1-D for a 0-D/1-D tensor (see ``_chunk``)."""
    rows, cols = wire.matrix_shape(shape)
    n = bounds[1] - bounds[0]
    if len(shape) < 2:
        return (n * cols,)
    return (n, cols) if axis == 0 else (rows, n)


def _rows_or_columns(matrix: torch.Tensor, bounds: tuple[int, int], axis: int) -> torch.Tensor:
    """The view of ``matrix``'s rows (``axis`` 0) or columns (1) in ``bounds``."""
    return matrix[bounds[0]:bounds[1]] if axis == 0 else matrix[:, bounds[0]:bounds[1]]


def _chunk(matrix: torch.Tensor, bounds: tuple[int, int], axis: int, flat: bool) -> torch.Tensor:
    # A column range is not contiguous; the compressors take contiguous input.
    piece = _rows_or_columns(matrix, bounds, axis).contiguous()
    # A 0-D/1-D tensor's single row is encoded 1-D, as a whole tensor would be: as a (1, n) matrix its
    # columns would be n groups of one entry for the column-grouping methods.
    return piece.reshape(-1) if flat else piece


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
    layout = []  # per tensor: (shape, chunk bounds per rank, axis of the chunks)
    vs, absmaxes = [], []
    for key, t in zip(keys, tensors):
        shape2 = wire.matrix_shape(tuple(t.shape))
        axis = chunk_axis(tuple(t.shape), compressor)
        layout.append((tuple(t.shape), split(tuple(t.shape), world, key, axis), axis))
        # The residual lives in the 2-D view's shape, step after step.
        v = _compensate(ef, key, t.reshape(shape2))
        vs.append(v)
        absmaxes.append(float(v.abs().amax()) if compressor.scales_by_tensor and v.numel() else None)
    # per destination, its chunk of every tensor in one call: one payload, a header per chunk
    per_dest = []
    for r in range(world):
        chunks = [_chunk(v, bounds[r], axis, len(shape) < 2) for v, (shape, bounds, axis) in zip(vs, layout)]
        per_dest.append(compressor.encode_many(chunks, step=step, rank=rank,
                                               streams=[_stream(key, r, world) for key in keys],
                                               absmaxes=absmaxes if compressor.scales_by_tensor else None))
    if ef is not None:
        decoded = [[torch.empty(chunk_shape(s, b[r], a), dtype=torch.float32, device=device) for s, b, a in layout]
                   for r in range(world)]
        for r in range(world):
            compressor.decode_many(per_dest[r], decoded[r])
        for i, (key, v, (_, _, axis)) in enumerate(zip(keys, vs, layout)):
            ef.update(key, v, torch.cat([decoded[r][i] for r in range(world)], dim=axis).reshape(v.shape))
    send_sizes = [p.numel() for p in per_dest]
    send = torch.cat(per_dest)
    # What every rank sends to me has the size of my chunks' payloads.
    my_sizes = [compressor.payload_nbytes(chunk_shape(s, b[rank], a)) for s, b, a in layout]
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
    totals = [torch.zeros(chunk_shape(shape, bounds[rank], axis), dtype=torch.float32, device=device)
              for shape, bounds, axis in layout]
    mine_total = sum(my_sizes)
    for r in range(world):  # rank r's chunks of mine, added in rank order
        compressor.decode_many(recv[r * mine_total:(r + 1) * mine_total], totals, add=True)
    means = [_compensate(server_ef, key, total.div_(world)) for key, total in zip(keys, totals)]
    phases.charge("decode")
    scales: list[dict[str, float]] = [{} for _ in means]
    if compressor.scales_by_tensor:
        # Each server holds a chunk of the mean; one small all_reduce gives them the tensor's maximum
        # (NaN counts as 0 so that MAX is order-free; a chunk's own NaN still shows in its encoding).
        maxima = torch.stack([torch.nan_to_num(w.abs().amax(), nan=0.0) if w.numel() else w.new_zeros(())
                              for w in means])
        work = None if world == 1 else dist.all_reduce(maxima, op=dist.ReduceOp.MAX, group=groups[0], async_op=True)
        phases.collective((yield work))
        scales = [{"absmax": float(m)} for m in maxima.tolist()]
        stats.bytes_sent += accounting.ring_allreduce_bytes(maxima.numel() * 4, world)
    mine = compressor.encode_many(means, step=step, rank=rank, streams=[_stream(key, world, world) for key in keys],
                                  absmaxes=[sc.get("absmax") for sc in scales] if compressor.scales_by_tensor else None)
    if server_ef is not None:
        decoded_means = [torch.empty(w.shape, dtype=torch.float32, device=device) for w in means]
        compressor.decode_many(mine, decoded_means)
        for key, w, d in zip(keys, means, decoded_means):
            server_ef.update(key, w, d)
    phases.charge("encode")

    # Chunks differ in size by a row at most; all_gather needs equal sizes, so pad.
    sizes_of = [[compressor.payload_nbytes(chunk_shape(s, b[r], a)) for s, b, a in layout] for r in range(world)]
    width = max(sum(s) for s in sizes_of)
    padded = torch.zeros(width, dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    gathered = torch.empty(world * width, dtype=torch.uint8, device=device)
    phases.charge("encode")
    phases.collective((yield _gather_into(gathered, padded, world, groups[1])))

    wholes = [torch.empty(wire.matrix_shape(shape), dtype=torch.float32, device=device) for shape, _, _ in layout]
    for r in range(world):
        # each rank's rows decode in place; its columns into a piece, then into place
        outs = [whole[bounds[r][0]:bounds[r][1]] if axis == 0 else
                torch.empty(chunk_shape(shape, bounds[r], axis), dtype=torch.float32, device=device)
                for whole, (shape, bounds, axis) in zip(wholes, layout)]
        compressor.decode_many(gathered[r * width:r * width + sum(sizes_of[r])], outs)
        for whole, out, (_, bounds, axis) in zip(wholes, outs, layout):
            if axis == 1:
                whole[:, bounds[r][0]:bounds[r][1]] = out
    for t, whole in zip(tensors, wholes):
        t.copy_(whole.reshape(t.shape))
    phases.charge("decode")
    stats.bytes_sent += accounting.alltoall_bytes(send_sizes, rank) + accounting.allgather_bytes(width, world)
    return stats


def hierarchical_compressed(tensors: list[torch.Tensor], keys: list[int], compressor: Compressor,
                            ef: ErrorFeedback | None, server_ef: ErrorFeedback | None, step: int,
                            hierarchy: Hierarchy, intra_dtype: torch.dtype, inter: str) -> Program:
    """Average inside each host at ``intra_dtype``, compress only across hosts (CGX, BytePS, SDP4Bit).

    With G workers per host and H hosts: (1) a reduce-scatter inside the host (an all_to_all of
    ``split``'s G chunks of each tensor, summed in local-rank order and divided by G), so local rank g
    holds its host's mean of chunk g; (2) across hosts, among the H ranks of local rank g, the compressed
    ``sra`` (or ``allgather``) of those chunks, with their error feedback; (3) an all-gather inside the
    host puts the tensors back together. Only phase 2 crosses hosts: its bytes are ``bytes_inter``.
    With one host nothing is compressed (phase 2 has no one to talk to); with one worker per host it is
    the flat ``sra`` (or ``allgather``) over the hosts.
    """
    stats = StepStats(numel=sum(t.numel() for t in tensors))
    if not tensors:
        return stats
    G, g = hierarchy.local_world, hierarchy.local_rank
    device = tensors[0].device
    phases = _Phases(stats, device)
    # Each tensor's 2-D view is cut into G chunks; ``at[j][i]`` is where tensor i's chunk j starts in
    # local rank j's part of the buffers (every part holds its chunks of every tensor, in tensor order).
    layout = []  # per tensor: (shape, its 2-D view's shape, chunk bounds per local rank, axis, chunk sizes)
    for key, t in zip(keys, tensors):
        shape = tuple(t.shape)
        axis = chunk_axis(shape, compressor)
        bounds = split(shape, G, key, axis)
        layout.append((shape, wire.matrix_shape(shape), bounds, axis,
                       [math.prod(chunk_shape(shape, b, axis)) for b in bounds]))
    send_sizes = [sum(sizes[j] for *_, sizes in layout) for j in range(G)]
    at = [[0] * len(layout) for _ in range(G)]
    for j in range(G):
        for i in range(1, len(layout)):
            at[j][i] = at[j][i - 1] + layout[i - 1][4][j]
    itemsize = torch.empty((), dtype=intra_dtype).element_size()
    mine_numel, width = send_sizes[g], max(send_sizes)

    # Phase 1: chunk j of every tensor, divided by G, straight into local rank j's part of one buffer (one
    # pass). Divide before summing, as DDP does: a 16-bit sum can overflow where the mean fits.
    send = torch.empty(sum(send_sizes), dtype=intra_dtype, device=device)
    base = 0
    matrices = [t.reshape(shape2) for t, (_, shape2, *_) in zip(tensors, layout)]
    for j in range(G):
        for matrix, (*_, bounds, axis, sizes), start in zip(matrices, layout, at[j]):
            if sizes[j]:
                piece = _rows_or_columns(matrix, bounds[j], axis)
                if piece.dtype != torch.float32:
                    piece = piece.to(torch.float32)
                torch.div(piece, G, out=send[base + start:base + start + sizes[j]].view(piece.shape))
        base += send_sizes[j]
    recv = torch.empty(G * mine_numel, dtype=intra_dtype, device=device)
    phases.charge("encode")
    work = None
    if G == 1:
        recv.copy_(send)
    else:  # inside a host, gloo's own collective (see the module's docstring)
        work = dist.all_to_all_single(recv, send, output_split_sizes=[mine_numel] * G,
                                      input_split_sizes=send_sizes, group=hierarchy.intra[0], async_op=True)
    phases.collective((yield work))
    # The host's mean of my chunks, summed in local-rank order on every rank, into the buffer phase 3
    # gathers from (padded to the largest part: all_gather needs equal sizes); phase 2 averages it in place.
    padded = torch.zeros(width, dtype=torch.float32, device=device)
    torch.sum(recv.view(G, mine_numel).to(torch.float32), dim=0, out=padded[:mine_numel])
    chunks, chunk_keys = [], []
    for key, (shape, _, bounds, axis, sizes), start in zip(keys, layout, at[g]):
        if sizes[g]:  # a chunk this rank does not own (a one-row tensor, fewer rows than G) has nothing to average
            chunks.append(padded[start:start + sizes[g]].view(chunk_shape(shape, bounds[g], axis)))
            chunk_keys.append(key)
    phases.charge("decode")
    stats.bytes_sent = accounting.alltoall_bytes([s * itemsize for s in send_sizes], g)
    if hierarchy.hosts > 1:
        if inter == "sra":
            across = yield from sra_compressed(chunks, chunk_keys, compressor, ef, server_ef, step,
                                               (hierarchy.inter[0], hierarchy.inter[-1]))
        else:
            across = yield from allgather_compressed(chunks, chunk_keys, compressor, ef, step, hierarchy.inter[:1])
        across.bytes_inter = across.bytes_sent  # all of phase 2 crosses hosts
        across.numel = 0  # its chunks are counted once, in this call's numel
        stats += across
        phases.last = phases._now()

    # Phase 3: every local rank's averaged chunks to every rank of the host, each written into its tensor.
    mine = padded if intra_dtype == torch.float32 else padded.to(intra_dtype)
    gathered = torch.empty(G * width, dtype=intra_dtype, device=device)
    phases.charge("encode")
    phases.collective((yield _gather_into(gathered, mine, G, hierarchy.intra[-1], exchange_ok=False)))
    for i, (t, (_, shape2, bounds, axis, sizes)) in enumerate(zip(tensors, layout)):
        in_place = t.is_contiguous()
        whole = t.view(shape2) if in_place else torch.empty(shape2, dtype=t.dtype, device=device)
        for j in range(G):
            if sizes[j]:
                start = j * width + at[j][i]
                target = _rows_or_columns(whole, bounds[j], axis)
                target.copy_(gathered[start:start + sizes[j]].view(target.shape))
        if not in_place:
            t.copy_(whole.reshape(t.shape))
    phases.charge("decode")
    stats.bytes_sent += accounting.allgather_bytes(width * itemsize, G)
    return stats
