"""Tests of compressors/: round-trip bounds, exact payload sizes, error feedback,
determinism, edge inputs, parameter validation and the registry (CPU, fast, never timed).

The contract tests run every registered compressor with each parameter set of
its class's ``examples``, so a new compressor is covered without editing this
file.  The expected sizes, tables and reference results of the methods below
are computed here from the papers' rules (the README's compressor table),
independently of the code under test.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import compressors as C
from compressors.core import dynamic_tree, registry, rng
from compressors.core.params import Param

ALL = list(C.COMPRESSORS)
SPARSE = ("adaptive", "topk")
# Every registered compressor with each of its example parameter sets.
CONFIGS = [(name, dict(p)) for name, cls in C.COMPRESSORS.items() for p in cls.examples]


# ---------------------------------------------------------------- independent helpers


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed))


def roundtrip(c: C.Compressor, x: torch.Tensor, **kw) -> torch.Tensor:
    return c.decode(c.encode(x, **kw))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D view (shape[0], numel // shape[0]); 0-D/1-D: one row."""
    n = math.prod(shape)
    if n == 0:
        return 0, 0
    if len(shape) < 2:
        return 1, n
    return shape[0], n // shape[0]


def groups_of(shape: tuple[int, ...], grouping: str = "row") -> tuple[int, int]:
    """(number of groups, entries per group): the papers' columns are the columns of the 2-D
    view (per input unit), ``row`` its rows; 0-D/1-D tensors are one group either way."""
    rows, cols = rows_cols(shape)
    return (cols, rows) if grouping == "column" and len(shape) >= 2 else (rows, cols)


def as_groups(x: torch.Tensor, grouping: str = "row") -> torch.Tensor:
    """x as a (groups, length) matrix whose rows are the groups."""
    rows, cols = rows_cols(tuple(x.shape))
    m = x.reshape(rows, cols)
    return m.t() if grouping == "column" and x.dim() >= 2 else m


def k_sent(pi: float, n: int) -> int:
    """ceil(pi * n) with pi taken as the decimal the user wrote (at least 1 when n > 0)."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(Fraction(repr(pi)) * n)))


# The shipped methods: their payload size formulas (README, module docstrings) are written out
# below, and they keep a single value exactly.
SHIPPED = ("fp32", "fp16", "bf16", "dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk")


def expected_nbytes(name: str, shape: tuple[int, ...], **p) -> int:
    """The documented formulas: header 40 + 8 ndim, then the body."""
    n = math.prod(shape)
    header = 40 + 8 * len(shape)
    if name == "fp32":
        body = 4 * n
    elif name in ("fp16", "bf16"):
        body = 2 * n
    elif name in ("dynamic8", "linear8"):
        block = p.get("block", 0)
        nblocks = ceil_div(n, block) if block else min(n, 1)
        body = 4 * nblocks + n
    elif name == "qsgd":
        bits, bucket = p.get("bits", 4), p.get("bucket", 512)
        body = 4 * ceil_div(n, bucket) + ceil_div(n * bits, 8)
    elif name == "onebit":
        groups, _ = groups_of(shape, p.get("grouping", "column"))
        body = 8 * groups + ceil_div(n, 8)
    elif name == "adaptive":
        groups, length = groups_of(shape, p.get("grouping", "column"))
        k = k_sent(p.get("pi", 0.01), n)
        capacity = k if p.get("threshold", "exact") == "exact" else min(n, 4 * k)
        body = 4 + 12 * groups + capacity * (2 if length <= 32767 else 4)
    elif name == "topk":
        body = 8 * k_sent(p.get("pi", 0.01), n)
    else:
        raise AssertionError(name)
    return header + body


def dettmers_table() -> list[float]:
    """Dettmers' 126 dynamic-tree magnitudes, from the rule: decade k (10^-k) holds 2^(6-k)
    entries; the fraction range [0.1, 1] is split at 0.45, each half cut into equal bins,
    each entry its bin's midpoint."""
    out = []
    for k in range(6):
        per_half = 2 ** (6 - k) // 2
        for lo, hi in ((0.1, 0.45), (0.45, 1.0)):
            w = (hi - lo) / per_half
            out += [(lo + w * (i + 0.5)) / 10**k for i in range(per_half)]
    return sorted(out)


