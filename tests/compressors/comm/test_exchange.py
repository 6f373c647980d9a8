"""Large gloo all_to_all / all_gather as point-to-point exchanges (``compressors.comm.exchange``): the same bytes in
the same places as the collectives, bit for bit.

Each world size is spawned once; the rank function runs every check and hands raw results back. Three modes
of ``exchange.MIN_EXCHANGE_BYTES``: ``off`` (never: one collective per phase, the code path without
exchanges), ``threshold`` (the large calls cross it, the small ones do not) and ``all`` (0: every phase is
an exchange); and the module's own threshold, crossed by larger fp32 tensors. Programs are run through
``pipeline.run`` and, overlapped, through ``pipeline.Pipeline.launch`` on phase groups of their own, where
the second phase's exchange is posted from the thread that completed the first one's.
"""
from __future__ import annotations

import functools
import threading

import pytest
import torch
import torch.distributed as dist

import compressors as C
from compressors.comm import collectives, exchange, pipeline
from compressors.comm.feedback import ErrorFeedback
from tests.distributed import run_ranks

slow = pytest.mark.slow  # spawns processes

WORLDS = (2, 3)
SPAWN_TIMEOUT = 300  # a guard against a hang; the checks take about a second once spawned
# The threshold is lowered so that the tensors crossing it stay small (fast); use_exchange's own test
# covers the constant.
THRESHOLD = 20_000
MODES = {"off": 1 << 62, "threshold": THRESHOLD, "all": 0}

# Large calls: every rank's chunk of the first tensor is above THRESHOLD on 2 and 3 ranks, with rows uneven
# over the ranks ((101, 160) fp32: 51/50 and 34/34/33 rows; (211, 301) dynamic8, 1 byte per entry;
# (301, 700) topk, 8 bytes per kept entry); the smaller tensors add payloads of other sizes to the same
# messages. Small calls stay below it. DEFAULT_SHAPES cross the module's own MIN_EXCHANGE_BYTES (512 KiB)
# on 2 and 3 ranks in fp32: 286/285 and 191/190/190 rows of 701 entries.
DEFAULT_SHAPES = [(571, 701), (37, 53)]
LARGE = {"fp32": [(101, 160), (37, 53), (1025,)], "dynamic8": [(211, 301), (2, 600), (16, 8, 3, 3)],
         "topk": [(301, 700), (1025,)]}
SMALL = [(37, 53), (1025,)]
CONFIGS = [("fp32", {}, False), ("dynamic8", {}, False), ("topk", {"pi": 0.05}, True)]
ALGOS = ("sra", "allgather")


def inputs(rank: int, world: int, shapes, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * seed + 10 * world + rank)
    return [torch.randn(s, generator=gen) * (1 + i) for i, s in enumerate(shapes)]


def recorded(program, kinds: list):
    """``program``, noting what each stage yields (None, ``Work`` or ``Exchange``)."""
    try:
        work = next(program)
        while True:
            kinds.append(None if work is None else type(work).__name__)
            work = program.send((yield work))
    except StopIteration as stop:
        return stop.value


def make_program(name, p, ef_on, algo, tensors, step, groups, state, first_key=0):
    codec = C.get(name, impl="reference", **p)
    keys = list(range(first_key, first_key + len(tensors)))
    ef = state.setdefault("ef", ErrorFeedback()) if ef_on else None
    if algo == "allgather":
        return collectives.allgather_compressed(tensors, keys, codec, ef, step, groups)
    server_ef = state.setdefault("server_ef", ErrorFeedback()) if ef_on else None
    return collectives.sra_compressed(tensors, keys, codec, ef, server_ef, step, groups)


def _summary(stats, tensors, kinds):
    return {"out": [t.clone() for t in tensors], "bytes": stats.bytes_sent, "spans": len(stats.comm_spans),
            "kinds": kinds}


def _programs_run(rank, world, mode):
    """Every config and algorithm, one call with the large tensors and one with the small ones (per step),
    run to completion."""
    exchange.MIN_EXCHANGE_BYTES = MODES[mode]
    groups = (None, None)
    out = {}
    for name, p, ef_on in CONFIGS:
        for algo in ALGOS:
            state: dict = {}
            for step in range(2 if ef_on else 1):  # two steps where residuals carry over
                for size, shapes, first_key in (("large", LARGE[name], 0), ("small", SMALL, 100)):
                    tensors = inputs(rank, world, shapes, seed=step)
                    kinds: list = []
                    program = make_program(name, p, ef_on, algo, tensors, step, groups, state, first_key)
                    stats = pipeline.run(recorded(program, kinds))
                    out[(name, algo, step, size)] = _summary(stats, tensors, kinds)
    return out


