"""TernGrad (compressors/codecs/terngrad.py) against its paper: three values of the layer's maximum,
unbiased, clipped at c sigma.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from tests.helpers import randn, roundtrip


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
