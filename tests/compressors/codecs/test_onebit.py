"""1-bit SGD (compressors/codecs/onebit.py): two means per group, its ``grouping`` (the papers' columns,
or rows; shared with adaptive), and the two implementations' bytes on larger inputs.
"""
from __future__ import annotations

import pytest
import torch

import compressors as C
from tests.helpers import as_groups, columns, groups_of, randn, roundtrip

GROUPINGS = ("column", "row")


@pytest.mark.parametrize("grouping", ["column", "row"])
@pytest.mark.parametrize("shape", [(257,), (1, 33), (6, 40), (4, 3, 5), (8, 4, 3, 3), ()], ids=str)
def test_onebit_two_values_per_group_equal_to_the_means(shape, grouping):
    x = randn(*shape, seed=2)
    if x.numel() > 3:
        x.view(-1)[3] = 0.0  # zero goes with the entries >= 0
    out = roundtrip(C.get("onebit", grouping=grouping), x)
    xm, om = as_groups(x.double(), grouping), as_groups(out.double(), grouping)
    assert xm.shape == groups_of(shape, grouping)
    for i in range(xm.shape[0]):
        pos, neg = xm[i] >= 0, xm[i] < 0
        mp = float(xm[i][pos].mean()) if pos.any() else None
        mn = float(xm[i][neg].mean()) if neg.any() else None
        assert len(set(om[i].tolist())) == (mp is not None) + (mn is not None)
        if mp is not None:
            assert torch.allclose(om[i][pos], torch.full_like(om[i][pos], mp), rtol=1e-6, atol=1e-7)
        if mn is not None:
            assert torch.allclose(om[i][neg], torch.full_like(om[i][neg], mn), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_onebit_one_sided_groups(grouping):
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, -2.0, -6.0], [0.0, 0.0, 0.0]])
    expect = torch.tensor([[2.0] * 3, [-3.0] * 3, [0.0] * 3])
    if grouping == "column":  # the same groups, as columns
        x, expect = x.t().contiguous(), expect.t()
    assert torch.equal(roundtrip(C.get("onebit", grouping=grouping), x), expect)


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_onebit_huge_finite_values_stay_finite(grouping):
    """Means of finite float32 values are finite although their float32 sum (6e38) is not:
    the group sums are taken in float64."""
    x = torch.tensor([[3e38, 3e38, -1.0, 1.0], [1.0, -2.0, 3.0, -4.0]])
    if grouping == "column":
        x = x.t().contiguous()
    out = roundtrip(C.get("onebit", grouping=grouping), x)
    assert bool(torch.isfinite(out).all())
    assert out.view(-1)[0] == pytest.approx(2e38, rel=1e-6)


# ---------------------------------------------------------------- grouping


def test_the_papers_columns_are_the_default():
    assert C.check_params("onebit")["grouping"] == "column"
    assert C.check_params("adaptive")["grouping"] == "column"
    assert C.check_params("adaptive")["threshold"] == "exact"
    for name in ("onebit", "adaptive"):
        with pytest.raises(ValueError, match=r"grouping=.*valid: one of \['column', 'row'\]"):
            C.get(name, grouping="col")
    with pytest.raises(ValueError, match=r"threshold=.*valid: one of \['exact', 'sampled'\]"):
        C.get("adaptive", grouping="column", threshold="sample")


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_conv_weight_columns_are_per_input_unit(impl):
    """A conv weight (out, in, kh, kw): a group is one (in, kh, kw) position across the outputs."""
    x = randn(8, 3, 3, 3, seed=1)
    out = roundtrip(C.get("onebit", impl=impl, grouping="column"), x)
    for xc, oc in zip(columns(x), columns(out)):
        for side in (xc >= 0, xc < 0):
            if side.any():
                assert torch.allclose(oc[side], xc[side].double().mean().float().expand(int(side.sum())))


@pytest.mark.parametrize("name", ["onebit", "adaptive"])
def test_the_header_says_the_grouping(name):
    x = randn(6, 40, seed=2)
    payloads = {g: C.get(name, grouping=g).encode(x) for g in GROUPINGS}
    with pytest.raises(C.PayloadError, match="parameters"):
        C.get(name, grouping="row").decode(payloads["column"])
    with pytest.raises(C.PayloadError, match="parameters"):
        C.get(name, grouping="column").decode(payloads["row"])
    # a 1-D tensor is one group either way, but the header still names the grouping
    v = randn(50, seed=3)
    with pytest.raises(C.PayloadError, match="parameters"):
        C.get(name, grouping="row").decode(C.get(name, grouping="column").encode(v))


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_onebit_groups_are_transposes_of_each_other(grouping):
    """Column grouping of x decodes as row grouping of x.T, transposed back."""
    x = randn(33, 70, seed=4)
    other = "row" if grouping == "column" else "column"
    a = roundtrip(C.get("onebit", grouping=grouping), x)
    b = roundtrip(C.get("onebit", grouping=other), x.t().contiguous())
    assert torch.equal(a, b.t())


@pytest.mark.parametrize("grouping", GROUPINGS)
# Columns of 257 and 5 go through the transposed copy; of 64, 40 and 136 (multiples of 8: 8, 5, 17 blocks of
# 8 rows, the last two padded to a power of two) through the kernel that reads them in place.
@pytest.mark.parametrize("shape", [(257, 130), (64, 33, 3, 3), (5, 3000), (40, 33), (136, 17)], ids=str)
def test_onebit_implementations_agree_bit_for_bit(shape, grouping):
    pytest.importorskip("numba")
    x = randn(*shape, seed=6)
    ref, nb = C.get("onebit", impl="reference", grouping=grouping), C.get("onebit", impl="numba", grouping=grouping)
    payload = ref.encode(x)
    assert torch.equal(payload, nb.encode(x))
    assert torch.equal(ref.decode(payload), nb.decode(payload))
    total_ref, total_nb = torch.full(shape, -0.25), torch.full(shape, -0.25)
    ref.decode(payload, out=total_ref, add=True)
    nb.decode(payload, out=total_nb, add=True)
    assert torch.equal(total_ref, total_nb)


@pytest.mark.parametrize("rows", [64, 40])
def test_onebit_columns_of_negative_zeros_keep_the_trees_sign(rows):
    # -0.0 is on the positive side; a column of 2**k of them sums to -0.0 (mean -0.0), a padded one to +0.0
    pytest.importorskip("numba")
    x = randn(rows, 24, seed=3)
    x[:, 5] = -0.0
    ref, nb = C.get("onebit", impl="reference"), C.get("onebit", impl="numba")
    payload = ref.encode(x)
    assert torch.equal(payload, nb.encode(x))
    mean_pos = payload[-(8 * 24 + rows * 24 // 8):][:4 * 24].view(torch.float32)
    assert torch.signbit(mean_pos[5]).item() is (rows == 64)
