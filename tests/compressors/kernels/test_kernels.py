"""The Numba kernels against the torch reference: the same payload bytes, the same decoded bits.

For every compressor with kernels, every example parameter set and inputs of
many shapes and values (0, 1, odd sizes, 2**k +- 1, non-contiguous, +-0,
denormals, huge values, NaN and Inf): ``encode`` gives identical payloads,
``decode`` identical float32 bits, ``decode(add=True)`` identical sums. Only a
NaN's bits may differ (its sign and payload: implementations legitimately
differ there), so NaNs are made canonical before comparing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors
from compressors import COMPRESSORS, PayloadError
from compressors.core import wire
from tests.helpers import canonical, kernel_inputs, same_payload

pytest.importorskip("numba")

KERNELS = [name for name, cls in COMPRESSORS.items() if cls.has_numba]
CASES = [pytest.param(name, params, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}")
         for name in KERNELS for params in COMPRESSORS[name].examples]


INPUTS = kernel_inputs()


def _same_values(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
    ca, cb = canonical(a.contiguous().numpy().reshape(-1)), canonical(b.contiguous().numpy().reshape(-1))
    differ = np.flatnonzero(ca != cb)
    assert differ.size == 0, (f"{differ.size} values differ, first at {differ[:4].tolist()}: "
                              f"{a.reshape(-1)[differ[:4]].tolist()} vs {b.reshape(-1)[differ[:4]].tolist()}")


def _pair(name, params):
    return compressors.get(name, impl="reference", **params), compressors.get(name, impl="numba", **params)


@pytest.mark.parametrize("name, params", CASES)
def test_the_same_payloads_and_decodes(name, params):
    reference, kernel = _pair(name, params)
    for label, x in INPUTS.items():
        try:
            expected = reference.encode(x, step=3, rank=1, stream=5)
        except Exception as error:  # an input the method refuses is refused by both, alike
            with pytest.raises(type(error)):
                kernel.encode(x, step=3, rank=1, stream=5)
            continue
        got = kernel.encode(x, step=3, rank=1, stream=5)
        start = wire.read_header(expected).nbytes
        try:
            same_payload(expected, got, start)
            _same_values(reference.decode(expected), kernel.decode(expected))
            base = torch.linspace(-2.0, 2.0, x.numel()).reshape(x.shape)
            summed = base.clone()
            kernel.decode(expected, out=summed, add=True)
            _same_values(base + reference.decode(expected), summed)
            into = torch.full(x.shape, 7.0)
            assert kernel.decode(expected, out=into).data_ptr() == into.data_ptr()
            _same_values(reference.decode(expected), into)
        except AssertionError as error:
            raise AssertionError(f"input {label}: {error}") from None


@pytest.mark.parametrize("name, params", CASES)
def test_encode_into_a_reused_buffer(name, params):
    _, kernel = _pair(name, params)
    x = INPUTS["33x31"]
    out = torch.empty(kernel.payload_nbytes(x.shape), dtype=torch.uint8)
    first = kernel.encode(x, out=out)
    assert first.data_ptr() == out.data_ptr()
    assert torch.equal(kernel.encode(x * 2, out=out), kernel.encode(x * 2))
    with pytest.raises(ValueError, match="out must be"):
        kernel.encode(x, out=torch.empty(3, dtype=torch.uint8))


@pytest.mark.parametrize("name, params", CASES)
def test_a_random_payload_is_refused_or_decoded_alike(name, params):
    """Mutated bodies: each implementation raises PayloadError exactly when the other does, and
    otherwise decodes the same values."""
    reference, kernel = _pair(name, params)
    g = torch.Generator().manual_seed(5)
    x = INPUTS["33x31"]
    payload = reference.encode(x)
    start = wire.read_header(payload).nbytes
    for trial in range(40):
        bad = payload.clone()
        where = torch.randint(start, payload.numel(), (1 + trial % 4,), generator=g)
        bad[where] = torch.randint(0, 256, (where.numel(),), generator=g, dtype=torch.uint8)
        try:
            expected = reference.decode(bad)
        except PayloadError:
            with pytest.raises(PayloadError):
                kernel.decode(bad)
            continue
        _same_values(expected, kernel.decode(bad))


@pytest.mark.parametrize("name, params", CASES)
def test_an_unaligned_payload_decodes(name, params):
    reference, kernel = _pair(name, params)
    payload = reference.encode(INPUTS["8x16"])
    shifted = torch.cat([torch.zeros(1, dtype=torch.uint8), payload])[1:]  # at an odd address
    _same_values(reference.decode(payload), kernel.decode(shifted))


@pytest.mark.slow  # about 17 million float32s through the kernel
def test_dynamic8_codes_float32_in_0_1_as_the_binary_search_does():
    """The one-compare bin lookup against the definition (the nearest table entry, by binary search
    over the midpoints), with a maximum of 1: every float32 within 64 ulps of each midpoint, where a
    lookup can go wrong, and every 61st float32 of the 1,065,353,217 in [0, 1] between them."""
    from compressors.core import dynamic_tree

    codec = compressors.get("dynamic8", impl="numba")
    tables = dynamic_tree.tables("cpu")
    last = 0x3F800000  # the bits of 1.0
    near = (tables.bounds.view(torch.int32).long()[:, None] + torch.arange(-64, 65)).flatten()
    bits = torch.cat([torch.arange(0, last + 1, 61), near]).clamp(0, last).unique().to(torch.int32)
    a = torch.cat([bits.view(torch.float32), torch.ones(1)])  # the 1.0 makes the maximum 1
    codes = codec.encode(a)[-a.numel():][:-1]
    expected = tables.code_of_position[torch.searchsorted(tables.bounds, a[:-1], right=True)]
    assert torch.equal(codes, expected), f"first differing float at bits {int(bits[(codes != expected).nonzero()[0]])}"