def top_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest |x| (NaN largest), ties broken by lowest index."""
    mag = np.where(np.isnan(x), np.inf, np.abs(x))
    order = np.lexsort((np.arange(x.size), -mag))  # by -mag, then index
    return np.sort(order[:k])


# every shape kind: 0-D, 1-D, 2-D, 3-D, 4-D conv, empty
SHAPES = [(), (1,), (7,), (1000,), (3, 5), (1, 100), (100, 1), (4, 3, 5), (16, 3, 3, 3), (8, 4, 3, 3),
          (0,), (0, 5), (5, 0), (2, 0, 3)]
EXTRA_SHAPES = [(2, 32767), (2, 32768), (40000,), (1, 70000), (64, 32, 3, 3), (3, 1, 1, 1, 1, 1, 1, 2)]


def cfg_id(cfg) -> str:
    name, p = cfg
    return name + "".join(f"-{k}{v}" for k, v in p.items())


# ---------------------------------------------------------------- payload sizes


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] in SHIPPED], ids=cfg_id)
def test_payload_nbytes_matches_the_size_formula(cfg):
    name, p = cfg
    c = C.get(name, **p)
    for shape in SHAPES + EXTRA_SHAPES:
        assert c.payload_nbytes(shape) == expected_nbytes(name, shape, **p), shape


def test_every_shipped_method_is_registered():
    assert set(SHIPPED) <= set(C.COMPRESSORS)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_encoded_size_shape_and_dtype(cfg, shape):
    name, p = cfg
    c = C.get(name, **p)
    x = randn(*shape, seed=len(shape)) if math.prod(shape) else torch.zeros(shape)
    payload = c.encode(x)
    assert payload.dtype == torch.uint8 and payload.dim() == 1
    assert payload.numel() == c.payload_nbytes(shape) == c.payload_nbytes(torch.Size(shape))
    out = c.decode(payload)
    assert out.dtype == torch.float32 and tuple(out.shape) == shape


@pytest.mark.parametrize("grouping", ["column", "row"])
def test_adaptive_entry_width_switches_above_32767(grouping):
    c = C.get("adaptive", pi=0.01, grouping=grouping)
    for length, width in ((32766, 2), (32767, 2), (32768, 4), (40000, 4)):
        shape = (length, 2) if grouping == "column" else (2, length)  # two groups of ``length``
        k = k_sent(0.01, 2 * length)
        assert c.payload_nbytes(shape) == 40 + 16 + 4 + 24 + k * width


def test_qsgd_every_bit_width_roundtrips_its_size():
    for bits in range(2, 9):
        for norm in ("max", "l2"):
            c = C.get("qsgd", bits=bits, norm=norm, bucket=10)
            for n in (1, 7, 8, 9, 33, 100):
                p = c.encode(randn(n, seed=bits))
                assert p.numel() == 40 + 8 + 4 * ceil_div(n, 10) + ceil_div(n * bits, 8)
                assert c.decode(p).shape == (n,)


# ---------------------------------------------------------------- casts


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


# ---------------------------------------------------------------- dynamic8 (Dettmers' dynamic tree)


def test_dynamic_tree_table_follows_dettmers_rule():
    ref = dettmers_table()
    assert len(ref) == 126
    decade_counts = [sum(1 for v in ref if 10.0 ** -(k + 1) <= v < 10.0**-k) for k in range(6)]
    assert decade_counts == [64, 32, 16, 8, 4, 2]
    assert ref[-1] == pytest.approx(0.99140625, rel=1e-12) and ref[0] == pytest.approx(2.75e-6, rel=1e-12)
    # the module builds the same magnitudes, and the codec decodes to them (float32)
    assert np.allclose(sorted(dynamic_tree.magnitudes()), ref, rtol=1e-12, atol=0)
    values = dynamic_tree.tables("cpu").value_of_code.double()
    positive = sorted(v for v in values.tolist() if v > 0)
    assert len(positive) == 127  # 126 magnitudes and max
    assert np.allclose(positive, ref + [1.0], rtol=1e-7, atol=0)
    assert sorted(v for v in values.tolist() if v < 0) == sorted(-v for v in positive)
    assert values.tolist().count(0.0) == 2  # +0 and -0


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


# ---------------------------------------------------------------- qsgd


def qsgd_norms(x: torch.Tensor, bucket: int, norm: str) -> torch.Tensor:
    n = x.numel()
    nb = ceil_div(n, bucket)
    b = torch.nn.functional.pad(x.double().reshape(-1), (0, nb * bucket - n)).view(nb, bucket)
    return b.abs().amax(1) if norm == "max" else b.pow(2).sum(1).sqrt()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("norm", ["max", "l2"])
def test_qsgd_decodes_to_a_neighbouring_level(bits, norm):
    bucket = 37
    x = randn(500, seed=bits)
    x[100] = 0.0
    c = C.get("qsgd", bits=bits, bucket=bucket, norm=norm)
    s = 2 ** (bits - 1) - 1
    norms = qsgd_norms(x, bucket, norm).repeat_interleave(bucket)[:500]
    for step in range(3):
        out = roundtrip(c, x, step=step).double()
        r = x.double().abs() / norms * s
        level = out.abs() / norms * s
        assert float((level - level.round()).abs().max()) < 1e-4
        level = level.round()
        # float32 norms differ from these float64 ones by ~1e-7: allow that much around integers
        assert bool(((level >= (r - 1e-5).floor()) & (level <= (r + 1e-5).floor() + 1)).all())
        assert bool((level <= s).all())
        nz = out != 0
        assert bool((torch.sign(out[nz]) == torch.sign(x.double()[nz])).all())
        assert out[100] == 0
    if norm == "max":  # the maximum of each bucket sits on the top level (s * (norm / s): 1 ulp)
        for s0 in range(0, 500, bucket):
            i = int(x[s0:s0 + bucket].abs().argmax()) + s0
            assert float(out[i]) == pytest.approx(float(x[i]), rel=2.0**-23)


@pytest.mark.parametrize("bits,norm", [(2, "max"), (2, "l2"), (4, "max"), (3, "l2")])
def test_qsgd_is_unbiased(bits, norm):
    n, bucket, T = 200, 50, 1000
    x = randn(n, seed=11)
    c = C.get("qsgd", bits=bits, bucket=bucket, norm=norm)
    s = 2 ** (bits - 1) - 1
    acc = torch.zeros(n, dtype=torch.float64)
    for step in range(T):
        acc += roundtrip(c, x, step=step).double()
    mean = acc / T
    norms = qsgd_norms(x, bucket, norm).repeat_interleave(bucket)[:n]
    # per element: Var <= (norm / s)^2 / 4, so the mean's std <= norm / (2 s sqrt(T))
    sd = norms / (2 * s * math.sqrt(T))
    z = (mean - x.double()).abs() / sd
    assert float(z.max()) < 5.5
    # the deviations look like noise: their average is far below the per-element bound
    assert float(((mean - x.double()) / sd).mean().abs()) < 5.5 / math.sqrt(n)


@pytest.mark.parametrize("bits", [2, 3, 4, 6])
def test_qsgd_variance_bound_l2(bits):
    bucket, nbk, T = 64, 4, 400
    x = randn(bucket * nbk, seed=bits)
    x[:bucket] = 1.0 / math.sqrt(bucket)  # a flat bucket: the worst case of the bound
    c = C.get("qsgd", bits=bits, bucket=bucket, norm="l2")
    s = 2 ** (bits - 1) - 1
    xd = x.double().view(nbk, bucket)
    sq = torch.zeros(nbk, dtype=torch.float64)
    for step in range(T):
        sq += ((roundtrip(c, x, step=step).double().view(nbk, bucket) - xd) ** 2).sum(1)
    emp = sq / T
    norm2 = (xd**2).sum(1)
    bound = min(bucket / s**2, math.sqrt(bucket) / s) * norm2
    # exact expected squared error of unbiased rounding between levels: (norm/s)^2 sum p (1 - p)
    r = xd.abs() / norm2.sqrt()[:, None] * s
    p = r - r.floor()
    exact = (norm2 / s**2) * (p * (1 - p)).sum(1)
    assert bool((exact <= bound * (1 + 1e-9)).all())
    assert bool((emp <= bound * 1.15).all())
    assert torch.allclose(emp, exact, rtol=0.2)


def test_qsgd_max_norm_variance_bound():
    x = randn(1024, seed=5)
    c = C.get("qsgd", bits=2, bucket=128)
    T = 300
    sq = torch.zeros(1024, dtype=torch.float64)
    for step in range(T):
        sq += (roundtrip(c, x, step=step).double() - x.double()) ** 2
    norms = qsgd_norms(x, 128, "max").repeat_interleave(128)
    assert float((sq / T).sum()) <= float((norms**2 / 4).sum())


def test_qsgd_huge_finite_values_l2():
    """Finite input whose l2 bucket norm (1.4e20) is a float32 but whose sum of squares (2e40)
    is not: the decode is finite (the norm is computed in float64)."""
    x = torch.tensor([1e20, -1e20, 1.0, 0.5])
    out = roundtrip(C.get("qsgd", norm="l2"), x)
    assert bool(torch.isfinite(out).all())
    assert float((out.double() - x.double()).abs().max()) <= math.sqrt(2) * 1e20 * 1.0001


# ---------------------------------------------------------------- onebit


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


# ---------------------------------------------------------------- adaptive / topk


def adaptive_reference(x: torch.Tensor, pi: float, grouping: str = "column") -> torch.Tensor:
    """The k largest magnitudes (ties: the lowest index in group-major order), each decoded to the
    mean of the selected entries of its sign in its group."""
    m = as_groups(x.double(), grouping)
    rows, cols = m.shape
    flat = m.contiguous().reshape(-1).numpy()
    idx = top_indices(flat, k_sent(pi, flat.size))
    out = np.zeros(flat.size)
    for r in range(rows):
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


@pytest.mark.parametrize("shape,pi", [((1000,), 0.01), ((7, 13), 0.2), ((4, 3, 3, 3), 0.5), ((5,), 1.0)], ids=str)
def test_topk_keeps_exactly_the_k_largest(shape, pi):
    x = randn(*shape, seed=6)
    out = roundtrip(C.get("topk", pi=pi), x)
    flat = x.reshape(-1).numpy()
    idx = top_indices(flat, k_sent(pi, flat.size))
    expect = np.zeros_like(flat)
    expect[idx] = flat[idx]
    assert np.array_equal(out.reshape(-1).numpy(), expect)


@pytest.mark.parametrize("name,p", [("topk", {}), ("adaptive", {"grouping": "row"})], ids=str)
def test_sparse_ties_go_to_the_lowest_index(name, p):
    x = torch.tensor([0.5, -1.0, 1.0, 2.0, -1.0, 1.0, 0.25, 1.0]).view(2, 4)
    c = C.get(name, pi=3 / 8, **p)  # k = 3: 2.0, then the first two of the five tied 1.0s
    out = roundtrip(c, x).view(-1)
    assert (out != 0).nonzero().view(-1).tolist() == [1, 2, 3]
    if name == "topk":
        assert out.tolist() == [0, -1.0, 1.0, 2.0, 0, 0, 0, 0]
    else:
        assert out.tolist() == [0, -1.0, 1.5, 1.5, 0, 0, 0, 0]


def test_adaptive_column_ties_go_to_the_lowest_index_column_by_column():
    """By columns the order is column-major: the groups', so each group's entries are one run."""
    x = torch.tensor([0.5, -1.0, 1.0, 2.0, -1.0, 1.0, 0.25, 1.0]).view(2, 4)
    # column-major: 0.5, -1.0 (x[1,0]), -1.0 (x[0,1]), 1.0, 1.0, 0.25, 2.0, 1.0: 2.0, then x[1,0], x[0,1]
    out = roundtrip(C.get("adaptive", pi=3 / 8, grouping="column"), x).view(-1)
    assert out.tolist() == [0, -1.0, 0, 2.0, -1.0, 0, 0, 0]


def test_k_is_ceil_pi_n():
    for pi, n, k in [(0.1, 1000, 100), (0.01, 100, 1), (0.01, 101, 2), (0.001, 10, 1), (0.3, 10, 3),
                     (0.7, 10, 7), (1.0, 5, 5), (0.5, 1, 1), (1e-9, 10**6, 1)]:
        assert k_sent(pi, n) == k
        assert C.get("topk", pi=pi).payload_nbytes((n,)) == 48 + 8 * k


# ---------------------------------------------------------------- error feedback


@pytest.mark.parametrize("name,p", [("onebit", {}), ("adaptive", {"pi": 0.05}), ("topk", {"pi": 0.05}),
                                    ("qsgd", {"bits": 2, "bucket": 16})], ids=lambda v: str(v))
def test_error_feedback_conserves_the_sum(name, p):
    c = C.get(name, **p)
    ef = C.ErrorFeedback()
    shape = (6, 20)
    total_in = torch.zeros(shape, dtype=torch.float64)
    total_out = torch.zeros(shape, dtype=torch.float64)
    for t in range(25):
        g = randn(*shape, seed=100 + t)
        g0 = g.clone()
        v = ef.compensate("w", g)
        assert torch.equal(g, g0)  # the gradient is left alone
        d = c.decode(c.encode(v, step=t))
        ef.update("w", v, d)
        total_in += g.double()
        total_out += d.double()
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    if name in SPARSE + ("onebit",):  # the residual holds what was not sent yet
        assert float(ef.residuals["w"].abs().sum()) > 0


def test_error_feedback_state_dict_roundtrip():
    ef = C.ErrorFeedback()
    c = C.get("topk", pi=0.1)
    for key in ("a", ("b", 1)):
        for t in range(3):
            v = ef.compensate(key, randn(4, 5, seed=t))
            ef.update(key, v, c.decode(c.encode(v)))
    state = ef.state_dict()
    ef2 = C.ErrorFeedback()
    ef2.load_state_dict(state)
    g = randn(4, 5, seed=9)
    for key in ("a", ("b", 1)):
        assert torch.equal(ef2.compensate(key, g), ef.compensate(key, g))
    # the state is a copy
    before = state["residuals"]["a"].clone()
    ef.residuals["a"] += 1
    assert torch.equal(state["residuals"]["a"], before)
    # a residual of another shape is refused
    with pytest.raises(ValueError):
        ef.compensate("a", torch.zeros(3))
    # first use: no residual
    assert torch.equal(C.ErrorFeedback().compensate("x", g), g)


# ---------------------------------------------------------------- determinism and the random numbers


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_encode_is_deterministic(cfg):
    name, p = cfg
    x = randn(33, 17)
    a = C.get(name, **p).encode(x, step=3, rank=1, stream=2)
    b = C.get(name, **p).encode(x.clone(), step=3, rank=1, stream=2)
    assert torch.equal(a, b)


def test_qsgd_randomness_depends_on_seed_step_rank_stream():
    x = randn(4096, seed=1)
    base = C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=0)
    assert torch.equal(base, C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=0))
    others = [
        C.get("qsgd", bits=2).encode(x, step=2, rank=0, stream=0),
        C.get("qsgd", bits=2).encode(x, step=1, rank=1, stream=0),
        C.get("qsgd", bits=2).encode(x, step=1, rank=0, stream=1),
        C.get("qsgd", bits=2, seed=1).encode(x, step=1, rank=0, stream=0),
    ]
    for o in others:
        assert o.numel() == base.numel() and not torch.equal(o, base)
        assert torch.equal(o[:48], base[:48])  # header
    keys = {rng.stream_key(*t) for t in [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                                         (0, 1, 1, 0), (1, 1, 1, 1), (2**32 - 1, 0, 0, 0)]}
    assert len(keys) == 8


@pytest.mark.parametrize("key", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x12345678, rng.stream_key(3, 9, 1, 4)])
def test_rng_numpy_and_torch_paths_agree_bit_for_bit(key):
    n = 70001
    a = torch.from_numpy(rng._uniform_numpy(key, n))
    b = rng._uniform_torch(key, n, torch.device("cpu"))
    assert a.dtype == b.dtype == torch.float32
    assert torch.equal(a, b)
    assert torch.equal(rng.uniform(key, n, "cpu"), a)
    assert float(a.min()) >= 0.0 and float(a.max()) < 1.0
    assert 0.49 < float(a.double().mean()) < 0.51
    # the documented hash: top 24 bits of fmix32(index * 0x9E3779B1 ^ key), times 2^-24
    for i in (0, 1, 2, 12345, n - 1):
        h = murmur_fmix32(((i * 0x9E3779B1) % 2**32) ^ key)
        assert float(a[i]) == (h >> 8) * 2.0**-24


def murmur_fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser, written out from the reference C code."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    return h ^ (h >> 16)


def test_fmix32_is_murmur3_finaliser():
    for h in [0, 1, 2, 0xDEADBEEF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF] + list(range(3, 3000, 97)):
        assert rng.fmix32(h) == murmur_fmix32(h)


# ---------------------------------------------------------------- edge inputs


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_zeros_decode_to_zeros(cfg):
    name, p = cfg
    for shape in [(10,), (4, 6), (2, 3, 4)]:
        x = torch.zeros(shape)
        out = roundtrip(C.get(name, **p), x)
        assert torch.equal(out, x)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] in SHIPPED], ids=cfg_id)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1, 1)], ids=str)
def test_one_element_is_exact(cfg, shape):
    name, p = cfg
    for value in (-2.5, 0.75):
        x = torch.full(shape, value)
        out = roundtrip(C.get(name, **p), x)
        assert out.shape == x.shape
        if name == "qsgd":  # level s times (norm / s): within an ulp
            assert float(out.reshape(())) == pytest.approx(value, rel=2.0**-23)
        else:
            assert torch.equal(out, x)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 3)], ids=str)
def test_empty_tensors(cfg, shape):
    name, p = cfg
    c = C.get(name, **p)
    payload = c.encode(torch.zeros(shape))
    assert payload.numel() == c.payload_nbytes(shape)
    out = c.decode(payload)
    assert out.shape == shape and out.dtype == torch.float32


@pytest.mark.parametrize("cfg", CONFIGS + [("qsgd", {"bits": 3, "bucket": 10}), ("dynamic8", {"block": 9})],
                         ids=cfg_id)
def test_non_contiguous_input_equals_contiguous(cfg):
    name, p = cfg
    c = C.get(name, **p)
    base = randn(12, 30, seed=8)
    views = [base.t(), base[::2], base[:, 1::3], base.t()[3:9:2], base.view(12, 5, 6).permute(2, 0, 1)]
    for v in views:
        assert not v.is_contiguous()
        assert torch.equal(c.encode(v, step=1), c.encode(v.contiguous(), step=1))
        assert torch.equal(c.decode(c.encode(v)), c.decode(c.encode(v.contiguous())))


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_low_precision_and_double_inputs(cfg, dtype):
    name, p = cfg
    c = C.get(name, **p)
    x = randn(9, 11, seed=12).to(dtype)
    p = c.encode(x, step=2)
    ref = c.encode(x.float(), step=2)
    assert p.numel() == ref.numel() == c.payload_nbytes(x.shape)
    assert torch.equal(p[56:], ref[56:])  # same body, the header records the dtype
    assert not torch.equal(p[:56], ref[:56])
    out = c.decode(p)
    assert out.dtype == torch.float32 and torch.equal(out, c.decode(ref))
    if name == "fp32":
        assert torch.equal(out, x.float())


@pytest.mark.parametrize("name", ALL)
def test_integer_input_is_refused(name):
    with pytest.raises(TypeError):
        C.get(name).encode(torch.arange(5))


def _holds_fp32_range(name: str) -> bool:
    """False for a cast to a type narrower than float32's range (fp16: values beyond 65504 become inf)."""
    dtype = C.COMPRESSORS[name].cast_dtype
    return dtype is None or torch.finfo(dtype).max >= torch.finfo(torch.float32).max / 2


