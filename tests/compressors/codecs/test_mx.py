"""mx (compressors/codecs/mx.py) against an independent implementation of OCP MX v1.0's conversion
(section 6.3), written here element by element in Python floats: the shared exponent
floor(log2(amax)) - emax_elem clamped to [-127, 127], each element V / X rounded to nearest even in
the element type with saturation at its largest normal; hand-computed ties, saturation, zero blocks,
subnormal inputs, the short last block, NaN and Inf; stochastic rounding unbiased."""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from compressors.core import wire
from tests.helpers import randn, roundtrip

# element: (exponent bits, mantissa bits, emax_elem, largest normal); int8: fixed point, 6 fraction bits
ELEMENTS = {"e4m3": (4, 3, 8, 448.0), "e5m2": (5, 2, 15, 57344.0), "e3m2": (3, 2, 4, 28.0),
            "e2m3": (2, 3, 2, 7.5), "e2m1": (2, 1, 2, 6.0), "int8": (None, None, 0, 127 / 64)}
BITS = {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4, "int8": 8}


def floor_log2(a: float) -> int:
    m, e = math.frexp(a)  # a = m * 2**e, 0.5 <= m < 1
    return e - 1


def element(v: float, name: str) -> float:
    """V / X rounded to the element type: nearest, ties to even, saturating at the largest normal."""
    ebits, mbits, _, largest = ELEMENTS[name]
    if name == "int8":
        return max(-127, min(127, round(v * 64))) / 64  # Python's round: half to even
    a = abs(v)
    if a >= largest:
        return math.copysign(largest, v)
    bias = 2 ** (ebits - 1) - 1
    quantum = 2.0 ** (max(floor_log2(a) if a > 0 else 1 - bias, 1 - bias) - mbits)
    return math.copysign(round(a / quantum) * quantum, v)  # a / quantum is exact; round() ties to even


def spec(x: torch.Tensor, name: str) -> torch.Tensor:
    """Decoded values of the spec's conversion, block of 32 by block."""
    flat = [float(v) for v in x.reshape(-1)]
    out = []
    for a in range(0, len(flat), 32):
        block = flat[a:a + 32]
        if any(not math.isfinite(v) for v in block):
            out += [math.nan] * len(block)
            continue
        amax = max(abs(v) for v in block)
        shared = -127 if amax == 0 else max(-127, min(127, floor_log2(amax) - ELEMENTS[name][2]))
        out += [element(v / 2.0**shared, name) * 2.0**shared for v in block]
    return torch.tensor(out, dtype=torch.float32).reshape(x.shape)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("name", list(ELEMENTS))
@pytest.mark.parametrize("shape", [(300,), (9, 31), (70,), (5,)], ids=str)
def test_decode_equals_the_spec(name, shape):
    n = math.prod(shape)
    x = randn(*shape, seed=2) * torch.logspace(-8, 8, n).reshape(shape)  # blocks of every magnitude
    out = roundtrip(C.get("mx", element=name), x)
    assert same(out, spec(x, name))


@pytest.mark.parametrize("name, values, expected", [
    # amax 4 (floor(log2 4) = 2 = emax_elem): X = 1. Ties go to the even code: 2.5 -> 2 (codes 4 and 5),
    # 5 -> 4 (6 and 7), 0.25 -> 0, 0.75 -> 1 (codes 1 and 2), 1.25 -> 1, 1.75 -> 2
    ("e2m1", [4.0, 2.5, 5.0, 0.25, 0.75, 1.25, 1.75, -2.5], [4.0, 2.0, 4.0, 0.0, 1.0, 1.0, 2.0, -2.0]),
    # amax 7.9: X = 1, and 7.9 is beyond e2m1's 6 and e2m3's 7.5: clamped, sign kept
    ("e2m1", [7.9, -7.9, 5.5], [6.0, -6.0, 6.0]),
    ("e2m3", [7.9, -7.8, 7.1], [7.5, -7.5, 7.0]),  # steps of 0.5 from 4 up
    # int8: units of 1/64, ties to even; amax 1.99 -> X = 1, 1.99 clamped to 127/64
    ("int8", [1.99, 0.5 / 64, 1.5 / 64, -1.99], [127 / 64, 0.0, 2 / 64, -127 / 64]),
])
def test_hand_computed_ties_and_saturation(name, values, expected):
    out = roundtrip(C.get("mx", element=name), torch.tensor(values))
    assert out.tolist() == expected


