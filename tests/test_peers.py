"""Tests of the peers' methods (issue 14): signsgd, efsignsgd, scaledsign, terngrad, randomk, maxmin
and natural, each against its paper's definition, computed here independently of the code.

The contract tests of tests/test_compressors.py, tests/test_wire.py and tests/test_kernels.py
pick these methods up from the registry (each with every one of its ``examples``); what is
particular to each method is here: its size formula, its values, its bias or unbiasedness, its
error feedback and, for signsgd, the majority vote of the ``sra`` algorithm.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import compressors as C
from compressors.core import rng

PEERS = ("signsgd", "efsignsgd", "scaledsign", "terngrad", "randomk", "maxmin", "natural")
CONFIGS = [(name, dict(p)) for name in PEERS for p in C.COMPRESSORS[name].examples]
SHAPES = [(), (1,), (7,), (1000,), (3, 5), (1, 100), (100, 1), (4, 3, 5), (16, 3, 3, 3), (0,), (0, 5), (5, 0),
          (2, 32768), (40000,), (64, 32, 3, 3), (3, 1, 1, 1, 1, 1, 1, 2)]


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def roundtrip(c: C.Compressor, x: torch.Tensor, **kw) -> torch.Tensor:
    return c.decode(c.encode(x, **kw))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def k_sent(pi: float, n: int) -> int:
    return 0 if n == 0 else min(n, max(1, math.ceil(round(pi * n, 9))))


def expected_nbytes(name: str, shape: tuple[int, ...], **p) -> int:
    """The module docstrings' formulas: header 40 + 8 ndim, then the body."""
    n = math.prod(shape)
    if name in ("signsgd", "efsignsgd", "scaledsign"):
        body = 4 + ceil_div(n, 8)
    elif name == "terngrad":
        body = 4 * ceil_div(n, p.get("bucket", 2**31 - 1)) + ceil_div(2 * n, 8)
    elif name == "randomk":
        body = 4 + 4 * k_sent(p.get("pi", 0.01), n)
    elif name == "maxmin":
        body = 8 * ceil_div(n, p.get("bucket", 1024)) + ceil_div(n * p.get("bits", 4), 8)
    elif name == "natural":
        body = ceil_div(9 * n, 8)
    else:
        raise AssertionError(name)
    return 40 + 8 * len(shape) + body


@pytest.fixture(params=["reference", "numba"])
def impl(request):
    if request.param == "numba":
        pytest.importorskip("numba")
    return request.param


# ---------------------------------------------------------------- registration and sizes


def test_registered_with_their_wire_ids_and_feedback():
    ids = {name: C.COMPRESSORS[name].wire_id for name in PEERS}
    assert ids == {"signsgd": 20, "efsignsgd": 21, "scaledsign": 22, "terngrad": 23, "randomk": 24, "maxmin": 25,
                   "natural": 26}
    feedback = {name for name in PEERS if C.COMPRESSORS[name].needs_error_feedback}
    assert feedback == {"efsignsgd", "scaledsign", "randomk"}
    assert all(C.has_numba(name) for name in PEERS)
    assert all(C.default_algorithm(name) == "sra" for name in PEERS)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c[0] + "".join(f"-{k}{v}" for k, v in c[1].items()))
def test_payload_nbytes_matches_the_size_formula(cfg):
    name, p = cfg
    c = C.get(name, **p)
    for shape in SHAPES:
        assert c.payload_nbytes(shape) == expected_nbytes(name, shape, **p), shape


@pytest.mark.parametrize("name,p,text", [("maxmin", {"bits": 0}, r"\[1, 8\]"), ("maxmin", {"bits": 9}, r"\[1, 8\]"),
                                         ("maxmin", {"bucket": 0}, "bucket"), ("randomk", {"pi": 0.0}, r"\(0.0, 1.0\]"),
                                         ("terngrad", {"clip": -1.0}, "clip"), ("terngrad", {"bits": 2}, "unknown")])
def test_bad_parameters_name_the_valid_range(name, p, text):
    with pytest.raises(ValueError, match=text):
        C.get(name, **p)


# ---------------------------------------------------------------- the sign methods


