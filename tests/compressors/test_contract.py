"""The contract every registered codec keeps, with each parameter set of its class's ``examples``.

Every test here is parametrized over the registry (``compressors.COMPRESSORS``), so a new codec
module is covered without editing this file: encode/decode keep shape and dtype, the payload is
``payload_nbytes`` long, encodes are deterministic, zeros and empty tensors go through, views and
other float dtypes encode as their contiguous float32 copy, and malformed payloads (truncated,
extended, rewritten header fields, another codec's, not a uint8 vector, any single byte flipped)
raise ``PayloadError`` or decode to a well-formed tensor, nothing else. Each method's own
properties are in tests/compressors/codecs/, its payload size formula in test_payload_sizes.py.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from compressors.core import wire

from tests.helpers import (cfg_id, configs, decodes_or_rejects, dense, holds_fp32_range, must_decode, randn, raw,
                       rejects, repack, roundtrip, tensor, unpack_header, valid)

# Read when this module is collected: after tests/conftest.py has imported any extra codec modules.
NAMES = list(C.COMPRESSORS)
CONFIGS = configs()
UNUSED_IDS = sorted({0, C.registry.unused_wire_id(),
                     max(set(range(256)) - {cls.wire_id for cls in C.COMPRESSORS.values()})})

# every shape kind: 0-D, 1-D, 2-D, 3-D, 4-D conv, empty
SHAPES = [(), (1,), (7,), (1000,), (3, 5), (1, 100), (100, 1), (4, 3, 5), (16, 3, 3, 3), (8, 4, 3, 3),
          (0,), (0, 5), (5, 0), (2, 0, 3)]


# ---------------------------------------------------------------- declarations


@pytest.mark.parametrize("name", NAMES)
def test_each_class_declares_examples_within_its_parameters(name):
    cls = C.COMPRESSORS[name]
    assert cls.examples and cls.__dict__["name"] == name
    declared = {p.name for p in cls.params}
    for example in cls.examples:
        assert set(example) <= declared
    # every declared parameter away from its default in some example (or it has no other value)
    for p in cls.params:
        assert any(p.name in ex for ex in cls.examples), p.name


@pytest.mark.parametrize("name", list(C.registry.names()))
def test_params_of_declares_every_parameter_with_a_doc(name):
    params = C.params_of(name)
    assert params[-1].name == "seed"
    assert [p.name for p in params] == list(C.check_params(name))
    for p in params:
        assert p.doc and "\n" not in p.doc, p
        assert C.check_params(name)[p.name] == p.default


# ---------------------------------------------------------------- encode and decode


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_encoded_size_shape_and_dtype(cfg):
    # One test per codec, its shapes in a loop: a test per pair took more time in pytest than in the codecs.
    name, p = cfg
    c = C.get(name, **p)
    for shape in SHAPES:
        x = randn(*shape, seed=len(shape)) if math.prod(shape) else torch.zeros(shape)
        payload = c.encode(x)
        assert payload.dtype == torch.uint8 and payload.dim() == 1, shape
        assert payload.numel() == c.payload_nbytes(shape) == c.payload_nbytes(torch.Size(shape)), shape
        out = c.decode(payload)
        assert out.dtype == torch.float32 and tuple(out.shape) == shape, shape


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_encode_is_deterministic(cfg):
    name, p = cfg
    x = randn(33, 17)
    a = C.get(name, **p).encode(x, step=3, rank=1, stream=2)
    b = C.get(name, **p).encode(x.clone(), step=3, rank=1, stream=2)
    assert torch.equal(a, b)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_zeros_decode_to_zeros(cfg):
    name, p = cfg
    for shape in [(10,), (4, 6), (2, 3, 4)]:
        x = torch.zeros(shape)
        out = roundtrip(C.get(name, **p), x)
        assert torch.equal(out, x)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_empty_tensors(cfg):
    name, p = cfg
    c = C.get(name, **p)
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3)]:
        payload = c.encode(torch.zeros(shape))
        assert payload.numel() == c.payload_nbytes(shape), shape
        out = c.decode(payload)
        assert out.shape == shape and out.dtype == torch.float32, shape


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
def test_low_precision_and_double_inputs(cfg):
    name, p = cfg
    c = C.get(name, **p)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        x = randn(9, 11, seed=12).to(dtype)
        p = c.encode(x, step=2)
        ref = c.encode(x.float(), step=2)
        assert p.numel() == ref.numel() == c.payload_nbytes(x.shape), dtype
        assert torch.equal(p[56:], ref[56:]), dtype  # same body, the header records the dtype
        assert not torch.equal(p[:56], ref[:56]), dtype
        out = c.decode(p)
        assert out.dtype == torch.float32 and torch.equal(out, c.decode(ref)), dtype
        if name == "fp32":
            assert torch.equal(out, x.float())


@pytest.mark.parametrize("name", NAMES)
def test_integer_input_is_refused(name):
    with pytest.raises(TypeError):
        C.get(name).encode(torch.arange(5))


# An l2 bucket norm beyond float32's range cannot be sent (the input's is 5e38):
# codecs/test_qsgd.py's test_qsgd_huge_finite_values_l2 covers huge values whose l2 norm is a float32.
# fp16 is the one cast narrower than float32 (codecs/test_casts.py).
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if holds_fp32_range(c[0]) and c[1].get("norm") != "l2"],
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


# ---------------------------------------------------------------- malformed payloads: truncation and length


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_truncated_at_every_length(cfg):
    c, p = valid(*cfg)
    for n in range(p.numel()):
        rejects(c, p[:n])
        rejects(c, p[:n].clone())
    assert c.decode(p).shape == (3, 4)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_extra_bytes_and_wrong_body_field(cfg):
    c, p = valid(*cfg)
    b = raw(p)
    rejects(c, tensor(b + b"\0"), "header says")
    body = unpack_header(b)[10]
    for wrong in (body - 1, body + 1, 0, 2**64 - 1):
        rejects(c, tensor(repack(b, body=wrong)))
    # a consistent header around a body of the wrong length for the shape
    rejects(c, tensor(repack(b + b"\0" * 8, body=body + 8)), "needs")
    if body >= 1:
        rejects(c, tensor(repack(b[:-1], body=body - 1)), "needs")


# ---------------------------------------------------------------- malformed payloads: header fields


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_bad_header_fields(cfg):
    c, p = valid(*cfg)
    b = raw(p)
    rejects(c, tensor(repack(b, magic=b"LPGD")), "magic")
    rejects(c, tensor(b"\0" * len(b)), "magic")
    for version in (0, 2, 255):
        rejects(c, tensor(repack(b, version=version)), "version")
    for codec in UNUSED_IDS:
        rejects(c, tensor(repack(b, codec=codec)), "compressor id")
    for dtype in (4, 200):
        rejects(c, tensor(repack(b, dtype=dtype)), "dtype")
    for ndim in (9, 255):
        rejects(c, tensor(repack(b, ndim=ndim)))
    rejects(c, tensor(repack(b, numel=13)), "element count")
    rejects(c, tensor(repack(b, numel=2**64 - 1)))
    rejects(c, tensor(repack(b, ndim=4)))  # two more shape words read from the body: length mismatch
    rejects(c, tensor(repack(b, ndim=1)))
    rejects(c, tensor(repack(b, shape=[4, 4])), "element count")
    # another consistent shape of 12 elements: decodes when the body size allows it
    for shape in ([4, 3, 1, 1], [12], [2, 6], []):
        numel = math.prod(shape)
        out = decodes_or_rejects(c, tensor(repack(b, shape=shape, numel=numel)))
        if out is not None:
            assert list(out.shape) == shape
    # the other dtypes are accepted (the decoder returns float32 regardless)
    for name, code in wire.DTYPE_CODES.items():
        assert c.decode(tensor(repack(b, dtype=code))).dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_empty_shape_with_huge_dims(name):
    """A zero dim makes numel 0 whatever the other dims are, and a dim >= 2**63 cannot be a
    torch size: such a header gives PayloadError (or a decoded empty tensor), never another error."""
    c = C.get(name)
    header = wire.encode_header(name, torch.float32, (0,), c._header_params((0,)), c._body_nbytes((0,)))
    for shape in [[0, 2**64 - 1], [0, 2**63], [2**63, 0, 7], [0, 2**62, 2**62], [0, 2**40, 2**40]]:
        b = repack(bytearray(header) + bytes(c._body_nbytes((0,))), shape=shape)
        out = decodes_or_rejects(c, tensor(b))
        if out is not None:
            assert out.numel() == 0 and list(out.shape) == shape


@pytest.mark.parametrize("src", CONFIGS, ids=cfg_id)
def test_foreign_compressor(src):
    _, p = valid(*src)
    for dst in set(C.COMPRESSORS) - {src[0]}:
        rejects(C.get(dst), p, "made by")


# ---------------------------------------------------------------- what a payload is


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_not_a_uint8_vector(cfg):
    c, p = valid(*cfg)
    even = p[: p.numel() // 2 * 2]
    for bad in (p.to(torch.int8), p.float(), p.view(1, -1), p[None], even.reshape(2, -1), p[0], p.numpy(),
                bytes(raw(p)), list(raw(p)), None):
        rejects(c, bad, "1-D torch.uint8")


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_payload_at_an_odd_offset_of_a_buffer(cfg):
    c, p = valid(*cfg)
    for lead in (1, 2, 3, 5):
        buf = torch.zeros(lead + p.numel() + 3, dtype=torch.uint8)
        buf[lead:lead + p.numel()] = p
        assert torch.equal(c.decode(buf[lead:lead + p.numel()]), c.decode(p))


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_strided_payload_view(cfg):
    """A 1-D uint8 view with stride 2 is a valid payload: it decodes as the contiguous one
    (its sections cannot be viewed in place as float32 or int32)."""
    c, p = valid(*cfg)
    buf = torch.zeros(2 * p.numel(), dtype=torch.uint8)
    buf[::2] = p
    out = decodes_or_rejects(c, buf[::2])
    assert out is not None and torch.equal(out, c.decode(p))


# ---------------------------------------------------------------- malformed payloads: flipped bytes


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_every_single_byte_flip(cfg):
    """Exhaustive single flips (xor 0x01, 0x80, 0xFF) of a small payload."""
    c, p = valid(*cfg)
    b = raw(p)
    for pos in range(len(b)):
        for xor in (0x01, 0x80, 0xFF):
            m = bytearray(b)
            m[pos] ^= xor
            out = decodes_or_rejects(c, tensor(m))
            if pos >= 56 and must_decode(cfg[0], m):
                assert out is not None
            elif pos >= 56 and dense(cfg[0]):
                assert out is None