def _programs_overlapped(rank, world, mode, groups):
    """Programs launched back to back on one Pipeline: sra large, allgather large, sra small, sra large."""
    exchange.MIN_EXCHANGE_BYTES = MODES[mode]
    line = pipeline.Pipeline()
    launched = []
    for i, (name, algo, size) in enumerate([("dynamic8", "sra", "large"), ("fp32", "allgather", "large"),
                                            ("fp32", "sra", "small"), ("fp32", "sra", "large")]):
        tensors = inputs(rank, world, LARGE[name] if size == "large" else SMALL, seed=10 + i)
        kinds: list = []
        program = make_program(name, {}, False, algo, tensors, 0, groups, {})
        launched.append(((name, algo, size, i), tensors, kinds, line.launch(recorded(program, kinds))))
    return {key: _summary(fut.wait(), tensors, kinds) for key, tensors, kinds, fut in launched}


def _default_threshold(rank, world):
    """fp32 sra and allgather on tensors above the module's own threshold, and with exchanges off."""
    default = exchange.MIN_EXCHANGE_BYTES
    out = {}
    for mode, threshold in (("default", default), ("off", MODES["off"])):
        exchange.MIN_EXCHANGE_BYTES = threshold
        for algo in ALGOS:
            tensors = inputs(rank, world, DEFAULT_SHAPES, seed=5)
            kinds: list = []
            stats = pipeline.run(recorded(make_program("fp32", {}, False, algo, tensors, 0, (None, None), {}), kinds))
            out[(mode, algo)] = _summary(stats, tensors, kinds)
    exchange.MIN_EXCHANGE_BYTES = default
    return out


def _raw_exchanges(rank, world):
    """The helpers on raw bytes against the collectives: uneven splits, empty messages, empty all_gather."""
    res = {}

    def size(src, dst):  # bytes src sends dst: uneven, some empty
        return 0 if (src + 2 * dst) % 4 == 1 else 1000 * (1 + src) + 37 * dst + 5

    send_splits = [size(rank, r) for r in range(world)]
    recv_splits = [size(r, rank) for r in range(world)]
    gen = torch.Generator().manual_seed(rank)
    send = torch.randint(0, 256, (sum(send_splits),), dtype=torch.uint8, generator=gen)
    expected = torch.empty(sum(recv_splits), dtype=torch.uint8)
    dist.all_to_all_single(expected, send, recv_splits, send_splits)
    got = torch.full_like(expected, 7)
    assert exchange.all_to_all(got, recv_splits, send, send_splits, None).wait()
    res["a2a_wait"] = torch.equal(got, expected)
    got = torch.full_like(expected, 7)
    exchange.all_to_all(got, recv_splits, send, send_splits, None).get_future().wait()
    res["a2a_future"] = torch.equal(got, expected)
    for n in (0, 12345):
        mine = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
        expected = torch.empty(world * n, dtype=torch.uint8)
        dist.all_gather_into_tensor(expected, mine)
        got = torch.full_like(expected, 7)
        work = exchange.all_gather(got, mine, None)
        fut = work.get_future()
        res[f"ag{n}_same_future"] = fut is work.get_future()
        fut.wait()
        res[f"ag{n}"] = torch.equal(got, expected)
    # Exchanges posted and waited for in another thread: in a callback of an exchange's future (the thread
    # that completed it, or this one if it had completed already), and in a thread of its own.
    first = torch.empty(world * 3, dtype=torch.uint8)
    second = torch.empty(world * 5, dtype=torch.uint8)
    third = torch.empty(world * 2, dtype=torch.uint8)

    def chained(_fut):
        return exchange.all_gather(second, torch.full((5,), rank + 1, dtype=torch.uint8), None).wait()

    exchange.all_gather(first, torch.full((3,), rank, dtype=torch.uint8), None).get_future().then(chained).wait()
    elsewhere = threading.Thread(
        target=lambda: exchange.all_gather(third, torch.full((2,), rank + 2, dtype=torch.uint8), None).wait())
    elsewhere.start()
    elsewhere.join()
    res["threads"] = (first.tolist(), second.tolist(), third.tolist())
    return res


