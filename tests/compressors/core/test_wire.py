"""The wire format (compressors/core/wire.py): the documented header, the released wire ids, wrong
parameters and sparse indices refused, and fuzzing: every decoder raises compressors.PayloadError
(a ValueError) and nothing else, or decodes a payload that is still well formed (CPU, fast).
What every codec's decoder refuses (truncation, header fields, flipped bytes) is in
tests/compressors/test_contract.py.
"""
from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compressors as C
from compressors.core import registry, wire
from tests.helpers import (FIXED, cfg_id, configs, decodes_or_rejects, dense, must_decode, raw, rejects, repack,
                           sample, tensor, unpack_header, valid)

CONFIGS = configs()
WIRE_IDS = sorted(cls.wire_id for cls in C.COMPRESSORS.values())
UNUSED_IDS = sorted({0, registry.unused_wire_id(), max(set(range(256)) - set(WIRE_IDS))})
# The ids of released payload formats: a payload made by one version decodes in the next.
RELEASED_IDS = {"fp32": 1, "fp16": 2, "bf16": 3, "dynamic8": 4, "linear8": 5, "qsgd": 6, "onebit": 7,
                "adaptive": 8, "topk": 9}
# The same examples on every run (derandomize): a failure found once is found again, and a run cannot
# fail by drawing differently.
HYPO = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def test_payload_error_is_a_value_error():
    assert issubclass(C.PayloadError, ValueError) and C.PayloadError is wire.PayloadError


def test_header_layout_is_as_documented():
    c, p = valid("qsgd", {"bits": 3, "bucket": 7, "norm": "l2"}, shape=(2, 3, 5))
    h = unpack_header(raw(p))
    assert h[:5] == [b"LPGC", 1, 6, 0, 3]
    assert h[5:9] == [3, 7, 1, 0.0]
    assert h[9] == 30 and h[10] == p.numel() - 64 and h[11] == [2, 3, 5]
    assert wire.header_nbytes(3) == 64 == wire.HEADER_FIXED_NBYTES + 24


def test_wire_ids_of_released_formats_never_change():
    for name, wire_id in RELEASED_IDS.items():
        assert C.COMPRESSORS[name].wire_id == wire_id
        assert unpack_header(raw(valid(name)[1]))[2] == wire_id
    assert len(set(WIRE_IDS)) == len(WIRE_IDS) and all(1 <= i <= 255 for i in WIRE_IDS)


def test_unregistered_ids_are_payload_errors():
    _, p = valid("fp32")
    for codec in UNUSED_IDS:
        assert codec not in WIRE_IDS
        with pytest.raises(C.PayloadError, match=f"unknown compressor id {codec}"):
            wire.read_header(tensor(repack(raw(p), codec=codec)))
    with pytest.raises(ValueError, match="unknown compressor 'nosuch'"):
        wire.encode_header("nosuch", torch.float32, (3,), (0, 0, 0, 0.0), 12)


