"""The hierarchical average (compressors/comm/collectives.py ``hierarchical_compressed``) on 4 gloo ranks
in one spawned world: 2 hosts x 2 workers, 1 host x 4, 4 hosts x 1."""
from __future__ import annotations

import functools
import math

import pytest
import torch

import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import compressors as C
from compressors import ddp
from compressors.comm import collectives
from compressors.comm.topology import Topology
from tests.distributed import gen, make_mlp, mlp_data, run_ranks

pytestmark = pytest.mark.slow

WORLD = 4
TWO_BY_TWO = Topology((0, 0, 1, 1))
SHAPES = [(8, 6), (12, 5), (7,), (3, 4, 2), (1,)]
EF_SHAPES = [(8, 6), (12, 5)]  # rows split among local ranks, then among hosts: residuals line up by rows
STEPS = 3


def inputs(rank: int, step: int = 0, shapes=SHAPES) -> list[torch.Tensor]:
    return [torch.randn(s, generator=gen(7, step, rank, i)) for i, s in enumerate(shapes)]


def _run(rank: int, world: int, topology: Topology, name: str, p: dict, algorithm: str, steps: int,
         shapes=SHAPES, **kw) -> dict:
    reducer = C.Reducer(name, algorithm, min_compress_numel=0, topology=topology, **kw, **p)
    outs = []
    for step in range(steps):
        xs = inputs(rank, step, shapes)
        reducer.average(xs)
        outs.append(xs)
    last = reducer.history[-1]
    return {"outs": outs, "bytes_sent": last.bytes_sent, "bytes_inter": last.bytes_inter,
            "state": reducer.state_dict()}