def test_an_all_zero_block_decodes_to_zeros_with_the_smallest_scale():
    x = torch.zeros(40)
    x[35] = 1.0  # the second block
    c = C.get("mx", element="e2m1")
    payload = c.encode(x)
    start = wire.read_header(payload).nbytes
    assert payload[start:start + 2].tolist() == [0, 127 - 2]  # 2**-127; 2**(0 - 2)
    assert torch.equal(c.decode(payload), x)


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_subnormal_inputs_are_scaled_like_any_other(name):
    x = torch.tensor([1e-40, -3e-41, 7e-45, 0.0] * 8 + [2e-39, 1e-45])
    assert bool((x.abs() < torch.finfo(torch.float32).tiny).all())
    out = roundtrip(C.get("mx", element=name), x)
    assert same(out, spec(x, name))
    assert out[32] != 0  # the short last block's largest survives


@pytest.mark.parametrize("kind", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_entry_gives_its_block_the_nan_scale_and_no_other(kind):
    x = randn(100, seed=4)
    x[40] = kind
    c = C.get("mx")
    payload = c.encode(x)
    start = wire.read_header(payload).nbytes
    assert payload[start:start + 4].tolist()[1] == 0xFF
    out = c.decode(payload)
    assert bool(out[32:64].isnan().all()) and bool(torch.isfinite(out[:32]).all() and torch.isfinite(out[64:]).all())


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_fp8_elements_are_torchs_saturated_cast(name):
    x = randn(64, seed=6) * 100
    c = C.get("mx", element=name)
    payload = c.encode(x)
    start = wire.read_header(payload).nbytes
    scales = payload[start:start + 2].to(torch.float64) - 127
    v = (x.double() / torch.pow(2.0, scales).repeat_interleave(32)).float()
    largest = ELEMENTS[name][3]
    dtype = torch.float8_e4m3fn if name == "e4m3" else torch.float8_e5m2
    assert torch.equal(payload[start + 2:], v.clamp(-largest, largest).to(dtype).view(torch.uint8))


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_payload_is_a_scale_byte_per_block_and_the_packed_elements(name):
    for n in (0, 1, 31, 32, 33, 1000):
        assert C.get("mx", element=name).payload_nbytes((n,)) - wire.header_nbytes(1) == \
            -(-n // 32) + -(-n * BITS[name] // 8)


@pytest.mark.parametrize("name", ["e4m3", "e2m1", "int8"])
def test_stochastic_rounding_is_unbiased(name):
    x = randn(64, seed=7)
    c = C.get("mx", element=name, rounding="stochastic")
    nearest = roundtrip(C.get("mx", element=name), x)
    steps = 300
    outs = torch.stack([c.decode(c.encode(x, step=s)).double() for s in range(steps)])
    mean, sd = outs.mean(dim=0), outs.std(dim=0)
    moved = sd > 0
    z = ((mean - x.double()).abs() / (sd / math.sqrt(steps)))[moved]
    assert float(z.max()) < 5.0
    assert torch.equal(outs[0][~moved].float(), nearest[~moved])  # entries on a grid point stay there


@pytest.mark.parametrize("name", ["e4m3", "e2m1", "int8"])
def test_a_draw_of_zero_rounds_up_an_entry_far_below_its_blocks_scale(name, monkeypatch):
    # V = 2**-60 / 2**(100 - emax) is positive however small (below float32's smallest for the
    # floats), so a draw of 0 takes it up to the smallest nonzero code in every implementation.
    from compressors.core import rng

    index = 5
    key = (index * rng.GOLDEN) & 0xFFFFFFFF  # index * GOLDEN ^ key = 0, whose hash is 0
    assert float(rng.uniform(key, 8, torch.device("cpu"))[index]) == 0.0
    monkeypatch.setattr(rng, "stream_key", lambda *counters: key)
    x = torch.zeros(32)
    x[0], x[index] = 2.0**100, 2.0**-60
    smallest = 1.0 if name == "int8" else 2.0 ** (2 - 2 ** (ELEMENTS[name][0] - 1) - ELEMENTS[name][1])
    for impl in ("reference", "numba"):
        c = C.get("mx", element=name, rounding="stochastic", impl=impl)
        decoded = c.decode(c.encode(x, step=1))
        unit = 2.0 ** (100 - ELEMENTS[name][2]) * (2.0**-6 if name == "int8" else 1.0)
        assert float(decoded[index]) == smallest * unit, impl
