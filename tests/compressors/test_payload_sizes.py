"""Payload sizes: one table of formulas, per codec, written from the papers' rules and the module
docstrings (header ``40 + 8 ndim`` bytes, then the body), independently of the code, checked against
every registered codec's ``payload_nbytes`` with each parameter set of its ``examples``.

Every codec that ships with the package (a module of ``compressors.codecs``) must have its formula
here; a codec registered from elsewhere (a test's own) needs none.
"""
from __future__ import annotations

import math

import pytest

import compressors as C
from compressors.codecs import topk
from tests.helpers import ceil_div, cfg_id, configs, groups_of, k_sent


def _scaled8(n, shape, p):  # nblocks float32 maxima, one code byte per entry; block 0: one block
    block = p.get("block", 0)
    return 4 * (ceil_div(n, block) if block else min(n, 1)) + n


def _adaptive(n, shape, p):  # the total, per group its offset and two means, then k entries of 2 or 4 bytes
    groups, length = groups_of(shape, p.get("grouping", "column"))
    k = k_sent(p.get("pi", 0.01), n)
    capacity = k if p.get("threshold", "exact") == "exact" else min(n, 4 * k)  # sampled: at most 4k
    return 4 + 12 * groups + capacity * (2 if length <= 32767 else 4)


def _signs(n, shape, p):  # one float32 scale, one bit per entry
    return 4 + ceil_div(n, 8)


# The body bytes of each codec: f(n, shape, params), params as written (defaults below are the documented ones).
BODY_NBYTES = {
    "fp32": lambda n, shape, p: 4 * n,
    "fp16": lambda n, shape, p: 2 * n,
    "bf16": lambda n, shape, p: 2 * n,
    "dynamic8": _scaled8,
    "linear8": _scaled8,
    # a float32 norm per bucket, ``bits`` bits per entry
    "qsgd": lambda n, shape, p: 4 * ceil_div(n, p.get("bucket", 512)) + ceil_div(n * p.get("bits", 4), 8),
    # two float32 means per group, one bit per entry
    "onebit": lambda n, shape, p: 8 * groups_of(shape, p.get("grouping", "column"))[0] + ceil_div(n, 8),
    "adaptive": _adaptive,
    # k float32 values, k int32 indices
    "topk": lambda n, shape, p: 8 * k_sent(p.get("pi", 0.01), n),
    "signsgd": _signs,
    "efsignsgd": _signs,
    "scaledsign": _signs,
    # a float32 scale per bucket (default: the whole tensor), 2 bits per entry
    "terngrad": lambda n, shape, p: 4 * ceil_div(n, p.get("bucket", 2**31 - 1)) + ceil_div(2 * n, 8),
    # the uint32 stream key, k float32 values
    "randomk": lambda n, shape, p: 4 + 4 * k_sent(p.get("pi", 0.01), n),
    # a float32 min and max per bucket, ``bits`` bits per entry
    "maxmin": lambda n, shape, p: 8 * ceil_div(n, p.get("bucket", 1024)) + ceil_div(n * p.get("bits", 4), 8),
    # an exponent byte and a sign bit per entry
    "natural": lambda n, shape, p: ceil_div(9 * n, 8),
    # a float32 scale per block (block 0: one), one byte per entry
    # top-k's pairs at pi (the codec of a warm-up step has that step's pi: at_step)
    "dgc": lambda n, shape, p: 8 * k_sent(p.get("pi", 0.001), n),
    "fp8": lambda n, shape, p: 4 * (ceil_div(n, p["block"]) if p.get("block") else min(n, 1)) + n,
    # an E8M0 byte per block of 32, then 8, 6 or 4 bits per entry
    "mx": lambda n, shape, p: ceil_div(n, 32) + ceil_div(n * {"e3m2": 6, "e2m3": 6, "e2m1": 4}.get(
        p.get("element", "e4m3"), 8), 8),
}


def expected_nbytes(name: str, shape: tuple[int, ...], **p) -> int:
    return 40 + 8 * len(shape) + BODY_NBYTES[name](math.prod(shape), shape, p)


# every shape kind (0-D, 1-D, 2-D, 3-D, 4-D conv, 8-D, empty), 2-byte and 4-byte adaptive entries
SHAPES = [(), (1,), (7,), (1000,), (3, 5), (1, 100), (100, 1), (4, 3, 5), (16, 3, 3, 3), (8, 4, 3, 3),
          (0,), (0, 5), (5, 0), (2, 0, 3), (2, 32767), (2, 32768), (40000,), (1, 70000), (64, 32, 3, 3),
          (3, 1, 1, 1, 1, 1, 1, 2)]


def _shipped() -> set[str]:
    return {name for name, cls in C.COMPRESSORS.items() if cls.__module__.startswith("compressors.codecs.")}


def test_every_shipped_codec_has_a_size_formula():
    assert _shipped() == set(BODY_NBYTES)


@pytest.mark.parametrize("cfg", [c for c in configs() if c[0] in BODY_NBYTES], ids=cfg_id)
def test_payload_nbytes_matches_the_size_formula(cfg):
    name, p = cfg
    c = C.get(name, **p)
    for shape in SHAPES:
        assert c.payload_nbytes(shape) == expected_nbytes(name, shape, **p), shape


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