def _ddp(rank: int, overlap: bool) -> torch.Tensor:
    """Four SGD steps of the small MLP in three DDP buckets, hierarchical qsgd on 2 hosts x 2."""
    model = make_mlp()
    ddp_model = DDP(model, bucket_cap_mb=0.0005)
    state = ddp.comm_hook("qsgd", "hierarchical", bits=4, overlap=overlap, topology=TWO_BY_TWO)
    state.bind(ddp_model)
    ddp_model.register_comm_hook(state, type(state).hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = mlp_data(rank)
    for t in range(4):
        opt.zero_grad()
        F.cross_entropy(ddp_model(x[t * 32:(t + 1) * 32]), y[t * 32:(t + 1) * 32]).backward()
        opt.step()
    return torch.cat([q.detach().reshape(-1) for q in model.parameters()])


def _cases(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    flat = Topology.flat(world)
    return {
        "ddp": {overlap: _ddp(rank, overlap) for overlap in (True, False)},
        "fp32": _run(rank, world, TWO_BY_TWO, "fp32", {}, "hierarchical", 1),
        "fp16_intra": _run(rank, world, TWO_BY_TWO, "fp32", {}, "hierarchical", 1, intra="fp16"),
        "qsgd_hier_g1": _run(rank, world, flat, "qsgd", {"bits": 4}, "hierarchical", STEPS),
        "qsgd_sra": _run(rank, world, flat, "qsgd", {"bits": 4}, "sra", STEPS),
        "qsgd_one_host": _run(rank, world, Topology((0, 0, 0, 0)), "qsgd", {"bits": 4}, "hierarchical", 1),
        "qsgd_2x2": _run(rank, world, TWO_BY_TWO, "qsgd", {"bits": 4}, "hierarchical", STEPS),
        "qsgd_2x2_allgather": _run(rank, world, TWO_BY_TWO, "qsgd", {"bits": 4}, "hierarchical", 1,
                                   inter="allgather"),
        "ef": _run(rank, world, TWO_BY_TWO, "qsgd", {"bits": 2}, "hierarchical", STEPS, EF_SHAPES,
                   error_feedback=True),
        "qsgd_sra_2x2": _run(rank, world, TWO_BY_TWO, "qsgd", {"bits": 4}, "sra", 1),
    }


@functools.cache
def results() -> list[dict]:
    return run_ranks(WORLD, _cases)


def host_mean_then_mean(step: int = 0, shapes=SHAPES, dtype=torch.float32) -> list[torch.Tensor]:
    """The hierarchical order of the exact average: each host's x/2 summed in local-rank order, the two
    host means summed in host order, halved."""
    out = []
    for i, _ in enumerate(shapes):
        xs = [inputs(r, step, shapes)[i] for r in range(WORLD)]
        hosts = [(xs[0] / 2).to(dtype).float() + (xs[1] / 2).to(dtype).float(),
                 (xs[2] / 2).to(dtype).float() + (xs[3] / 2).to(dtype).float()]
        out.append(((torch.zeros_like(hosts[0]) + hosts[0] + hosts[1]) / 2).to(dtype).float())
    return out


def test_fp32_over_hierarchical_is_the_mean_in_the_hierarchys_order_on_every_rank():
    for res in results():
        for got, want in zip(res["fp32"]["outs"][0], host_mean_then_mean()):
            assert torch.equal(got, want)
    # ... which is all_reduce's mean up to float32 rounding
    for i, want in enumerate(host_mean_then_mean()):
        exact = torch.stack([inputs(r)[i].double() for r in range(WORLD)]).mean(0)
        torch.testing.assert_close(want.double(), exact, rtol=0, atol=1e-6)


def test_a_16_bit_intra_level_casts_what_travels_inside_the_host():
    for res in results():
        for got, want in zip(res["fp16_intra"]["outs"][0], host_mean_then_mean(dtype=torch.float16)):
            assert torch.equal(got, want)


def test_with_one_worker_per_host_it_is_flat_sra_bit_for_bit():
    for res in results():
        for step in range(STEPS):
            for got, want in zip(res["qsgd_hier_g1"]["outs"][step], res["qsgd_sra"]["outs"][step]):
                assert torch.equal(got, want), step
        assert res["qsgd_hier_g1"]["bytes_sent"] == res["qsgd_sra"]["bytes_sent"]
        assert res["qsgd_hier_g1"]["bytes_inter"] == res["qsgd_sra"]["bytes_inter"] == res["qsgd_sra"]["bytes_sent"]


def test_on_one_host_nothing_is_compressed():
    want = []
    for i, _ in enumerate(SHAPES):
        xs = [inputs(r)[i] for r in range(WORLD)]
        want.append(xs[0] / 4 + xs[1] / 4 + xs[2] / 4 + xs[3] / 4)
    for res in results():
        assert all(torch.equal(g, w) for g, w in zip(res["qsgd_one_host"]["outs"][0], want))
        assert res["qsgd_one_host"]["bytes_inter"] == 0


def test_every_rank_ends_with_the_same_tensors():
    for key in ("qsgd_2x2", "qsgd_2x2_allgather", "ef"):
        first = results()[0][key]["outs"]
        for res in results()[1:]:
            for step, (a, b) in enumerate(zip(first, res[key]["outs"])):
                assert all(torch.equal(x, y) for x, y in zip(a, b)), (key, step)


def test_qsgd_over_hierarchical_is_close_to_the_mean():
    for step in range(STEPS):
        for got, shape, i in zip(results()[0]["qsgd_2x2"]["outs"][step], SHAPES, range(len(SHAPES))):
            exact = torch.stack([inputs(r, step)[i] for r in range(WORLD)]).mean(0)
            # qsgd 4 bits: each value within a bucket's max / 7 of its own, twice (inner sra), halved by G.
            assert float((got - exact).abs().max()) <= 2 * float(exact.abs().max() + 3) / 7, shape


def _chunk_bytes(name: str, p: dict, shape: tuple[int, ...], parts: int, part: int, key: int) -> int:
    codec = C.get(name, **p)
    axis = collectives.chunk_axis(shape, codec)
    bounds = collectives.split(shape, parts, key, axis)
    return codec.payload_nbytes(collectives.chunk_shape(shape, bounds[part], axis))


def test_bytes_inside_and_across_hosts_follow_the_algorithm():
    """Local rank g of host h: it sends its partner the partner's chunk of every tensor in fp32, takes part in
    the sra of its own chunks across the 2 hosts (its inner rank h), and sends its averaged chunks back,
    padded to the largest local rank's."""
    codec = C.get("qsgd", bits=4)
    for rank, res in enumerate(results()):
        host, g = divmod(rank, 2)
        chunk_sizes = []  # elements of each local rank's chunks, all tensors
        inner_shapes = []
        for j in range(2):
            total = 0
            for key, shape in enumerate(SHAPES):
                axis = collectives.chunk_axis(shape, codec)
                piece = collectives.chunk_shape(shape, collectives.split(shape, 2, key, axis)[j], axis)
                total += math.prod(piece)
                if j == g and math.prod(piece):
                    inner_shapes.append((key, piece))
            chunk_sizes.append(total)
        intra = 4 * chunk_sizes[1 - g] + 4 * max(chunk_sizes)
        # sra across the 2 hosts on this rank's chunks: all_to_all of the other host's pieces, then the
        # all_gather of this rank's re-encoded pieces padded to the widest.
        to_other = sum(_chunk_bytes("qsgd", {"bits": 4}, s, 2, 1 - host, k) for k, s in inner_shapes)
        widths = [sum(_chunk_bytes("qsgd", {"bits": 4}, s, 2, h, k) for k, s in inner_shapes) for h in range(2)]
        inter = to_other + max(widths)
        assert res["qsgd_2x2"]["bytes_inter"] == inter
        assert res["qsgd_2x2"]["bytes_sent"] == intra + inter


def test_flat_sra_on_two_hosts_counts_two_thirds_of_its_bytes_across():
    for res in results():
        assert res["qsgd_sra_2x2"]["bytes_inter"] == pytest.approx(res["qsgd_sra_2x2"]["bytes_sent"] * 2 / 3)


def test_error_feedback_carries_what_compression_held_back():
    """Over the steps, the sum of the outputs plus what the residuals hold (each local rank's chunk: the
    mean of its two hosts' worker residuals and the servers' rows) is the sum of the true means."""
    codec = C.get("qsgd", bits=2)
    res = results()
    out = res[0]["ef"]["outs"]
    for key, shape in enumerate(EF_SHAPES):
        total = sum(torch.stack([inputs(r, s, EF_SHAPES)[key].double() for r in range(WORLD)]).mean(0)
                    for s in range(STEPS))
        outs = sum(o[key].double() for o in out)
        left = torch.zeros(shape, dtype=torch.float64)
        bounds = collectives.split(shape, 2, key, collectives.chunk_axis(shape, codec))
        for g in range(2):
            ranks = [g, 2 + g]  # local rank g on host 0 and host 1
            workers = sum(res[r]["ef"]["state"]["ef"]["residuals"][key].double() for r in ranks) / 2
            servers = torch.cat([res[r]["ef"]["state"]["server_ef"]["residuals"][key].double() for r in ranks])
            left[bounds[g][0]:bounds[g][1]] = workers + servers
        assert float(left.abs().max()) > 0
        torch.testing.assert_close(outs + left, total, rtol=0, atol=1e-5 * float(total.abs().max()))


def test_overlapped_and_blocking_hooks_train_identical_parameters():
    on = [res["ddp"][True] for res in results()]
    off = [res["ddp"][False] for res in results()]
    assert all(torch.equal(a, b) for a, b in zip(on, off))
    assert all(torch.equal(on[0], a) for a in on[1:])
