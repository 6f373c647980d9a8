"""The 8-bit types scaled by the absolute maximum (compressors/codecs/scaled8.py): linear8's levels,
dynamic8's choice of Dettmers' table entry, blocks, scopes and ``encode(absmax=)``.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from tests.helpers import dettmers_table, gen, randn, roundtrip


# ---------------------------------------------------------------- linear8


@pytest.mark.parametrize("block", [0, 1, 7, 64, 1000])
def test_linear8_error_within_half_a_level_per_block(block):
    x = randn(3001, seed=block)
    x[100:200] *= 1e-4  # blocks of very different scale
    x[2000:2100] *= 1e4
    c = C.get("linear8", block=block)
    out = roundtrip(c, x)
    b = block or x.numel()
    for s in range(0, x.numel(), b):
        xb, ob = x[s:s + b].double(), out[s:s + b].double()
        m = float(xb.abs().max())
        assert float((ob - xb).abs().max()) <= m / 254 * (1 + 1e-5) + 1e-45
        # the levels: decoded / max * 127 is an integer in [-127, 127]
        if m:
            lv = ob / m * 127
            assert float((lv - lv.round()).abs().max()) < 1e-3 and float(lv.abs().max()) <= 127 + 1e-3


def test_linear8_tiny_maximum_keeps_bound():
    """A block whose maximum is tiny but normal (1e-37), where ``127 / max`` overflows float32:
    the same half-level bound as for any other maximum (a reciprocal would make every entry +-max)."""
    x = torch.tensor([1e-37, 5e-38, -2.5e-38, 1e-38, 0.0])
    out = roundtrip(C.get("linear8"), x)
    assert float((out.double() - x.double()).abs().max()) <= 1e-37 / 254 * (1 + 1e-5)


def test_linear8_refuses_code_255():
    c = C.get("linear8")
    payload = c.encode(torch.randn(100))
    payload[-1] = 255
    with pytest.raises(C.PayloadError, match="code 255"):
        c.decode(payload)


# ---------------------------------------------------------------- dynamic8 (Dettmers' dynamic tree)


def test_dynamic8_zero_and_max_thresholds():
    c = C.get("dynamic8")
    M = 1.0
    x = torch.tensor([M, 1.49e-6, 1.51e-6, -1.49e-6, -1.51e-6, 0.9958, 0.9956, -0.9958, 0.0])
    out = roundtrip(c, x).double()
    assert out[0] == M
    assert out[1] == 0 and out[3] == 0 and out[8] == 0
    assert out[2] == pytest.approx(2.75e-6, rel=1e-6) and out[4] == pytest.approx(-2.75e-6, rel=1e-6)
    assert out[5] == M and out[7] == -M
    assert out[6] == pytest.approx(0.99140625, rel=1e-7)


@pytest.mark.parametrize("scale", [1.0, 3.7, 1e-20, 2e30])
def test_dynamic8_picks_nearest_table_entry(scale):
    g = gen(7)
    n = 20000
    # log-uniform over the table's whole range plus uniform in [0, 1]
    lo = math.log(1.5e-6 * 1.001)
    v = torch.cat([torch.exp(torch.rand(n, generator=g) * -lo + lo), torch.rand(n, generator=g) * 0.999 + 0.001])
    sign = torch.where(torch.rand(2 * n, generator=g) < 0.5, -1.0, 1.0)
    x = torch.cat([torch.tensor([1.0]), sign * v]).double() * scale
    x32 = x.float()
    M = float(x32.abs().max())
    out = roundtrip(C.get("dynamic8"), x32).double() / M
    vn = x32.double().abs() / M
    table = torch.tensor([0.0, 1.0] + dettmers_table(), dtype=torch.float64)
    dist = (vn[:, None] - table[None, :]).abs()
    two = dist.topk(2, dim=1, largest=False)
    nearest = table[two.indices[:, 0]]
    clear = (two.values[:, 1] - two.values[:, 0]) > 1e-5 * vn  # exclude (near-)ties
    clear &= vn >= 1.5e-6 * 1.0001  # below 1.5e-6 the rule (zero) overrides nearest
    assert int(clear.sum()) > 0.95 * len(vn)
    got = out.abs()
    assert torch.allclose(got[clear], nearest[clear], rtol=1e-6, atol=0)
    # signs kept
    nz = out != 0
    assert bool((torch.sign(out[nz]) == torch.sign(x32.double()[nz])).all())


def test_dynamic8_block_scaling_keeps_small_blocks_precise():
    x = randn(512, seed=3)
    x[:256] *= 1e-7  # below 1.5e-6 of the global max: lost per tensor, kept per block
    per_tensor = roundtrip(C.get("dynamic8"), x)
    per_block = roundtrip(C.get("dynamic8", block=256), x)
    assert bool((per_tensor[:256] == 0).sum() > 200)
    rel = ((per_block[:256] - x[:256]).abs() / x[:256].abs().max()).max()
    assert float(rel) < 0.05


def test_dynamic8_tiny_maximum_keeps_nearest_entry():
    """A block whose maximum is denormal (1e-39), where ``1 / max`` overflows float32:
    0.5 * max still decodes near 0.5 * max (a reciprocal would make every entry +-max)."""
    x = torch.tensor([1e-39, 5e-40, -2.5e-40, 0.0])
    out = roundtrip(C.get("dynamic8"), x).double()
    assert out[0] == x[0].double()
    assert abs(float(out[1]) / 1e-39 - 0.5) < 0.03 and abs(float(out[2]) / 1e-39 + 0.25) < 0.03


# ---------------------------------------------------------------- blocks, scopes and absmax


@pytest.mark.parametrize("name", ["dynamic8", "linear8"])
@pytest.mark.parametrize("block", [1, 5, 64, 256])
def test_scaled8_blocks_are_independent(name, block):
    x = randn(1000, seed=block)
    x[:64] *= 1e-6
    x[700:] *= 1e5
    out = roundtrip(C.get(name, block=block), x)
    whole = C.get(name)
    parts = [roundtrip(whole, x[s:s + block]) for s in range(0, 1000, block)]
    assert torch.equal(out, torch.cat(parts))
    # each block's maximum is kept
    for s in range(0, 1000, block):
        i = int(x[s:s + block].abs().argmax()) + s
        assert float(out[i]) == pytest.approx(float(x[i]), rel=2.0**-23)


def test_scope_tensor_is_block_0s():
    """A relation of two parameters valid one by one: refused at load and at construction."""
    for name in ("dynamic8", "linear8"):
        with pytest.raises(ValueError, match=rf"{name}: scope 'tensor' is block 0's .* with block 64 use scope 'chunk'"):
            C.check_params(name, block=64, scope="tensor")
        with pytest.raises(ValueError, match="scope 'tensor'"):
            C.get(name, block=64, scope="tensor")
    with pytest.raises(ValueError, match=r"encode\(absmax=\) is for a method that scales by the whole tensor"):
        C.get("dynamic8").encode(torch.ones(4), absmax=2.0)


@pytest.mark.parametrize("name", ["dynamic8", "linear8"])
@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_absmax_raises_the_scale_never_lowers_it(name, impl):
    """encode(absmax=M) scales by max(M, the piece's own maximum); a NaN M changes nothing; both
    implementations give the same bytes."""
    x = torch.tensor([0.5, -0.25, 0.125, 0.0])
    c = C.get(name, scope="tensor", impl=impl)
    ref = C.get(name, scope="tensor", impl="reference")
    def body(p):  # the maximum (float32) and the 4 codes
        return p[-8:]
    raised = c.encode(x, absmax=2.0)
    assert torch.equal(raised, ref.encode(x, absmax=2.0))
    assert raised[-8:-4].view(torch.float32).item() == 2.0
    assert (c.decode(raised) - x).abs().max().item() <= 2.0 / 127  # within a step of the coarser scale
    for kept in (0.25, float("nan")):
        assert torch.equal(body(c.encode(x, absmax=kept)), body(c.encode(x)))
    assert not torch.equal(body(raised), body(c.encode(x)))