def test_numel_beyond_the_limit():
    c, p = valid("fp32", shape=(0,))
    for n in (2**31, 2**40):
        rejects(c, tensor(repack(raw(p), shape=[n], numel=n)))
        rejects(c, tensor(repack(raw(p), shape=[2, n // 2], numel=n)))


# ---------------------------------------------------------------- wrong parameters


@pytest.mark.parametrize("src,dst", [
    (("qsgd", {"bits": 4}), ("qsgd", {"bits": 8})), (("qsgd", {"bits": 8}), ("qsgd", {"bits": 4})),
    (("qsgd", {"bucket": 512}), ("qsgd", {"bucket": 256})), (("qsgd", {"norm": "max"}), ("qsgd", {"norm": "l2"})),
    (("dynamic8", {}), ("dynamic8", {"block": 64})), (("linear8", {"block": 3}), ("linear8", {"block": 4})),
    (("topk", {"pi": 0.01}), ("topk", {"pi": 0.02})), (("topk", {"pi": 0.25}), ("topk", {"pi": 0.5})),
    (("adaptive", {"pi": 0.01}), ("adaptive", {"pi": 0.02})), (("adaptive", {"pi": 0.5}), ("adaptive", {"pi": 0.25})),
], ids=lambda v: cfg_id(v))
def test_mismatched_parameters(src, dst):
    _, p = valid(*src)
    rejects(C.get(dst[0], **dst[1]), p, "parameters")
    # a header rewritten to the decoder's parameters no longer fits its body
    d = C.get(dst[0], **dst[1])
    p0, p1, p2, p3 = d._header_params((3, 4))
    b = repack(raw(p), p0=p0, p1=p1, p2=p2, p3=p3)
    if d._body_nbytes((3, 4)) != C.get(src[0], **src[1])._body_nbytes((3, 4)):
        rejects(d, tensor(b), "needs")


def test_nan_parameter_in_header():
    c, p = valid("topk", {"pi": 0.25})
    rejects(c, tensor(repack(raw(p), p3=math.nan)), "parameters")
    c, p = valid("qsgd")
    rejects(c, tensor(repack(raw(p), p3=math.nan)), "parameters")


# ---------------------------------------------------------------- indices in sparse bodies


def test_topk_index_out_of_range():
    c, p = valid("topk", {"pi": 0.25})  # n = 12, k = 3: 12 bytes of values, then 3 int32 indices
    b = raw(p)
    at = 56 + 12
    for i in range(3):
        for bad in (12, 13, 2**31 - 1, -1, -(2**31)):
            m = bytearray(b)
            m[at + 4 * i:at + 4 * i + 4] = struct.pack("<i", bad)
            rejects(c, tensor(m), "out of range")
    indices = struct.unpack("<3i", b[at:at + 12])
    for good in ((0, 1, 2), (9, 10, 11), (0, 5, 11)):  # any strictly ascending indices in range decode
        m = bytearray(b)
        m[at:at + 12] = struct.pack("<3i", *good)
        assert c.decode(tensor(m)).reshape(-1).nonzero().view(-1).tolist() == [
            i for i in good if c.decode(tensor(m)).reshape(-1)[i] != 0]
    for bad in ((indices[1], indices[0], indices[2]), (indices[0], indices[0], indices[2])):
        m = bytearray(b)
        m[at:at + 12] = struct.pack("<3i", *bad)
        rejects(c, tensor(m), "not strictly ascending")  # duplicates would make decode and decode-add disagree


def adaptive_payload(shape, pi):
    c = C.get("adaptive", pi=pi, grouping="row")
    return c, raw(c.encode(sample(shape, seed=3)))


def test_adaptive_wrong_total():
    c, b = adaptive_payload((3, 10), 0.2)  # k = 6, rows 3, 2-byte entries
    at = 56
    assert struct.unpack("<I", b[at:at + 4])[0] == 6
    for bad in (0, 5, 7, 2**31 - 1, 2**32 - 1):
        m = bytearray(b)
        m[at:at + 4] = struct.pack("<I", bad)
        rejects(c, tensor(m), "entries")


@pytest.mark.parametrize("offsets", [[1, 2, 4], [0, 4, 2], [0, 2, 7], [0, 7, 7], [0, -1, 3], [0, 2, -5],
                                     [0, 2**31 - 1, 3], [-(2**31), 0, 0]])
def test_adaptive_bad_offsets(offsets):
    c, b = adaptive_payload((3, 10), 0.2)
    m = bytearray(b)
    m[60:72] = struct.pack("<3i", *offsets)
    rejects(c, tensor(m), "offsets")


def test_adaptive_good_offsets_other_split_decode():
    c, b = adaptive_payload((3, 10), 0.2)
    at = 56 + 4 + 36
    entries = [2 << 1, 6 << 1, 7 << 1, 1 << 1, 3 << 1, 9 << 1]  # two ascending runs of three columns
    m = bytearray(b)
    m[at:at + 12] = struct.pack("<6H", *entries)
    for offsets in ([0, 3, 3], [0, 0, 3], [0, 3, 6]):  # each split keeps every row's columns ascending
        m[60:72] = struct.pack("<3i", *offsets)
        assert c.decode(tensor(m)).shape == (3, 10)
    m[60:72] = struct.pack("<3i", 0, 0, 0)  # one row holding columns 2, 6, 7, 1, 3, 9
    rejects(c, tensor(m), "not strictly ascending")


def test_adaptive_column_index_out_of_range_16_bit():
    c, b = adaptive_payload((3, 10), 0.2)
    at = 56 + 4 + 36
    for i in range(6):
        for bad in (10 << 1, (10 << 1) | 1, 0xFFFF):
            m = bytearray(b)
            m[at + 2 * i:at + 2 * i + 2] = struct.pack("<H", bad)
            rejects(c, tensor(m), "column index")


def test_adaptive_column_index_out_of_range_32_bit():
    shape = (2, 40000)
    c, b = adaptive_payload(shape, 0.0001)  # k = 8, 4-byte entries
    at = 56 + 4 + 24
    assert len(b) == at + 8 * 4
    for bad in (40000 << 1, 2**31 - 1, -1, -(2**31)):
        m = bytearray(b)
        m[at + 4:at + 8] = struct.pack("<i", bad)
        rejects(c, tensor(m), "column index")
    m = bytearray(b)
    m[at + 28:at + 32] = struct.pack("<i", 39999 << 1)  # the last entry: the largest column stays ascending
    assert c.decode(tensor(m)).shape == shape


# ---------------------------------------------------------------- fuzzing


DECODERS = [C.get(name, **p) for name, p in CONFIGS]


@pytest.mark.slow  # fuzzing: 100 generated payloads
@HYPO
@given(data=st.binary(max_size=160))
def test_random_bytes(data):
    for c in DECODERS:
        with pytest.raises(C.PayloadError):
            c.decode(tensor(data))


@pytest.mark.slow  # fuzzing: 100 generated payloads
@HYPO
@given(rest=st.binary(min_size=36, max_size=140), codec=st.sampled_from(WIRE_IDS + UNUSED_IDS),
       ndim=st.integers(0, 9))
def test_random_bytes_behind_a_valid_prefix(rest, codec, ndim):
    b = bytearray(b"LPGC") + bytes([1, codec, 0, ndim]) + rest[4:]
    for c in DECODERS:
        decodes_or_rejects(c, tensor(b))


@st.composite
def header_fields(draw):
    name, p = draw(st.sampled_from(CONFIGS))
    c = C.get(name, **p)
    ndim = draw(st.integers(0, 4))
    dims = st.one_of(st.integers(0, 6), st.sampled_from([2**16, 2**31, 2**32, 2**63, 2**64 - 1]))
    shape = [draw(dims) for _ in range(ndim)]
    true_numel = numel = math.prod(shape)
    if draw(st.booleans()):
        numel = draw(st.integers(0, 2**64 - 1))
    small = true_numel <= 2**16
    body = c._body_nbytes(tuple(shape)) if small else 0
    if draw(st.booleans()):
        body = draw(st.integers(0, 64))
    body = min(body, 4096)
    params = c._header_params(tuple(shape)) if small else (0, 0, 0, 0.0)
    head = FIXED.pack(b"LPGC", 1, C.COMPRESSORS[name].wire_id, 0, ndim, *params[:3], params[3], numel % 2**64, body)
    head += struct.pack(f"<{ndim}Q", *shape)
    tail = draw(st.binary(min_size=body, max_size=body))
    return c, bytearray(head) + tail


@pytest.mark.slow  # fuzzing: 100 generated payloads
@HYPO
@given(case=header_fields())
def test_random_headers_and_bodies(case):
    c, b = case
    out = decodes_or_rejects(c, tensor(b))
    if out is not None:
        assert list(out.shape) == unpack_header(b)[11]


@st.composite
def mutated(draw):
    name, p = draw(st.sampled_from(CONFIGS))
    shape = draw(st.sampled_from([(3, 4), (7,), (), (2, 3, 5), (1, 9), (2, 40000)]))
    c = C.get(name, **p)
    b = raw(c.encode(sample(shape, seed=draw(st.integers(0, 3)))))
    flips = draw(st.lists(st.tuples(st.integers(0, len(b) - 1), st.integers(1, 255)), min_size=1, max_size=4))
    for pos, xor in flips:
        b[pos] ^= xor
    in_body = all(pos >= 40 + 8 * len(shape) for pos, _ in flips)
    return name, c, b, in_body, shape


@pytest.mark.slow  # fuzzing: 100 generated payloads
@HYPO
@given(case=mutated())
def test_flipped_bytes_of_a_valid_payload(case):
    name, c, b, in_body, shape = case
    out = decodes_or_rejects(c, tensor(b))
    if in_body and must_decode(name, b):
        assert out is not None and out.shape == shape
    if in_body and dense(name) and not must_decode(name, b):
        assert out is None
    if out is not None:
        assert list(out.shape) == unpack_header(b)[11]
