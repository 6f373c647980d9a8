"""Edge inputs across the methods: a tensor of one element, which the methods of the first payload
format keep exactly, and NaN or Inf, which poison only their block, bucket or group, and which the
sparse methods always send.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from tests.helpers import FIRST_METHODS, SPARSE, as_groups, cfg_id, configs, randn, roundtrip


@pytest.mark.parametrize("cfg", configs(FIRST_METHODS), ids=cfg_id)
def test_one_element_is_exact(cfg):
    name, p = cfg
    for shape in [(), (1,), (1, 1), (1, 1, 1, 1)]:
        for value in (-2.5, 0.75):
            x = torch.full(shape, value)
            out = roundtrip(C.get(name, **p), x)
            assert out.shape == x.shape
            if name == "qsgd":  # level s times (norm / s): within an ulp
                assert float(out.reshape(())) == pytest.approx(value, rel=2.0**-23), shape
            else:
                assert torch.equal(out, x), shape


# ---------------------------------------------------------------- NaN and Inf


def _bad_tensor(kind: str) -> torch.Tensor:
    x = randn(4, 64, seed=14)
    x[1, 5] = math.nan if kind == "nan" else (math.inf if kind == "inf" else -math.inf)
    return x


@pytest.mark.parametrize("kind", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("cfg", [("fp32", {}), ("fp16", {}), ("bf16", {}), ("dynamic8", {"block": 64}),
                                 ("linear8", {"block": 64}), ("qsgd", {"bucket": 64}),
                                 ("qsgd", {"bucket": 64, "norm": "l2"})], ids=cfg_id)
def test_nonfinite_input_poisons_only_its_block(cfg, kind):
    name, p = cfg
    x = _bad_tensor(kind)
    out = roundtrip(C.get(name, **p), x)
    if name in ("fp32", "fp16", "bf16"):
        assert (math.isnan(out[1, 5]) if kind == "nan" else out[1, 5] == x[1, 5])
        assert int((~torch.isfinite(out)).sum()) == 1
    else:
        # block / bucket 1 (row 1 of the 4 x 64 view) is non-finite, the others exact as before
        assert not bool(torch.isfinite(out[1]).any())
        clean = x.clone()
        clean[1] = 0
        ref = roundtrip(C.get(name, **p), clean)
        assert torch.equal(out[[0, 2, 3]], ref[[0, 2, 3]])


@pytest.mark.parametrize("grouping", ["column", "row"])
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf"])
def test_onebit_nonfinite_poisons_only_its_group(kind, grouping):
    x = _bad_tensor(kind)
    out = roundtrip(C.get("onebit", grouping=grouping), x)
    assert not math.isfinite(float(out[1, 5]))
    xg, og = as_groups(x, grouping), as_groups(out, grouping)
    g, j = (5, 1) if grouping == "column" else (1, 5)  # the bad entry's group, its index there
    others = [i for i in range(og.shape[0]) if i != g]
    assert bool(torch.isfinite(og[others]).all())
    side = xg[g] >= 0 if kind == "inf" else xg[g] < 0  # NaN >= 0 is False: the negative side
    side[j] = True
    assert not bool(torch.isfinite(og[g][side]).any())
    assert bool(torch.isfinite(og[g][~side]).all())


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf"])
def test_sparse_nonfinite_is_always_sent(name, kind):
    x = _bad_tensor(kind)
    x[3, 7] = 1e30  # a large finite value: the non-finite one still goes first
    x[0, 0] = math.inf  # an Inf before the NaN does not push the NaN out (k = 1 below)
    for pi in (1 / 256, 0.01, 0.2):
        if kind != "nan" and pi == 1 / 256:
            continue
        out = roundtrip(C.get(name, pi=pi), x)
        assert not math.isfinite(float(out[1, 5]))
        if name == "topk":
            assert (math.isnan(out[1, 5]) if kind == "nan" else out[1, 5] == x[1, 5])
        assert bool(torch.isfinite(out[[2]]).all())