# An l2 bucket norm beyond float32's range cannot be sent (the input's is 5e38):
# test_qsgd_huge_finite_values_l2 covers huge values whose l2 norm is a float32.
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if _holds_fp32_range(c[0]) and c[1].get("norm") != "l2"],
                         ids=cfg_id)
def test_huge_values_stay_finite(cfg):
    name, p = cfg
    x = randn(4, 8, seed=13) * 1e37
    x[0, 0] = 3.3e38  # bf16's largest is 3.39e38
    x[1, :4] = 1e38
    x[2, 1] = -3e38
    out = roundtrip(C.get(name, **p), x)
    assert bool(torch.isfinite(out).all()), out
    if name in ("fp32", "topk"):
        assert bool(((out == x) | (out == 0)).all())


def test_fp16_is_the_shipped_cast_narrower_than_fp32():
    assert [n for n in SHIPPED if not _holds_fp32_range(n)] == ["fp16"]


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


# ---------------------------------------------------------------- parameters


def test_unknown_compressor():
    with pytest.raises(ValueError, match="unknown compressor 'qsdg'.*qsgd"):
        C.get("qsdg")
    with pytest.raises(ValueError, match="valid"):
        C.check_params("nope")


def test_unknown_parameter_suggests():
    with pytest.raises(ValueError, match="unknown parameter 'bitz'.*did you mean 'bits'"):
        C.get("qsgd", bitz=4)
    with pytest.raises(ValueError, match="did you mean 'block'"):
        C.check_params("dynamic8", blok=4)
    with pytest.raises(ValueError, match="unknown parameter 'pi'"):
        C.get("fp32", pi=0.1)


