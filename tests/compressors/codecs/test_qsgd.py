"""QSGD (compressors/codecs/qsgd.py): levels, unbiasedness, the variance bounds, huge values, every bit
width, the counter-hash randomness and work that follows the tensor, not the bucket.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from compressors.core import rng
from tests.helpers import ceil_div, randn, roundtrip


def qsgd_norms(x: torch.Tensor, bucket: int, norm: str) -> torch.Tensor:
    n = x.numel()
    nb = ceil_div(n, bucket)
    b = torch.nn.functional.pad(x.double().reshape(-1), (0, nb * bucket - n)).view(nb, bucket)
    return b.abs().amax(1) if norm == "max" else b.pow(2).sum(1).sqrt()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("norm", ["max", "l2"])
def test_qsgd_decodes_to_a_neighbouring_level(bits, norm):
    bucket = 37
    x = randn(500, seed=bits)
    x[100] = 0.0
    c = C.get("qsgd", bits=bits, bucket=bucket, norm=norm)
    s = 2 ** (bits - 1) - 1
    norms = qsgd_norms(x, bucket, norm).repeat_interleave(bucket)[:500]
    for step in range(3):
        out = roundtrip(c, x, step=step).double()
        r = x.double().abs() / norms * s
        level = out.abs() / norms * s
        assert float((level - level.round()).abs().max()) < 1e-4
        level = level.round()
        # float32 norms differ from these float64 ones by ~1e-7: allow that much around integers
        assert bool(((level >= (r - 1e-5).floor()) & (level <= (r + 1e-5).floor() + 1)).all())
        assert bool((level <= s).all())
        nz = out != 0
        assert bool((torch.sign(out[nz]) == torch.sign(x.double()[nz])).all())
        assert out[100] == 0
    if norm == "max":  # the maximum of each bucket sits on the top level (s * (norm / s): 1 ulp)
        for s0 in range(0, 500, bucket):
            i = int(x[s0:s0 + bucket].abs().argmax()) + s0
            assert float(out[i]) == pytest.approx(float(x[i]), rel=2.0**-23)


@pytest.mark.parametrize("bits,norm", [(2, "max"), (2, "l2"), (4, "max"), (3, "l2")])
def test_qsgd_is_unbiased(bits, norm):
    n, bucket, T = 200, 50, 1000
    x = randn(n, seed=11)
    c = C.get("qsgd", bits=bits, bucket=bucket, norm=norm)
    s = 2 ** (bits - 1) - 1
    acc = torch.zeros(n, dtype=torch.float64)
    for step in range(T):
        acc += roundtrip(c, x, step=step).double()
    mean = acc / T
    norms = qsgd_norms(x, bucket, norm).repeat_interleave(bucket)[:n]
    # per element: Var <= (norm / s)^2 / 4, so the mean's std <= norm / (2 s sqrt(T))
    sd = norms / (2 * s * math.sqrt(T))
    z = (mean - x.double()).abs() / sd
    assert float(z.max()) < 5.5
    # the deviations look like noise: their average is far below the per-element bound
    assert float(((mean - x.double()) / sd).mean().abs()) < 5.5 / math.sqrt(n)


@pytest.mark.parametrize("bits", [2, 3, 4, 6])
def test_qsgd_variance_bound_l2(bits):
    bucket, nbk, T = 64, 4, 400
    x = randn(bucket * nbk, seed=bits)
    x[:bucket] = 1.0 / math.sqrt(bucket)  # a flat bucket: the worst case of the bound
    c = C.get("qsgd", bits=bits, bucket=bucket, norm="l2")
    s = 2 ** (bits - 1) - 1
    xd = x.double().view(nbk, bucket)
    sq = torch.zeros(nbk, dtype=torch.float64)
    for step in range(T):
        sq += ((roundtrip(c, x, step=step).double().view(nbk, bucket) - xd) ** 2).sum(1)
    emp = sq / T
    norm2 = (xd**2).sum(1)
    bound = min(bucket / s**2, math.sqrt(bucket) / s) * norm2
    # exact expected squared error of unbiased rounding between levels: (norm/s)^2 sum p (1 - p)
    r = xd.abs() / norm2.sqrt()[:, None] * s
    p = r - r.floor()
    exact = (norm2 / s**2) * (p * (1 - p)).sum(1)
    assert bool((exact <= bound * (1 + 1e-9)).all())
    assert bool((emp <= bound * 1.15).all())
    assert torch.allclose(emp, exact, rtol=0.2)


def test_qsgd_max_norm_variance_bound():
    x = randn(1024, seed=5)
    c = C.get("qsgd", bits=2, bucket=128)
    T = 300
    sq = torch.zeros(1024, dtype=torch.float64)
    for step in range(T):
        sq += (roundtrip(c, x, step=step).double() - x.double()) ** 2
    norms = qsgd_norms(x, 128, "max").repeat_interleave(128)
    assert float((sq / T).sum()) <= float((norms**2 / 4).sum())


def test_qsgd_huge_finite_values_l2():
    """Finite input whose l2 bucket norm (1.4e20) is a float32 but whose sum of squares (2e40)
    is not: the decode is finite (the norm is computed in float64)."""
    x = torch.tensor([1e20, -1e20, 1.0, 0.5])
    out = roundtrip(C.get("qsgd", norm="l2"), x)
    assert bool(torch.isfinite(out).all())
    assert float((out.double() - x.double()).abs().max()) <= math.sqrt(2) * 1e20 * 1.0001


def test_qsgd_every_bit_width_roundtrips_its_size():
    for bits in range(2, 9):
        for norm in ("max", "l2"):
            c = C.get("qsgd", bits=bits, norm=norm, bucket=10)
            for n in (1, 7, 8, 9, 33, 100):
                p = c.encode(randn(n, seed=bits))
                assert p.numel() == 40 + 8 + 4 * ceil_div(n, 10) + ceil_div(n * bits, 8)
                assert c.decode(p).shape == (n,)


def test_qsgd_randomness_depends_on_seed_step_rank_stream():
    x = randn(4096, seed=1)
    base = C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=0)
    assert torch.equal(base, C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=0))
    others = [
        C.get("qsgd", bits=2).encode(x, step=2, rank=0, stream=0),
        C.get("qsgd", bits=2).encode(x, step=1, rank=1, stream=0),
        C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=1),
        C.get("qsgd", bits=2, seed=1).encode(x, step=1, rank=0, stream=0),
    ]
    for o in others:
        assert o.numel() == base.numel() and not torch.equal(o, base)
        assert torch.equal(o[:48], base[:48])  # header
    keys = {rng.stream_key(*t) for t in [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                                         (0, 1, 1, 0), (1, 1, 1, 1), (2**32 - 1, 0, 0, 0)]}
    assert len(keys) == 8


def test_qsgd_work_follows_the_tensor_not_the_bucket(monkeypatch):
    padded = []
    pad = torch.nn.functional.pad

    def recording_pad(x, widths, *args, **kwargs):
        out = pad(x, widths, *args, **kwargs)
        padded.append(out.numel())
        return out

    monkeypatch.setattr(torch.nn.functional, "pad", recording_pad)
    x = torch.randn(10)
    small = C.get("qsgd", bucket=16, impl="reference")  # the torch code pads; the kernels never do
    for bucket in (2**20, 2**26, 2**31 - 1):
        c = C.get("qsgd", bucket=bucket, impl="reference")
        y = c.decode(c.encode(x, step=1))
        assert torch.equal(y, small.decode(small.encode(x, step=1)))  # one bucket either way
    assert max(padded) <= 16
