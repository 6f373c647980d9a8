"""fp32 as is and the 16-bit casts (compressors/codecs/casts.py): exactness, relative error, range.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from tests.helpers import FIRST_METHODS, gen, holds_fp32_range, randn, roundtrip


def test_fp32_is_exact():
    x = randn(17, 5)
    x[0, 0] = 3e38
    x[0, 1] = 1e-42  # denormal
    assert torch.equal(roundtrip(C.get("fp32"), x), x)
    x64 = torch.randn(9, dtype=torch.float64)
    assert torch.equal(roundtrip(C.get("fp32"), x64), x64.float())


@pytest.mark.parametrize("name,rel,lo,hi", [("fp16", 2.0**-11, -13, 15), ("bf16", 2.0**-8, -120, 120)])
def test_half_casts_relative_error(name, rel, lo, hi):
    g = gen(1)
    exps = torch.rand(20000, generator=g) * (hi - lo) + lo
    sign = torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)
    x = sign * torch.exp2(exps)
    out = roundtrip(C.get(name), x)
    err = (out.double() - x.double()).abs()
    assert bool((err <= rel * x.double().abs()).all())
    # both sides of the bound are reached: it is rounding, not truncation to fewer bits
    assert float((err / x.double().abs()).max()) > rel * 0.9


def test_fp16_overflows_to_inf():
    x = torch.tensor([1e38, -1e38, 65504.0, 70000.0, 1.0])
    out = roundtrip(C.get("fp16"), x)
    assert out.tolist() == [math.inf, -math.inf, 65504.0, math.inf, 1.0]


def test_fp16_is_the_shipped_cast_narrower_than_fp32():
    assert [n for n in FIRST_METHODS if not holds_fp32_range(n)] == ["fp16"]