@pytest.mark.parametrize("name,p,rng_text", [
    ("qsgd", {"bits": 1}, r"\[2, 8\]"), ("qsgd", {"bits": 9}, r"\[2, 8\]"), ("qsgd", {"bits": 4.0}, r"\[2, 8\]"),
    ("qsgd", {"bits": True}, r"\[2, 8\]"),
    ("qsgd", {"bucket": 0}, r"\[1, "), ("qsgd", {"norm": "l1"}, r"\['max', 'l2'\]"),
    ("topk", {"pi": 0.0}, r"\(0\.0, 1\.0\]"), ("adaptive", {"pi": 1.5}, r"\(0\.0, 1\.0\]"),
    ("adaptive", {"pi": -0.1}, r"\(0\.0, 1\.0\]"), ("topk", {"pi": "0.1"}, r"\(0\.0, 1\.0\]"),
    ("dynamic8", {"block": -1}, r"\[0, "), ("linear8", {"block": 2**31}, r"\[0, "),
    ("qsgd", {"seed": -1}, r"\[0, "),
])
def test_out_of_range_parameters_name_the_valid_range(name, p, rng_text):
    key = next(iter(p))
    with pytest.raises(ValueError, match=rf"{key}=.*valid: .*{rng_text}"):
        C.get(name, **p)
    with pytest.raises(ValueError, match=rng_text):
        C.check_params(name, **p)


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