def test_signsgd_sends_the_signs(impl):
    c = C.get("signsgd", impl=impl)
    x = randn(9, 13, seed=1)
    x[0, :3] = torch.tensor([0.0, -0.0, 1e-30])
    out = roundtrip(c, x)
    assert torch.equal(out, torch.where(x >= 0, 1.0, -1.0))  # sign(0) goes as +1
    assert torch.equal(roundtrip(c, torch.zeros(4, 5)), torch.zeros(4, 5))  # no nonzero entry: scale 0
    x[3, 4] = math.nan
    assert bool(roundtrip(c, x).isnan().all())
    inf = torch.tensor([math.inf, -math.inf, 2.0])
    assert roundtrip(c, inf).tolist() == [1.0, -1.0, 1.0]


@pytest.mark.parametrize("name", ["efsignsgd", "scaledsign"])
def test_scaled_signs_follow_the_papers_scale(name, impl):
    c = C.get(name, impl=impl)
    for shape in [(1,), (7,), (33, 17), (4, 3, 3, 3), (1000,)]:
        x = randn(*shape, seed=len(shape))
        v = x.double().numpy().reshape(-1)
        if name == "efsignsgd":  # Karimireddy et al.: ||p||_1 / d
            scale = np.abs(v).sum() / v.size
        else:  # DeepSpeed: torch.norm(x) / np.sqrt(numel)
            scale = np.sqrt((v * v).sum()) / np.sqrt(v.size)
        out = roundtrip(c, x).double()
        assert float(out.abs().max()) == pytest.approx(scale, rel=1e-6)
        assert bool((out.abs() == out.abs().max()).all())
        assert torch.equal(out > 0, x >= 0)


@pytest.mark.parametrize("name", ["efsignsgd", "scaledsign"])
def test_scaled_signs_of_huge_values_stay_finite(name, impl):
    x = torch.tensor([3.3e38, -3.3e38, 3e38, 1.0])
    out = roundtrip(C.get(name, impl=impl), x)
    assert bool(torch.isfinite(out).all()) and float(out.abs().max()) > 1e38


def _sra_by_hand(c: C.Compressor, per_rank: list[torch.Tensor]) -> torch.Tensor:
    """What sra does with one chunk: decode every rank's payload, average, re-encode, decode."""
    world = len(per_rank)
    total = torch.zeros(per_rank[0].shape)
    for r, x in enumerate(per_rank):
        c.decode(c.encode(x, rank=r), out=total, add=True)
    return c.decode(c.encode(total / world, rank=world))


@pytest.mark.parametrize("world", [2, 3, 5])
def test_signsgd_over_sra_is_the_majority_vote(world, impl):
    c = C.get("signsgd", impl=impl)
    per_rank = [randn(6, 50, seed=10 + r) for r in range(world)]
    votes = sum(torch.where(x >= 0, 1, -1) for x in per_rank)
    # Bernstein et al.'s server: sign of the sum of the signs; a tie (even worlds) goes as +1.
    assert torch.equal(_sra_by_hand(c, per_rank), torch.where(votes >= 0, 1.0, -1.0))


@pytest.mark.parametrize("name", ["efsignsgd", "scaledsign", "randomk"])
def test_error_feedback_conserves_the_sum(name, impl):
    c = C.get(name, impl=impl, **({"pi": 0.1} if name == "randomk" else {}))
    ef = C.ErrorFeedback()
    total_in = torch.zeros(6, 20, dtype=torch.float64)
    total_out = torch.zeros(6, 20, dtype=torch.float64)
    for t in range(25):
        g = randn(6, 20, seed=100 + t)
        v = ef.compensate("w", g)
        d = c.decode(c.encode(v, step=t))
        ef.update("w", v, d)
        total_in += g.double()
        total_out += d.double()
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    # with memory the running sum tracks the true one: the residual stays bounded
    assert float(ef.residuals["w"].abs().max()) < 25


# ---------------------------------------------------------------- terngrad


def test_terngrad_is_three_values_of_the_layer_max(impl):
    c = C.get("terngrad", impl=impl)
    x = randn(20, 30, seed=3)
    s = float(x.abs().max())
    out = roundtrip(c, x, step=4)
    assert set(out.unique().tolist()) <= {-s, 0.0, s}
    assert bool((out * x >= 0).all())  # never the opposite sign
    assert torch.equal(c.encode(x, step=4)[56:],
                       C.get("qsgd", bits=2, bucket=2**31 - 1, impl=impl).encode(x, step=4)[56:])


