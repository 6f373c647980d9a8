"""CGX's max-min quantizer (compressors/codecs/maxmin.py): levels between a bucket's min and max,
unbiased, exact extremes and constant buckets, non-finite values poison only their bucket.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from tests.helpers import randn, roundtrip


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