def test_check_params_fills_defaults():
    assert C.check_params("qsgd") == {"bits": 4, "bucket": 512, "norm": "max", "seed": 0}
    assert C.check_params("qsgd", bits=2, norm="l2") == {"bits": 2, "bucket": 512, "norm": "l2", "seed": 0}
    assert C.check_params("topk", pi=1) == {"pi": 1.0, "seed": 0}
    assert C.check_params("dynamic8") == {"block": 0, "scope": "chunk", "seed": 0}
    assert C.check_params("fp32") == {"seed": 0}
    powersgd = {"matrix_rank": 1, "start_iter": 2, "min_compression_rate": 2.0, "use_error_feedback": True,
                "warm_start": True, "orthogonalization_epsilon": 0.0, "seed": 0}
    assert C.check_params("powersgd") == powersgd
    assert C.check_params("powersgd", matrix_rank=4) == {**powersgd, "matrix_rank": 4}
    with pytest.raises(ValueError, match="matrix_rank"):
        C.check_params("powersgd", matrix_rank=0)
    with pytest.raises(ValueError, match="did you mean 'matrix_rank'"):
        C.check_params("powersgd", matrix_rnk=2)
    c = C.get("qsgd", bits=3)
    assert c.config == {"bits": 3, "bucket": 512, "norm": "max", "seed": 0} and c.bits == 3


