"""fp8 (compressors/codecs/fp8.py): torch's float8 cast of x / (amax / max_normal), per tensor or per
block; stochastic rounding between the two neighbouring float8 values, unbiased."""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from compressors.core import wire
from tests.helpers import randn, roundtrip

MAX_NORMAL = {"e4m3": 448.0, "e5m2": 57344.0}
DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def cast_reference(x: torch.Tensor, fmt: str, block: int) -> torch.Tensor:
    """The definition, block by block, in plain torch: scale = amax / max_normal (float32), the float8
    cast of x / scale saturated at max_normal, times scale; an all-zero block has scale 1."""
    flat = x.reshape(-1)
    row = block or flat.numel()
    out = torch.empty_like(flat)
    for a in range(0, flat.numel(), row):
        piece = flat[a:a + row]
        amax = piece.abs().max()
        scale = torch.tensor(1.0) if amax == 0 else amax / torch.tensor(MAX_NORMAL[fmt])
        if scale == 0 < amax:  # underflowed
            scale = torch.tensor(2.0**-149)
        top = MAX_NORMAL[fmt]
        out[a:a + row] = (piece / scale).clamp(-top, top).to(DTYPES[fmt]).to(torch.float32) * scale
    return out.reshape(x.shape)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("block", [0, 1, 7, 32])
@pytest.mark.parametrize("shape", [(1000,), (33, 31), (4, 3, 5, 5)], ids=str)
def test_decode_equals_torchs_cast(fmt, block, shape):
    x = randn(*shape, seed=3) * torch.logspace(-6, 6, math.prod(shape)).reshape(shape)  # a wide range
    x.view(-1)[5] = 0.0
    out = roundtrip(C.get("fp8", format=fmt, block=block), x)
    assert torch.equal(out, cast_reference(x, fmt, block))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_a_block_of_the_smallest_floats_keeps_its_values(fmt):
    # amax / max_normal underflows to 0: the scale is the smallest float32 instead, and x / scale is exact
    x = torch.tensor([1e-44, -3e-45, 0.0, 5e-45, 1.4e-45])
    out = roundtrip(C.get("fp8", format=fmt), x)
    assert torch.equal(out, x) and torch.equal(out, cast_reference(x, fmt, 0))
    # subnormal maxima: a scale of few significant bits puts x / scale past max_normal, saturated
    x = randn(100, seed=1) * 1e-40
    out = roundtrip(C.get("fp8", format=fmt, block=7), x)
    assert bool(torch.isfinite(out).all()) and torch.equal(out, cast_reference(x, fmt, 7))


def test_the_scales_and_codes_are_where_the_module_says():
    x = torch.tensor([0.0, 0.0, 3.0, -6.0, 1.5, 0.5])
    c = C.get("fp8", block=2)
    payload = c.encode(x)
    start = wire.read_header(payload).nbytes
    scales = payload[start:start + 12].view(torch.float32)
    # the all-zero block has scale 1; the others amax / 448 in float32
    assert torch.equal(scales, torch.cat([torch.ones(1), torch.tensor([6.0, 1.5]) / torch.tensor(448.0)]))
    codes = payload[start + 12:]
    assert torch.equal(codes, (x / scales.repeat_interleave(2)).to(torch.float8_e4m3fn).view(torch.uint8))
    assert c.payload_nbytes(x.shape) == len(payload)


@pytest.mark.parametrize("kind", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_entry_makes_its_block_nan_and_no_other(kind):
    x = randn(4, 64, seed=14)
    x[1, 5] = kind
    for rounding in ("nearest", "stochastic"):
        out = roundtrip(C.get("fp8", block=64, rounding=rounding), x)
        assert bool(out[1].isnan().all())
        clean = x.clone()
        clean[1] = 0
        assert torch.equal(out[[0, 2, 3]], roundtrip(C.get("fp8", block=64, rounding=rounding), clean)[[0, 2, 3]])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_stochastic_rounding_picks_a_neighbour_and_is_unbiased(fmt):
    x = randn(256, seed=9)
    c = C.get("fp8", format=fmt, rounding="stochastic")
    scale = x.abs().max() / MAX_NORMAL[fmt]
    v = x / scale
    nearest = v.to(DTYPES[fmt])
    # the neighbours: the nearest value and the next one away from it, on the side of v
    bits = nearest.view(torch.uint8)
    step = torch.where((nearest.to(torch.float32).abs() > v.abs()), -1, 1).to(torch.int16)
    other = (bits.to(torch.int16) + step).to(torch.uint8).view(DTYPES[fmt]).to(torch.float32)
    exact = nearest.to(torch.float32) == v
    lower = torch.minimum(nearest.to(torch.float32).abs(), other.abs())
    upper = torch.maximum(nearest.to(torch.float32).abs(), other.abs())
    steps = 300
    total = torch.zeros_like(x, dtype=torch.float64)
    for step_ in range(steps):
        payload = c.encode(x, step=step_)
        got = payload[-x.numel():].view(DTYPES[fmt]).to(torch.float32).abs()  # the codes' values
        assert bool(((got == lower) | (got == upper) | exact).all())
        total += c.decode(payload).double()
    mean = total / steps
    # the upper one with probability p = (|v| - lower) / (upper - lower): mean = x, spread of a Bernoulli
    p = torch.where(exact, 0.0, (v.abs() - lower) / (upper - lower)).double()
    sd = (upper - lower).double() * scale * torch.sqrt(p * (1 - p) / steps)
    z = ((mean - x.double()).abs() / sd.clamp(min=1e-30))[~exact & (p > 0) & (p < 1)]
    assert float(z.max()) < 5.0
    assert torch.equal(mean[exact], x.double()[exact])


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="format"):
        C.get("fp8", format="e3m4")
    with pytest.raises(ValueError, match="rounding"):
        C.get("fp8", rounding="up")
