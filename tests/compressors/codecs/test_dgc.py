"""DGC (compressors/codecs/dgc.py, compressors/comm/feedback.py's MomentumCorrection): the warm-up's
densities, momentum correction and factor masking on a hand-computed two-step case, local clipping,
and what it refuses. Its payload is top-k's: the contract tests cover encode and decode."""
from __future__ import annotations

import io

import pytest
import torch

import compressors as C
from compressors.codecs.topk import count_sent
from compressors.comm.feedback import MomentumCorrection
from compressors.core import wire
from tests.distributed import run_ranks
from tests.helpers import randn


def test_the_warm_up_sends_25_6_1_and_0_4_percent_for_ramp_steps_each_then_pi():
    codec = C.get("dgc", ramp_steps=3)
    assert [codec.density(step) for step in range(14)] == [0.25] * 3 + [0.0625] * 3 + [0.015625] * 3 + [0.004] * 3 + [
        0.001] * 2
    n = 10_000
    assert [count_sent(codec.at_step(step).pi, n) for step in (0, 3, 6, 9, 12, 10**6)] == [2500, 625, 157, 40, 10, 10]
    assert codec.at_step(12) is codec and codec.at_step(0) is codec.at_step(2)  # one codec per stage
    assert [C.get("dgc").density(step) for step in (0, 1, 100)] == [0.001] * 3  # ramp_steps 0: no warm-up
    # a stage sparser than pi sends pi
    assert [C.get("dgc", pi=0.01, ramp_steps=1).density(step) for step in range(5)] == [0.25, 0.0625, 0.015625,
                                                                                         0.01, 0.01]


def test_a_payload_decodes_only_with_the_codec_of_its_own_warm_up_stage():
    codec = C.get("dgc", ramp_steps=2, impl="reference")
    x = randn(400, seed=1)
    payload = codec.at_step(0).encode(x)
    assert wire.read_header(payload).params[0] == 100  # k = 25% of 400
    assert codec.at_step(1).decode(payload).count_nonzero() == 100
    with pytest.raises(C.PayloadError, match="do not match"):
        codec.at_step(2).decode(payload)
    assert codec.at_step(0).payload_nbytes((400,)) == payload.numel() == 40 + 8 + 8 * 100


def test_momentum_correction_and_factor_masking_on_a_hand_computed_two_step_case():
    reducer = C.Reducer("dgc", pi=0.5, momentum=0.5, min_compress_numel=0)
    first = [torch.tensor([1.0, -3.0, 2.0, 0.5])]
    reducer.average(first)
    # u = g; v = u; the two largest |v| are sent; both are cleared in v and in u
    assert first[0].tolist() == [0.0, -3.0, 2.0, 0.0]
    assert reducer.ef.residuals[0].tolist() == [1.0, 0.0, 0.0, 0.5]
    assert reducer.ef.velocities[0].tolist() == [1.0, 0.0, 0.0, 0.5]
    second = [torch.tensor([1.0, 1.0, 1.0, 1.0])]
    reducer.average(second)
    # u = 0.5 u + g = [1.5, 1, 1, 1.25]; v = v + u = [2.5, 1, 1, 1.75]: entries 0 and 3 are sent
    assert second[0].tolist() == [2.5, 0.0, 0.0, 1.75]
    assert reducer.ef.residuals[0].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert reducer.ef.velocities[0].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_what_was_sent_plus_what_is_left_is_the_sum_of_the_velocities():
    reducer = C.Reducer("dgc", pi=0.01, momentum=0.9, min_compress_numel=0, impl="reference")
    sent = torch.zeros(3000, dtype=torch.float64)
    velocities = torch.zeros(3000, dtype=torch.float64)  # the sum of each step's u, before its masking
    u = torch.zeros(3000)
    for seed in range(6):
        g = randn(3000, seed=seed)
        x = [g.clone()]
        reducer.average(x)
        assert int(x[0].count_nonzero()) == 30
        sent += x[0].double()
        u = u * 0.9 + g
        velocities += u.double()
        u[x[0] != 0] = 0.0
        assert torch.equal(reducer.ef.velocities[0], u)
    assert torch.allclose(sent + reducer.ef.residuals[0].double(), velocities, rtol=0, atol=1e-5)