def test_registry_names():
    shipped = [n for n in C.COMPRESSORS if n in SHIPPED]
    assert shipped == ["fp32", "fp16", "bf16", "dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk"]
    assert [C.COMPRESSORS[n].wire_id for n in shipped] == list(range(1, 10))
    assert sorted(c.wire_id for c in C.COMPRESSORS.values()) == [c.wire_id for c in C.COMPRESSORS.values()]
    assert C.NAMES == tuple(C.COMPRESSORS) + ("powersgd",)
    assert [n for n in C.CASTS if n in SHIPPED] == ["fp32", "fp16", "bf16"]
    with pytest.raises(ValueError, match=r"powersgd.*compressors\.ddp\.comm_hook"):
        C.get("powersgd")
    for name in ("onebit", "adaptive", "topk"):
        assert C.COMPRESSORS[name].needs_error_feedback
    assert not C.COMPRESSORS["qsgd"].needs_error_feedback
    assert [n for n in SHIPPED if C.COMPRESSORS[n].sparse] == ["adaptive", "topk"]
    assert issubclass(C.PayloadError, ValueError)


def test_algorithms_per_method():
    for name in ("fp32", "fp16", "bf16"):
        assert C.algorithms(name) == ("allreduce", "allgather", "sra") and C.default_algorithm(name) == "allreduce"
    for name in ("dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk"):
        assert C.algorithms(name) == ("allgather", "sra") and C.default_algorithm(name) == "sra"
    assert C.algorithms("powersgd") == ("powersgd",) and C.default_algorithm("powersgd") == "powersgd"
    with pytest.raises(ValueError, match="unknown compressor 'nope'"):
        C.algorithms("nope")