def test_terngrad_is_unbiased():
    n, T = 200, 1000
    x = randn(n, seed=11)
    c = C.get("terngrad", bucket=50)
    mean = sum(roundtrip(c, x, step=t).double() for t in range(T)) / T
    s = x.abs().view(4, 50).amax(dim=1).double().repeat_interleave(50)
    # Bernoulli(|x|/s) times s: Var <= s^2 / 4, the mean's std <= s / (2 sqrt(T))
    z = (mean - x.double()).abs() / (s / (2 * math.sqrt(T)))
    assert float(z.max()) < 5.5


def test_terngrad_clips_at_c_sigma(impl):
    x = randn(1000, seed=5)
    x[7] = 40.0
    bound = 2.5 * float(x.double().std(unbiased=False))
    out = roundtrip(C.get("terngrad", clip=2.5, impl=impl), x)
    magnitudes = out.abs().unique().tolist()
    assert magnitudes[0] == 0.0 and len(magnitudes) == 2 and magnitudes[1] == pytest.approx(bound, rel=1e-6)
    assert float(out[7]) == pytest.approx(bound, rel=1e-6)  # clamped, then max|g|: always sent


# ---------------------------------------------------------------- randomk


def test_randomk_sends_k_values_unscaled(impl):
    c = C.get("randomk", pi=0.05, impl=impl)
    x = randn(40, 50, seed=6).abs() + 1.0  # no zero entry: the sent ones are the nonzeros
    out = roundtrip(c, x, step=2, rank=1, stream=3)
    sent = out != 0
    assert int(sent.sum()) == 100
    assert torch.equal(out[sent], x[sent])  # Stich et al.: unscaled, with memory


def test_randomk_choice_is_the_hash_order_and_changes_every_step(impl):
    c = C.get("randomk", pi=0.1, impl=impl)
    x = randn(500, seed=7).abs() + 1.0
    key = rng.stream_key(0, 9, 2, 4)
    u = rng.uniform(key, 500, "cpu").numpy()
    order = np.lexsort((np.arange(500), -u))  # largest draws, ties by lowest index
    chosen = (roundtrip(c, x, step=9, rank=2, stream=4) != 0).nonzero().view(-1).numpy()
    assert chosen.tolist() == np.sort(order[:50]).tolist()
    other = (roundtrip(c, x, step=10, rank=2, stream=4) != 0).nonzero().view(-1).numpy()
    assert chosen.tolist() != other.tolist()


def test_randomk_choice_is_uniform():
    n, k, T = 64, 8, 4000
    c = C.get("randomk", pi=k / n)
    counts = torch.zeros(n)
    for t in range(T):
        counts += roundtrip(c, torch.ones(n), step=t) != 0
    p = k / n  # each entry's chance; binomial std of its count
    z = (counts - T * p).abs() / math.sqrt(T * p * (1 - p))
    assert float(z.max()) < 4.5


# ---------------------------------------------------------------- maxmin


@pytest.mark.parametrize("bits,bucket", [(1, 16), (2, 7), (4, 1024), (8, 100), (3, 1)])
def test_maxmin_decodes_to_a_neighbouring_level(bits, bucket, impl):
    c = C.get("maxmin", bits=bits, bucket=bucket, impl=impl)
    x = randn(1000, seed=bits) * 3 + 1
    out = roundtrip(c, x, step=1).double()
    levels = 2**bits - 1
    for a in range(0, 1000, bucket):
        xb, ob = x[a:a + bucket].double(), out[a:a + bucket]
        lo, hi = float(xb.min()), float(xb.max())
        unit = (hi - lo) / levels
        assert float(ob.min()) >= lo - 1e-6 and float(ob.max()) <= hi + 1e-6
        if unit > 0:
            level = (ob - lo) / unit
            assert float((level - level.round()).abs().max()) < 1e-3  # on the grid
            assert float(((ob - xb).abs() / unit).max()) < 1 + 1e-4  # within one unit
        else:
            assert torch.equal(ob, xb)


def test_maxmin_is_unbiased():
    n, T = 300, 1000
    x = randn(n, seed=12)
    c = C.get("maxmin", bits=2, bucket=60)
    mean = sum(roundtrip(c, x, step=t).double() for t in range(T)) / T
    xb = x.double().view(5, 60)
    unit = ((xb.amax(dim=1) - xb.amin(dim=1)) / 3).repeat_interleave(60)
    z = (mean - x.double()).abs() / (unit / (2 * math.sqrt(T)))
    assert float(z.max()) < 5.5


