"""Natural compression (compressors/codecs/natural.py): a neighbouring power of two, unbiased, and
its edges (zeros, infinities, NaN, the top binade, denormals).
"""
from __future__ import annotations

import math

import torch

import compressors as C
from tests.helpers import randn, roundtrip


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