@pytest.mark.parametrize("name", list(C.NAMES))
def test_params_of_declares_every_parameter_with_a_doc(name):
    params = C.params_of(name)
    assert params[-1].name == "seed"
    assert [p.name for p in params] == list(C.check_params(name))
    for p in params:
        assert p.doc and "\n" not in p.doc, p
        assert C.check_params(name)[p.name] == p.default


def test_params_of_unknown_name():
    with pytest.raises(ValueError, match="unknown compressor 'qsdg'"):
        C.params_of("qsdg")


@pytest.mark.parametrize("name", ALL)
def test_each_class_declares_examples_within_its_parameters(name):
    cls = C.COMPRESSORS[name]
    assert cls.examples and cls.__dict__["name"] == name
    declared = {p.name for p in cls.params}
    for example in cls.examples:
        assert set(example) <= declared
    # every declared parameter away from its default in some example (or it has no other value)
    for p in cls.params:
        assert any(p.name in ex for ex in cls.examples), p.name


def _define(name: str, wire_id, **attrs):
    """Define (and so try to register) a compressor class."""
    return type(f"Tmp_{name}", (C.Compressor,), {"name": name, "wire_id": wire_id, "__module__": __name__, **attrs})


def test_registering_a_taken_name_or_wire_id_fails_clearly():
    before = dict(C.COMPRESSORS)
    with pytest.raises(registry.RegistrationError, match="name 'qsgd' is already registered by compressors.codecs.qsgd.QSGD"):
        _define("qsgd", registry.unused_wire_id())
    with pytest.raises(registry.RegistrationError,
                       match=rf"wire_id 6 is already used by 'qsgd'.*the lowest is {registry.unused_wire_id()}"):
        _define("qsgd2", 6)
    with pytest.raises(registry.RegistrationError, match="name 'powersgd' is already registered"):
        _define("powersgd", registry.unused_wire_id())
    for bad in (0, 256, -1, "7", True, None):
        with pytest.raises(registry.RegistrationError, match=r"wire_id must be an int in \[1, 255\]"):
            _define("fresh", bad)
    assert C.COMPRESSORS == before and "fresh" not in C.NAMES


