"""all_to_all and all_gather over gloo as point-to-point messages, every receive posted before any send.

Why. gloo's TCP pair starts a send only once the peer has announced the
matching receive (a small "receive ready" message), and queues every message
of a pair behind the ones before it on its one connection. gloo's collectives
post each send before the matching receive (``alltoallv``: send to rank + i,
then receive from rank - i; the ring ``allgather``: send right, then receive
from the left). A rank whose send can start at once (the peer announced its
receive first) puts all its data on the connection, and its own "receive
ready", posted a moment later, queues behind that data: the peer's data waits
for all of it, and the two directions of a pair take turns instead of sharing
the link. On an emulated 1 Gbit/s link (2 hosts, 8 MiB, 6 runs of 9 rounds;
``benchmarks/link_bench.py``) ``all_to_all_single`` reached 0.50 of the link
rate and ``all_gather_into_tensor`` 0.63, against 0.89 for gloo's ring
all_reduce; in a separate test, isend posted before irecv also gave 0.51,
posted after it 0.95. With every receive posted first, one message per pair
reached 0.84 (all_to_all) and 0.92 (all_gather), 0.78-0.95 per run, and
0.92-0.96 at 16-32 MiB (what is left is a start-up cost of a few ms that
gloo's all_reduce pays too). Splitting the payload into k pieces sent as k
async collectives only bounds the stall to about one piece (k / (k + 1) of
the rate at best), costs a gloo collective per piece (0.2-1 ms each on a
loaded 2-core machine) and falls behind as pieces grow: 16 pieces gave 0.79
and 0.89 at 8 MiB, 0.69 and 0.78 at 32 MiB. So nothing here is split.

gloo's send/recv Works have no future (torch 2.13: "Work::getFuture not
implemented", also from ``batch_isend_irecv``), so ``Exchange`` stands for one
exchange's Works: ``wait()`` waits for them in the caller's thread
(``pipeline.run``), ``get_future()`` starts a thread that waits for them and
completes the future (``pipeline.Pipeline``, whose next stage then runs in
that thread, as it would in gloo's own). Waiting in another thread than the
one that posted them works (``tests/compressors/comm/test_exchange.py``).

The results are those of the collectives, bit for bit: the same bytes land in
the same places, and every rank sends what it would have sent (``bytes_sent``
is unchanged). Every rank must take the same path (the collective or the
exchange), so the choice (``use_exchange``) depends only on numbers that are
the same on every rank.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import torch
import torch.distributed as dist

# Below this largest message between two ranks, the collective. Measured on the emulated 1 Gbit/s link with
# 2 hosts (link_bench.py, 11 rounds): with messages of 128-384 KiB the collective was as fast as the exchange
# or faster (its stall is short, and an exchange costs 2 (N - 1) send/recv calls from Python and, overlapped,
# a thread); from 512 KiB the exchange was faster (0.68 vs 0.59 of the link rate at 512 KiB, 0.84 vs 0.70 at
# 768 KiB, 0.78-0.92 vs 0.5-0.63 at 4-8 MiB).
MIN_EXCHANGE_BYTES = 512 << 10

# The messages' gloo tag: their own slot on each pair, apart from any point-to-point traffic of the
# caller's on the same group (tag 0 by default). Messages of one slot between two ranks arrive in the
# order they were posted, which is the same on every rank (``pipeline``'s launch order per group).
TAG = 0x1C0


class Exchange:
    """The sends and receives of one exchange, waited for as one ``dist.Work`` would be."""

    def __init__(self, works: list[dist.Work]) -> None:
        self._works = works
        self._future: torch.futures.Future | None = None
        self._lock = threading.Lock()

    def wait(self) -> bool:
        """Wait for every send and receive in this thread (a failure raises here)."""
        for work in self._works:
            work.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        """A future completed (with None) once every send and receive has, by a thread that waits for them;
        it carries their exception if one fails. The same future on every call."""
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                threading.Thread(target=self._complete, args=(self._future,), name="lowprec-exchange",
                                 daemon=True).start()
            return self._future

    def _complete(self, future: torch.futures.Future) -> None:
        try:
            self.wait()
        except BaseException as error:  # a peer died, a timeout: the pipeline's stage sees it
            future.set_exception(error)
            return
        future.set_result(None)


def use_exchange(tensor: torch.Tensor, largest_nbytes: int) -> bool:
    """Whether to exchange point to point rather than start one collective.

    Only CPU tensors (they travel on gloo; NCCL pipelines its own messages)
    whose largest message between two ranks, ``largest_nbytes``, is at least
    ``MIN_EXCHANGE_BYTES``. ``largest_nbytes`` must be the same on every rank.
    """
    return tensor.device.type == "cpu" and largest_nbytes >= MIN_EXCHANGE_BYTES


def _offsets(splits: Sequence[int]) -> list[int]:
    out, at = [], 0
    for n in splits:
        out.append(at)
        at += n
    return out


def _post(recvs: list[tuple[torch.Tensor, int]], sends: list[tuple[torch.Tensor, int]],
          group: dist.ProcessGroup | None) -> Exchange:
    """Every receive, then every send; empty messages are not sent (both sides know their size)."""
    works = [dist.irecv(t, group=group, group_src=src, tag=TAG) for t, src in recvs if t.numel()]
    works += [dist.isend(t, group=group, group_dst=dst, tag=TAG) for t, dst in sends if t.numel()]
    return Exchange(works)


def all_to_all(recv: torch.Tensor, recv_splits: Sequence[int], send: torch.Tensor, send_splits: Sequence[int],
               group: dist.ProcessGroup | None) -> Exchange:
    """``all_to_all_single(recv, send, recv_splits, send_splits, group)``, point to point.

    1-D ``send`` holds the elements for rank 0, then rank 1, ... (``send_splits``);
    ``recv`` gets rank 0's, then rank 1's ... (``recv_splits``). This rank's own
    part is copied here, before the call returns.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_at, recv_at = _offsets(send_splits), _offsets(recv_splits)
    if send_splits[rank] != recv_splits[rank]:
        raise ValueError(f"rank {rank} sends itself {send_splits[rank]} elements but expects {recv_splits[rank]}")
    # Peers in the order gloo's alltoallv takes them: receive from rank - d, send to rank + d.
    recvs = [(recv[recv_at[src]:recv_at[src] + recv_splits[src]], src)
             for src in ((rank - d) % world for d in range(1, world))]
    sends = [(send[send_at[dst]:send_at[dst] + send_splits[dst]], dst)
             for dst in ((rank + d) % world for d in range(1, world))]
    exchange = _post(recvs, sends, group)
    recv[recv_at[rank]:recv_at[rank] + recv_splits[rank]].copy_(send[send_at[rank]:send_at[rank] + send_splits[rank]])
    return exchange


def all_gather(out: torch.Tensor, mine: torch.Tensor, group: dist.ProcessGroup | None) -> Exchange:
    """``all_gather_into_tensor(out, mine, group)``, point to point: rank r's 1-D ``mine`` lands at
    ``out[r * n:(r + 1) * n]`` (``n = mine.numel()``, the same on every rank). Each rank sends its part to
    every other directly (gloo's ring forwards it): the same ``(N - 1) n`` elements leave each rank."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    n = mine.numel()
    if out.numel() != world * n:
        raise ValueError(f"out has {out.numel()} elements, {world} ranks x {n} expected")
    recvs = [(out[src * n:(src + 1) * n], src) for src in ((rank - d) % world for d in range(1, world))]
    sends = [(mine, dst) for dst in ((rank + d) % world for d in range(1, world))]
    exchange = _post(recvs, sends, group)
    out[rank * n:(rank + 1) * n].copy_(mine)
    return exchange
