"""The sign methods (compressors/codecs/signs.py): signsgd, efsignsgd and scaledsign against their
papers' definitions, and signsgd's majority vote through the ``sra`` algorithm.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import compressors as C
from tests.helpers import randn, roundtrip


def test_signsgd_sends_the_signs(impl):
    c = C.get("signsgd", impl=impl)
    x = randn(9, 13, seed=1)
    x[0, :3] = torch.tensor([0.0, -0.0, 1e-30])
    out = roundtrip(c, x)
    assert torch.equal(out, torch.where(x >= 0, 1.0, -1.0))  # sign(0) goes as +1
    assert torch.equal(roundtrip(c, torch.zeros(4, 5)), torch.zeros(4, 5))  # no nonzero entry: scale 0


def test_signsgd_nonfinite_input_decodes_nonfinite(impl):
    # the tensor is signsgd's one block: an Inf makes its scale Inf, a NaN (even beside an Inf) NaN
    c = C.get("signsgd", impl=impl)
    assert roundtrip(c, torch.tensor([math.inf, -2.0, 0.0, 3.0])).tolist() == [math.inf, -math.inf, math.inf, math.inf]
    assert roundtrip(c, torch.tensor([1.0, -math.inf, -2.0])).tolist() == [math.inf, -math.inf, -math.inf]
    for x in (torch.tensor([1.0, math.nan, -2.0]), torch.tensor([math.inf, math.nan, -math.inf])):
        assert bool(roundtrip(c, x).isnan().all())


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