def test_registration_checks_docs_and_examples():
    free = registry.unused_wire_id()
    with pytest.raises(registry.RegistrationError, match="one-line doc"):
        _define("nodoc", free, params=(Param("x", 1, int),))
    with pytest.raises(registry.RegistrationError, match="invalid example.*unknown parameter 'bits'"):
        _define("badexample", free, examples=({"bits": 4},))
    with pytest.raises(registry.RegistrationError, match="invalid example.*x=0 is invalid"):
        _define("badvalue", free, params=(Param("x", 1, int, low=1, doc="a doc"),), examples=({"x": 0},))
    with pytest.raises(registry.RegistrationError, match="at least one parameter set"):
        _define("noexamples", free, examples=())
    assert not {"nodoc", "badexample", "badvalue", "noexamples"} & set(C.COMPRESSORS)


def test_the_package_imports_every_module_so_every_compressor_registers():
    import pkgutil
    import sys

    import compressors.codecs

    modules = [sys.modules[f"compressors.codecs.{info.name}"] for info in pkgutil.iter_modules(compressors.codecs.__path__)]
    defined = {obj for module in modules for obj in vars(module).values()
               if isinstance(obj, type) and issubclass(obj, C.Compressor) and "name" in obj.__dict__}
    assert defined == set(C.COMPRESSORS.values())


def test_dynamic8_bin_table_gives_the_binary_search_position_bit_for_bit():
    tables = dynamic_tree.tables("cpu")
    bounds = tables.bounds
    below, above = torch.nextafter(bounds, torch.tensor(0.0)), torch.nextafter(bounds, torch.tensor(2.0))
    a = torch.cat([bounds, below, above, torch.rand(100_000) ** 8, torch.tensor([0.0, 1e-45, 1.0])]).clamp(0, 1)
    assert torch.equal(dynamic_tree.position(tables, a).long(), torch.searchsorted(bounds, a, right=True))


PIECEWISE_CASES = [
    ("dynamic8", {}, (3001,)), ("dynamic8", {"block": 100}, (37, 81)), ("linear8", {}, (5, 999)),
    ("linear8", {"block": 7}, (2049,)), ("qsgd", {"bits": 3, "bucket": 7}, (1001, 3)),
    ("qsgd", {"bits": 4, "bucket": 512}, (9, 1000)), ("qsgd", {"bits": 8, "norm": "l2", "bucket": 33}, (4097,)),
    ("qsgd", {"bits": 2, "bucket": 1}, (77, 13)), ("onebit", {}, (61, 7)), ("onebit", {}, (17, 3, 3)),
]


@pytest.mark.parametrize("name,params,shape", PIECEWISE_CASES)
@pytest.mark.parametrize("piece", [1, 8, 64, 1000])
def test_piecewise_processing_gives_the_same_bytes_as_one_piece(monkeypatch, name, params, shape, piece):
    from compressors.core import chunks

    x = torch.randn(shape, generator=torch.Generator().manual_seed(5)) * 3
    x.view(-1)[::97] = 0.0
    c = C.get(name, **params)
    monkeypatch.setattr(chunks, "CHUNK_ELEMS", 1 << 30)
    whole = c.encode(x, step=3, rank=1, stream=2)
    whole_decoded = c.decode(whole)
    monkeypatch.setattr(chunks, "CHUNK_ELEMS", piece)
    pieces = c.encode(x, step=3, rank=1, stream=2)
    assert torch.equal(pieces, whole)
    assert torch.equal(c.decode(whole), whole_decoded)