def test_a_tensor_too_small_to_compress_travels_whole_as_its_velocity():
    reducer = C.Reducer("dgc", momentum=0.5)  # 4 entries: below min_compress_numel, in the fp32 all-reduce
    first, second = [torch.tensor([1.0, -2.0, 0.0, 4.0])], [torch.tensor([1.0, 1.0, 1.0, 1.0])]
    reducer.average(first)
    reducer.average(second)
    assert first[0].tolist() == [1.0, -2.0, 0.0, 4.0]
    assert second[0].tolist() == [1.5, 0.0, 1.0, 3.0]  # 0.5 u + g: plain momentum, nothing masked
    assert reducer.ef.residuals == {}


def test_local_clipping_scales_a_gradient_to_the_norm_and_leaves_a_smaller_one_alone():
    memory = MomentumCorrection(momentum=0.9, clip=1.0)
    big = torch.tensor([3.0, 4.0])  # norm 5
    assert memory.compensate("w", big).tolist() == pytest.approx([0.6, 0.8])
    assert big.tolist() == [3.0, 4.0]  # the caller's gradient is left alone
    small = MomentumCorrection(momentum=0.9, clip=1.0)
    assert small.compensate("w", torch.tensor([0.3, 0.4])).tolist() == pytest.approx([0.3, 0.4])
    assert MomentumCorrection(momentum=0.9).compensate("w", big).tolist() == [3.0, 4.0]  # clip 0: off


def test_the_memory_survives_state_dict():
    reducer = C.Reducer("dgc", pi=0.1, min_compress_numel=0)
    for s in range(3):
        reducer.average([randn(500, seed=s)])
    buffer = io.BytesIO()
    torch.save(reducer.state_dict(), buffer)
    buffer.seek(0)
    restored = C.Reducer("dgc", pi=0.1, min_compress_numel=0)
    state = torch.load(buffer, weights_only=False)
    saved = state["ef"]["velocities"][0].clone()
    restored.load_state_dict(state)
    a, b = [randn(500, seed=9)], [randn(500, seed=9)]
    reducer.average(a)
    restored.average(b)
    assert torch.equal(a[0], b[0]) and torch.equal(reducer.ef.velocities[0], restored.ef.velocities[0])
    assert torch.equal(state["ef"]["velocities"][0], saved)  # the state handed in is left alone


def test_dgc_averages_by_allgather_only_and_keeps_its_memory_on():
    assert C.algorithms("dgc") == ("allgather",) and C.default_algorithm("dgc") == "allgather"
    assert C.owns_momentum("dgc") and not C.owns_momentum("topk")
    with pytest.raises(ValueError, match="algorithm 'sra' is invalid for 'dgc'; valid: \\['allgather'\\]"):
        C.Reducer("dgc", "sra")
    with pytest.raises(ValueError, match="dgc keeps the momentum in its memory: error_feedback cannot be off"):
        C.Reducer("dgc", error_feedback=False)
    with pytest.raises(ValueError, match="momentum is for a method that keeps it in its memory \\(dgc\\), not 'topk'"):
        C.Reducer("topk", momentum=0.9)
    with pytest.raises(ValueError, match="momentum=1.5 is invalid; valid: a float in \\[0, 1\\]"):
        C.Reducer("dgc", momentum=1.5)


def _two_ranks(rank, world):
    torch.set_num_threads(1)
    reducer = C.Reducer("dgc", pi=0.05, momentum=0.9, clip_norm=2.0, ramp_steps=1, min_compress_numel=0)
    outs = []
    for step in range(6):
        x = [randn(40, 50, seed=100 * step + rank) * 3]
        reducer.average(x)
        outs.append(x[0])
    return outs, reducer.ef.clip


@pytest.mark.slow
def test_two_ranks_average_the_same_sparse_velocities_through_the_warm_up():
    results = run_ranks(2, _two_ranks)
    (outs0, clip0), (outs1, clip1) = results
    assert clip0 == clip1 == pytest.approx(2.0 / 2**0.5)
    nonzero = []
    for a, b in zip(outs0, outs1):
        assert torch.equal(a, b)
        nonzero.append(int(a.count_nonzero()))
    # each rank sends k of 2000 entries; the mean has at most 2 k nonzero entries, at least k
    for count, k in zip(nonzero, (500, 125, 100, 100, 100, 100)):  # 1.5625% and 0.4% are below pi
        assert k <= count <= 2 * k
