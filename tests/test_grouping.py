"""onebit's and adaptive's ``grouping`` (the papers' columns, or rows) and adaptive's
``threshold="sampled"`` (LBANN's sampled selection): sizes, headers, values per group,
the sampled rules and cap, and the two implementations' bytes on inputs larger than the
contract tests' (groups longer than the mean samples, tensors above the threshold samples).
"""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch

import compressors as C
from compressors.codecs import topk

GROUPINGS = ("column", "row")


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def columns(x: torch.Tensor) -> torch.Tensor:
    """The columns of the 2-D view (shape[0], numel // shape[0]), as rows."""
    return x.reshape(x.shape[0], -1).t()


def roundtrip(c: C.Compressor, x: torch.Tensor, **kw) -> torch.Tensor:
    return c.decode(c.encode(x, **kw))


def header_nbytes(x: torch.Tensor) -> int:
    return 40 + 8 * x.dim()


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


@pytest.mark.parametrize("shape", [(10, 784), (64, 32, 3, 3), (1, 50), (50, 1), (300,), ()], ids=str)
def test_sizes_count_the_groups(shape):
    n = math.prod(shape)
    rows = shape[0] if len(shape) >= 2 else 1
    cols = n // rows
    by = {"row": rows, "column": cols if len(shape) >= 2 else 1}
    for grouping, groups in by.items():
        onebit = C.get("onebit", grouping=grouping)
        assert onebit.payload_nbytes(shape) == 40 + 8 * len(shape) + 8 * groups + -(-n // 8)
        k = topk.count_sent(0.01, n)
        adaptive = C.get("adaptive", grouping=grouping)
        assert adaptive.payload_nbytes(shape) == 40 + 8 * len(shape) + 4 + 12 * groups + 2 * k
        sampled = C.get("adaptive", grouping=grouping, threshold="sampled")
        assert sampled.payload_nbytes(shape) == 40 + 8 * len(shape) + 4 + 12 * groups + 2 * min(n, 4 * k)


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


def test_adaptive_header_says_the_threshold():
    x = randn(6, 40, seed=2)
    with pytest.raises(C.PayloadError, match="parameters"):
        C.get("adaptive", grouping="column", threshold="exact").decode(C.get("adaptive", grouping="column", threshold="sampled").encode(x))


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_onebit_groups_are_transposes_of_each_other(grouping):
    """Column grouping of x decodes as row grouping of x.T, transposed back."""
    x = randn(33, 70, seed=4)
    other = "row" if grouping == "column" else "column"
    a = roundtrip(C.get("onebit", grouping=grouping), x)
    b = roundtrip(C.get("onebit", grouping=other), x.t().contiguous())
    assert torch.equal(a, b.t())


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


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("shape", [(257, 130), (64, 33, 3, 3), (5, 3000)], ids=str)
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


def test_sampled_error_feedback_conserves_the_sum():
    c = C.get("adaptive", grouping="column", pi=0.02, threshold="sampled")
    ef = C.ErrorFeedback()
    total_in = torch.zeros(40, 60, dtype=torch.float64)
    total_out = torch.zeros(40, 60, dtype=torch.float64)
    for t in range(20):
        g = randn(40, 60, seed=100 + t)
        v = ef.compensate("w", g)
        d = c.decode(c.encode(v, step=t))
        ef.update("w", v, d)
        total_in += g.double()
        total_out += d.double()
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    assert np.isfinite(ef.residuals["w"].numpy()).all()