def test_maxmin_extremes_and_constant_buckets_are_exact(impl):
    c = C.get("maxmin", bits=3, bucket=10, impl=impl)
    x = randn(50, seed=13)
    x[10:20] = 0.25
    out = roundtrip(c, x)
    assert torch.equal(out[10:20], x[10:20])
    for a in (0, 20, 30, 40):
        i, j = int(x[a:a + 10].argmin()) + a, int(x[a:a + 10].argmax()) + a
        assert float(out[i]) == float(x[i]) and float(out[j]) == pytest.approx(float(x[j]), rel=1e-6)
    assert roundtrip(c, torch.tensor([-2.5])).tolist() == [-2.5]


def test_maxmin_nonfinite_poisons_only_its_bucket(impl):
    c = C.get("maxmin", bucket=64, impl=impl)
    for bad in (math.nan, math.inf, -math.inf):
        x = randn(4, 64, seed=14)
        x[1, 5] = bad
        out = roundtrip(c, x)
        assert bool(out[1].isnan().all()) and bool(torch.isfinite(out[[0, 2, 3]]).all())


# ---------------------------------------------------------------- natural


def test_natural_rounds_to_a_neighbouring_power_of_two(impl):
    c = C.get("natural", impl=impl)
    x = randn(5000, seed=15) * torch.exp2(torch.randint(-60, 60, (5000,), generator=torch.Generator().manual_seed(1)))
    out = roundtrip(c, x, step=3).double()
    a = torch.floor(torch.log2(x.double().abs()))
    low, high = torch.exp2(a), torch.exp2(a + 1)
    mag = out.abs()
    assert bool(((mag == low) | (mag == high)).all())
    assert torch.equal(out < 0, x < 0)
    powers = torch.tensor([0.5, -4.0, 2.0**-126, 2.0**127, 1.0])
    assert torch.equal(roundtrip(c, powers), powers)  # a power of two is exact


def test_natural_is_unbiased():
    n, T = 100, 2000
    x = randn(n, seed=16)
    x[:10] *= 1e-39  # denormals: 0 or 2**-126
    c = C.get("natural")
    mean = sum(roundtrip(c, x, step=t).double() for t in range(T)) / T
    low = torch.where(x.abs() < 2.0**-126, 0.0, torch.exp2(torch.floor(torch.log2(x.double().abs()))))
    high = torch.where(x.abs() < 2.0**-126, 2.0**-126, 2 * low)
    sd = (high - low) / (2 * math.sqrt(T))  # a two-point variable spans high - low
    assert float(((mean - x.double()).abs() / sd).max()) < 5.5


def test_natural_edges(impl):
    c = C.get("natural", impl=impl)
    x = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 3.3e38, -3.0e38, 1e-45, -1e-45])
    out = roundtrip(c, x, step=1)
    assert out[:4].tolist() == [0.0, 0.0, math.inf, -math.inf]
    assert math.copysign(1.0, float(out[1])) == 1.0  # a zero's sign is dropped
    assert math.isnan(float(out[4]))
    assert out[5:7].tolist() == [2.0**127, -(2.0**127)]  # the top binade rounds down, never to inf
    assert set(out[7:].abs().tolist()) <= {0.0, 2.0**-126}


# ---------------------------------------------------------------- over the collectives (spawned ranks)


def _reduce_every_peer(rank, world):
    out = {}
    for name in PEERS:
        for algo in ("allgather", "sra"):
            xs = [randn(37, 53, seed=20 + rank), randn(1025, seed=30 + rank)]
            C.Reducer(name, algo, min_compress_numel=0, impl="reference").average(xs)
            out[name, algo] = xs
    return out


@pytest.mark.slow
def test_every_peer_averages_over_both_algorithms_and_signsgd_votes():
    from tests.distributed import run_ranks

    world = 3
    results = run_ranks(world, _reduce_every_peer)
    inputs = [[randn(37, 53, seed=20 + r), randn(1025, seed=30 + r)] for r in range(world)]
    for key in results[0]:
        for r in range(1, world):  # every rank holds the same average
            assert all(torch.equal(a, b) for a, b in zip(results[0][key], results[r][key])), key
        assert all(bool(torch.isfinite(t).all()) for t in results[0][key]), key
    for i in range(2):
        votes = sum(torch.where(inputs[r][i] >= 0, 1, -1) for r in range(world))
        assert torch.equal(results[0]["signsgd", "sra"][i], torch.where(votes >= 0, 1.0, -1.0))
        assert torch.equal(results[0]["signsgd", "allgather"][i], votes / world)