def checks(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    res = {"raw": _raw_exchanges(rank, world), "default": _default_threshold(rank, world)}
    res["run"] = {mode: _programs_run(rank, world, mode) for mode in MODES}
    # Phase groups as the Reducer makes them (``reducer.phase_group``): collective calls, same order everywhere.
    groups = (dist.new_group(list(range(world))), dist.new_group(list(range(world))))
    res["overlap"] = {mode: _programs_overlapped(rank, world, mode, groups) for mode in MODES}
    dist.barrier()
    return res


@functools.lru_cache(maxsize=None)
def results(world: int) -> list[dict]:
    return run_ranks(world, checks, timeout=SPAWN_TIMEOUT)


worlds = pytest.mark.parametrize("world", WORLDS)


@slow
@worlds
def test_exchanges_equal_the_collectives_on_raw_bytes(world):
    for rank, res in enumerate(results(world)):
        raw = res["raw"]
        assert raw["a2a_wait"] and raw["a2a_future"], rank
        assert raw["ag0"] and raw["ag12345"] and raw["ag0_same_future"] and raw["ag12345_same_future"], rank
        assert raw["threads"] == ([r for r in range(world) for _ in range(3)],
                                  [r + 1 for r in range(world) for _ in range(5)],
                                  [r + 2 for r in range(world) for _ in range(2)])


@slow
@worlds
@pytest.mark.parametrize("mode", ["threshold", "all"])
def test_programs_give_the_same_bits_bytes_and_spans_with_exchanges(world, mode):
    for rank, res in enumerate(results(world)):
        base, got = res["run"]["off"], res["run"][mode]
        assert got.keys() == base.keys()
        for key in base:
            for i, (a, b) in enumerate(zip(base[key]["out"], got[key]["out"])):
                assert torch.equal(a, b), f"rank {rank} {key} tensor {i}"
            assert got[key]["bytes"] == base[key]["bytes"], (rank, key)
            assert got[key]["spans"] == base[key]["spans"] == (2 if key[1] == "sra" else 1), (rank, key)


@slow
@worlds
def test_payloads_above_the_default_threshold_are_exchanged_with_the_same_bits(world):
    for rank, res in enumerate(results(world)):
        for algo in ALGOS:
            base, got = res["default"][("off", algo)], res["default"][("default", algo)]
            phases = 2 if algo == "sra" else 1
            assert base["kinds"] == ["Work"] * phases and got["kinds"] == ["Exchange"] * phases, (rank, algo)
            assert all(torch.equal(a, b) for a, b in zip(base["out"], got["out"])), (rank, algo)
            assert got["bytes"] == base["bytes"], (rank, algo)


@slow
@worlds
def test_the_path_depends_on_the_largest_message(world):
    for res in results(world):
        for mode, programs in res["run"].items():
            for (name, algo, step, size), r in programs.items():
                phases = 2 if algo == "sra" else 1
                exchanged = mode == "all" or (mode == "threshold" and size == "large")
                assert r["kinds"] == ["Exchange" if exchanged else "Work"] * phases, (mode, name, algo, size)


@slow
@worlds
@pytest.mark.parametrize("mode", list(MODES))
def test_overlapped_programs_equal_the_collectives(world, mode):
    for rank, res in enumerate(results(world)):
        base, got = res["overlap"]["off"], res["overlap"][mode]
        for key in base:
            assert [torch.equal(a, b) for a, b in zip(base[key]["out"], got[key]["out"])] == \
                [True] * len(base[key]["out"]), (rank, mode, key)
            assert got[key]["bytes"] == base[key]["bytes"]
            phases = 2 if key[1] == "sra" else 1
            exchanged = mode == "all" or (mode == "threshold" and key[2] == "large")
            assert got[key]["kinds"] == ["Exchange" if exchanged else "Work"] * phases, (mode, key)
    outs = [res["overlap"][mode] for res in results(world)]
    for key in outs[0]:
        for r in range(1, world):
            assert all(torch.equal(a, b) for a, b in zip(outs[0][key]["out"], outs[r][key]["out"])), (key, r)


# ---------------------------------------------------------------- no processes


class _FailingWork:
    def wait(self):
        raise RuntimeError("peer gone")


class _DoneWork:
    def __init__(self):
        self.waited = 0

    def wait(self):
        self.waited += 1
        return True


def test_an_exchange_completes_its_future_from_a_thread_and_carries_failures():
    done = _DoneWork()
    ex = exchange.Exchange([done, done])
    assert ex.get_future() is ex.get_future()
    assert ex.get_future().wait() is None and done.waited == 2
    assert exchange.Exchange([]).wait() and exchange.Exchange([]).get_future().wait() is None
    with pytest.raises(RuntimeError, match="peer gone"):
        exchange.Exchange([done, _FailingWork()]).get_future().wait()


class _GatedWork:
    def __init__(self):
        self.gate = threading.Event()

    def wait(self):
        self.gate.wait()
        return True


def test_a_pipeline_stage_may_yield_an_exchange():
    """``pipeline.run`` waits for it; ``Pipeline.launch`` resumes the program from the exchange's thread."""
    seen = []

    def program(work):
        first = yield exchange.Exchange([work])
        seen.append(threading.current_thread().name)
        second = yield None
        return first <= second

    assert pipeline.run(program(_DoneWork())) is True and seen == ["MainThread"]
    seen.clear()
    gated = _GatedWork()
    fut = pipeline.Pipeline().launch(program(gated))
    assert not fut.done() and seen == []
    gated.gate.set()
    assert fut.wait() is True and seen == ["lowprec-exchange"]


def test_only_cpu_tensors_above_the_threshold_are_exchanged():
    t = torch.empty(0)
    assert exchange.use_exchange(t, exchange.MIN_EXCHANGE_BYTES)
    assert not exchange.use_exchange(t, exchange.MIN_EXCHANGE_BYTES - 1)
    assert not exchange.use_exchange(torch.empty(0, device="meta"), 1 << 30)
