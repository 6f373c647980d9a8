"""Dryden et al.'s adaptive quantization (compressors/codecs/adaptive.py): the k largest entries with
per-group means, 16- and 32-bit entries, ties, ``threshold="sampled"`` (LBANN's sampled selection:
its rules and cap), and the two implementations' bytes on inputs larger than the contract tests'
(groups longer than the mean samples, tensors above the threshold samples).
"""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch

import compressors as C
from compressors.codecs import topk
from tests.helpers import as_groups, columns, k_sent, randn, roundtrip, top_indices

GROUPINGS = ("column", "row")


def adaptive_reference(x: torch.Tensor, pi: float, grouping: str = "column") -> torch.Tensor:
    """The k largest magnitudes (ties: the lowest index in group-major order), each decoded to the
    mean of the selected entries of its sign in its group."""
    m = as_groups(x.double(), grouping)
    rows, cols = m.shape
    flat = m.contiguous().reshape(-1).numpy()
    idx = top_indices(flat, k_sent(pi, flat.size))
    out = np.zeros(flat.size)
    for r in np.unique(idx // cols):  # the groups with a selected entry; the others decode to zeros
        sel = idx[(idx // cols) == r]
        for side in (flat[sel] >= 0, flat[sel] < 0):
            if side.any():
                out[sel[side]] = flat[sel[side]].mean()
    out = torch.from_numpy(out).reshape(rows, cols)
    return (out.t() if grouping == "column" and x.dim() >= 2 else out).reshape(x.shape)


@pytest.mark.parametrize("grouping", ["column", "row"])
@pytest.mark.parametrize("shape,pi", [((8, 50), 0.01), ((8, 50), 0.1), ((6, 4, 5), 0.3), ((16, 3, 3, 3), 0.05),
                                      ((3, 40000), 0.001), ((40000, 3), 0.001), ((500,), 0.02), ((1, 64), 0.25),
                                      ((2, 3), 1.0)], ids=str)
def test_adaptive_sends_k_entries_with_per_group_means(shape, pi, grouping):
    x = randn(*shape, seed=4)
    c = C.get("adaptive", pi=pi, grouping=grouping)
    out = roundtrip(c, x)
    k = k_sent(pi, x.numel())
    assert int((out != 0).sum()) == k
    assert torch.allclose(out.double(), adaptive_reference(x, pi, grouping), rtol=1e-6, atol=1e-7)
    # unsent entries are exactly zero and sent ones keep their sign
    nz = out != 0
    assert bool((torch.sign(out[nz]) == torch.sign(x[nz])).all())


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_adaptive_single_group_tensors_encode(grouping):
    """1-D tensors (biases) are one group, and so is a (1, n) tensor by rows, (n, 1) by columns;
    single-row tensors by columns are n groups of one. A one-group body's means are
    1-element views of stride 2, which the payload assembly must copy, not view."""
    c = C.get("adaptive", pi=0.1, grouping=grouping)
    for shape in [(100,), (1, 100), (100, 1), (), (1, 3, 4)]:
        x = randn(*shape)
        out = roundtrip(c, x)
        assert torch.allclose(out.double(), adaptive_reference(x, 0.1, grouping), rtol=1e-6, atol=1e-7)


def _two_groups(length: int, grouping: str) -> torch.Tensor:
    """Zeros with two groups of ``length`` (rows of (2, length), or columns of (length, 2)),
    as the (2, length) matrix of the groups (a view into the tensor to encode)."""
    return torch.zeros(2, length) if grouping == "row" else torch.zeros(length, 2).t()


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_adaptive_16_bit_entries_reach_the_last_index(grouping):
    length = 32767
    g = _two_groups(length, grouping)
    g[0, length - 1] = 5.0
    g[1, length - 1] = -3.0
    g[1, length - 2] = -1.0
    x = g if grouping == "row" else g.t()
    c = C.get("adaptive", pi=4e-5, grouping=grouping)  # k = ceil(2.62) = 3
    assert c.payload_nbytes(x.shape) == 40 + 16 + 4 + 24 + 3 * 2
    out = roundtrip(c, x)
    og = out if grouping == "row" else out.t()
    assert og[0, length - 1] == 5.0 and og[1, length - 1] == -2.0 and og[1, length - 2] == -2.0
    assert int((out != 0).sum()) == 3


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_adaptive_32_bit_entries(grouping):
    g = _two_groups(40000, grouping)
    g[0, 39999] = 1.0
    g[1, 35000] = -4.0
    g[1, 2] = 2.0
    x = g if grouping == "row" else g.t()
    c = C.get("adaptive", pi=3 / 80000, grouping=grouping)
    assert c.payload_nbytes(x.shape) == 40 + 16 + 4 + 24 + 3 * 4
    assert torch.equal(roundtrip(c, x), x)


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_adaptive_entry_width_switches_above_32767(grouping):
    c = C.get("adaptive", pi=0.01, grouping=grouping)
    for length, width in ((32766, 2), (32767, 2), (32768, 4), (40000, 4)):
        shape = (length, 2) if grouping == "column" else (2, length)  # two groups of ``length``
        k = k_sent(0.01, 2 * length)
        assert c.payload_nbytes(shape) == 40 + 16 + 4 + 24 + k * width


def test_adaptive_column_ties_go_to_the_lowest_index_column_by_column():
    """By columns the order is column-major: the groups', so each group's entries are one run."""
    x = torch.tensor([0.5, -1.0, 1.0, 2.0, -1.0, 1.0, 0.25, 1.0]).view(2, 4)
    # column-major: 0.5, -1.0 (x[1,0]), -1.0 (x[0,1]), 1.0, 1.0, 0.25, 2.0, 1.0: 2.0, then x[1,0], x[0,1]
    out = roundtrip(C.get("adaptive", pi=3 / 8, grouping="column"), x).view(-1)
    assert out.tolist() == [0, -1.0, 0, 2.0, -1.0, 0, 0, 0]


# ---------------------------------------------------------------- the header and the implementations


def header_nbytes(x: torch.Tensor) -> int:
    return 40 + 8 * x.dim()


def test_adaptive_header_says_the_threshold():
    x = randn(6, 40, seed=2)
    with pytest.raises(C.PayloadError, match="parameters"):
        C.get("adaptive", grouping="column", threshold="exact").decode(C.get("adaptive", grouping="column", threshold="sampled").encode(x))


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("p", [{}, {"pi": 0.1}, {"threshold": "sampled"}, {"pi": 0.2, "threshold": "sampled"}], ids=str)
@pytest.mark.parametrize("shape", [(257, 130), (130, 257), (4000,), (64, 33, 3, 3), (3, 5000), (1, 2000)], ids=str)
def test_adaptive_implementations_agree_bit_for_bit(shape, p, grouping):
    pytest.importorskip("numba")
    x = randn(*shape, seed=5)
    ref = C.get("adaptive", impl="reference", grouping=grouping, **p)
    nb = C.get("adaptive", impl="numba", grouping=grouping, **p)
    payload = ref.encode(x, step=7, rank=1, stream=3)
    assert torch.equal(payload, nb.encode(x, step=7, rank=1, stream=3))
    assert torch.equal(ref.decode(payload), nb.decode(payload))
    total_ref, total_nb = torch.full(shape, 0.5), torch.full(shape, 0.5)
    ref.decode(payload, out=total_ref, add=True)
    nb.decode(payload, out=total_nb, add=True)
    assert torch.equal(total_ref, total_nb)


# ---------------------------------------------------------------- threshold="sampled"


def _total(c: C.Compressor, x: torch.Tensor, payload: torch.Tensor) -> int:
    at = header_nbytes(x)
    return struct.unpack("<I", bytes(payload[at:at + 4].tolist()))[0]


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_sampled_small_tensors_use_every_entry_for_the_thresholds(impl):
    """n <= 1024: the thresholds come from all entries: of the k largest magnitudes the smallest
    positive and the smallest negative; every entry reaching its sign's threshold is sent, and
    each group (here of <= 128 entries) decodes to the exact means of its sent entries."""
    x = randn(20, 40, seed=8)
    pi = 0.05
    c = C.get("adaptive", grouping="column", pi=pi, threshold="sampled", impl=impl)
    out = roundtrip(c, x)
    flat = x.reshape(-1)
    k = topk.count_sent(pi, flat.numel())
    top = flat[flat.abs().argsort(descending=True)[:k]]
    low_pos, low_neg = top[top >= 0].min(), -top[top < 0].max()
    sent = torch.where(flat < 0, flat.abs() >= low_neg, flat >= low_pos).view(x.shape)
    assert torch.equal(out != 0, sent)
    for xc, oc, sc in zip(columns(x), columns(out), columns(sent)):
        for side in (sc & (xc >= 0), sc & (xc < 0)):
            if side.any():
                assert torch.allclose(oc[side], xc[side].double().mean().float().expand(int(side.sum())))


def test_sampled_is_reproducible_and_follows_the_counters():
    x = randn(300, 200, seed=9)
    c = C.get("adaptive", grouping="column", threshold="sampled")
    a = c.encode(x, step=1, rank=0, stream=5)
    assert torch.equal(a, c.encode(x, step=1, rank=0, stream=5))
    assert not torch.equal(a, c.encode(x, step=2, rank=0, stream=5))
    assert not torch.equal(a, C.get("adaptive", grouping="column", threshold="sampled", seed=1).encode(x, step=1, rank=0, stream=5))


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_sampled_sends_about_k_and_at_most_four_k(impl):
    x = randn(300, 200, seed=10)
    c = C.get("adaptive", grouping="column", pi=0.01, threshold="sampled", impl=impl)
    k = topk.count_sent(0.01, x.numel())
    totals = []
    for step in range(8):
        payload = c.encode(x, step=step)
        assert payload.numel() == c.payload_nbytes(x.shape)
        total = _total(c, x, payload)
        out = c.decode(payload)
        assert int((out != 0).sum()) == total
        totals.append(total)
    assert all(0 < t <= 4 * k for t in totals)
    assert 0.5 * k < sum(totals) / len(totals) < 2 * k  # 1024 samples: within tens of percent


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_sampled_cap_keeps_the_first_entries_group_by_group(impl):
    """All magnitudes tie: every entry reaches the threshold; the cap keeps the first 4k in
    group-major order (whole leading columns), the rest stays for the residual; the unused
    tail of the body is zero bytes."""
    x = torch.ones(100, 50)
    x[1::2] = -1.0
    c = C.get("adaptive", grouping="column", pi=0.01, threshold="sampled", impl=impl)
    k = topk.count_sent(0.01, x.numel())
    payload = c.encode(x)
    assert _total(c, x, payload) == 4 * k  # 200: the first two columns
    out = c.decode(payload)
    assert torch.equal(out[:, :2], x[:, :2]) and not bool(out[:, 2:].any())
    at = header_nbytes(x) + 4 + 12 * 50 + 2 * 4 * k
    assert payload.numel() == at
    small = C.get("adaptive", grouping="column", pi=0.01, threshold="sampled", impl=impl)
    y = randn(100, 50, seed=11)
    p = small.encode(y)
    used = header_nbytes(y) + 4 + 12 * 50 + 2 * _total(small, y, p)
    assert not bool(p[used:].any())


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_sampled_means_come_from_128_samples_per_long_group(impl):
    """A group longer than 128 gets its means from 128 sampled positions: close to, not equal to,
    the exact means of its sent entries; a side with no sample sent decodes to its threshold."""
    x = randn(2000, 4, seed=12)
    c = C.get("adaptive", grouping="column", pi=0.1, threshold="sampled", impl=impl)
    out = roundtrip(c, x)
    for xc, oc in zip(columns(x), columns(out)):
        sent = oc != 0
        for side in (sent & (xc >= 0), sent & (xc < 0)):
            values = oc[side].unique()
            assert values.numel() == 1
            exact = float(xc[side].double().mean())
            assert float(values[0]) == pytest.approx(exact, rel=0.15)


@pytest.mark.parametrize("impl", ["reference", "numba"])
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf"])
def test_sampled_nonfinite_is_sent_and_poisons_its_side(impl, kind):
    x = randn(2000, 4, seed=13)
    bad = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[kind]
    x[777, 2] = bad
    out = roundtrip(C.get("adaptive", grouping="column", pi=0.05, threshold="sampled", impl=impl), x)
    assert not math.isfinite(float(out[777, 2]))
    assert bool(torch.isfinite(out[:, [0, 1, 3]]).all())


def test_sampled_decode_refuses_a_total_above_the_cap():
    x = randn(30, 20, seed=14)
    c = C.get("adaptive", grouping="column", pi=0.05, threshold="sampled")
    payload = c.encode(x)
    cap = 4 * topk.count_sent(0.05, x.numel())
    at = header_nbytes(x)
    for impl in ("reference", "numba"):
        d = C.get("adaptive", grouping="column", pi=0.05, threshold="sampled", impl=impl)
        for total in (cap + 1, 2**31 - 1, 2**32 - 1):
            bad = payload.clone()
            bad[at:at + 4] = torch.tensor(list(struct.pack("<I", total)), dtype=torch.uint8)
            with pytest.raises(C.PayloadError, match=f"at most {cap}"):
                d.decode(bad)
        fewer = payload.clone()  # fewer entries than sent is a valid body (the offsets allow it)
        fewer[at:at + 4] = torch.tensor(list(struct.pack("<I", 0)), dtype=torch.uint8)
        fewer[at + 4:at + 4 + 4 * 20] = 0
        assert not bool(d.decode(fewer).any())
