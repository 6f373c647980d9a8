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

pytest.importorskip("numba")

KERNELS = [name for name, cls in COMPRESSORS.items() if cls.has_numba]
CASES = [pytest.param(name, params, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}")
         for name in KERNELS for params in COMPRESSORS[name].examples]


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    cases = {f"n{n}": torch.randn(n, generator=g) for n in (0, 1, 2, 7, 8, 9, 15, 17, 1023, 1025, 4099)}
    cases.update({
        "3x5": torch.randn(3, 5, generator=g),
        "8x16": torch.randn(8, 16, generator=g) * 1e-3,
        "33x31": torch.randn(33, 31, generator=g),
        "2x3x4x5": torch.randn(2, 3, 4, 5, generator=g),
        "0x4": torch.randn(0, 4, generator=g),
        "4x1": torch.randn(4, 1, generator=g),
        "transposed": torch.randn(17, 40, generator=g).t(),
        "strided": torch.randn(300, generator=g)[::3],
        "zeros": torch.zeros(64),
        "signed_zeros": torch.tensor([0.0, -0.0] * 40),
        "denormals": torch.randn(100, generator=g) * 1e-40,
        "huge": torch.randn(100, generator=g) * 3e38,
        "ties": torch.tensor([1.0, -1.0, 0.5, -0.5] * 30),
        "ones_and_tiny": torch.cat([torch.ones(5), torch.full((60,), 1e-7), -torch.ones(3)]),
        "inf": torch.tensor([1.0, float("inf"), -2.0, 3.0] * 10),
        "neg_inf": torch.tensor([1.0, -float("inf"), -2.0, 3.0] * 10),
        "nan": torch.tensor([1.0, float("nan"), -2.0, 3.0] * 10),
        "nan_inf": torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, -0.0] * 9),
    })
    return cases


INPUTS = _inputs()


def _canonical(values: np.ndarray) -> np.ndarray:
    """uint32 words with every NaN pattern replaced by one."""
    words = values.view(np.uint32).copy()
    nan = (words & 0x7F800000) == 0x7F800000
    nan &= (words & 0x007FFFFF) != 0
    words[nan] = 0x7FC00000
    return words


def _same_payload(a: torch.Tensor, b: torch.Tensor, body_start: int) -> None:
    """Byte-identical, but for the bits of NaNs in the body's aligned float32 words."""
    assert a.numel() == b.numel()
    x, y = a.numpy(), b.numpy()
    assert bytes(x[:body_start]) == bytes(y[:body_start])
    end = body_start + (x.size - body_start) // 4 * 4
    wx, wy = x[body_start:end].view(np.uint32), y[body_start:end].view(np.uint32)
    nan = lambda w: ((w & 0x7F800000) == 0x7F800000) & ((w & 0x007FFFFF) != 0)  # noqa: E731
    both = nan(wx) & nan(wy)
    differ = np.flatnonzero((wx != wy) & ~both)
    assert differ.size == 0, f"words differ at body offsets {(differ[:8] * 4).tolist()}"
    assert bytes(x[end:]) == bytes(y[end:])


def _same_values(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
    ca, cb = _canonical(a.contiguous().numpy().reshape(-1)), _canonical(b.contiguous().numpy().reshape(-1))
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
            _same_payload(expected, got, start)
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


def test_impl_is_checked():
    with pytest.raises(ValueError, match="impl must be one of auto, reference, numba, cuda"):
        compressors.get("qsgd", impl="fast")
    with pytest.raises(ValueError, match="fp16 has no Numba kernels"):
        compressors.get("fp16", impl="numba")
    assert compressors.get("fp16").uses_numba("cpu") is False
    for name in KERNELS:
        assert compressors.get(name).uses_numba("cpu") is True  # auto: Numba on the CPU
        assert compressors.get(name, impl="reference").uses_numba("cpu") is False


def test_decode_add_needs_out():
    codec = compressors.get(KERNELS[0]) if KERNELS else compressors.get("fp16")
    with pytest.raises(ValueError, match="adds into out"):
        codec.decode(codec.encode(torch.ones(4)), add=True)




@pytest.mark.slow
def test_dynamic8_codes_every_float32_in_0_1_as_the_binary_search_does():
    """The one-compare bin lookup against the definition (the nearest table entry, by binary search
    over the midpoints), for all 1,065,353,217 float32 values in [0, 1], with a maximum of 1."""
    from compressors.core import dynamic_tree

    codec = compressors.get("dynamic8", impl="numba")
    tables = dynamic_tree.tables("cpu")
    last = 0x3F800000  # the bits of 1.0
    chunk = 1 << 26
    for first in range(0, last + 1, chunk):
        bits = torch.arange(first, min(first + chunk, last + 1), dtype=torch.int32)
        a = torch.cat([bits.view(torch.float32), torch.ones(1)])  # the 1.0 makes the maximum 1
        codes = codec.encode(a)[-a.numel():][:-1]
        expected = tables.code_of_position[torch.searchsorted(tables.bounds, a[:-1], right=True)]
        assert torch.equal(codes, expected), f"first differing float at bits {first + int((codes != expected).nonzero()[0])}"


def test_the_impl_setting_is_checked_against_the_compressor(tmp_path):
    from orchestrator.study.sweep_file import ConfigError, load_sweep

    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload: {epochs: 2, target_accuracy: 0.9, impl: numba}\nbaselines: false\n"
                    "sweep: {compressor: [onebit, fp16]}\n")
    with pytest.raises(ConfigError, match="fp16 has no Numba kernels"):
        load_sweep(path)
    path.write_text(path.read_text().replace("[onebit, fp16]", "[onebit, qsgd]").replace("impl: numba", "impl: reference"))
    assert {t["impl"] for t in load_sweep(path).trials} == {"reference"}
    path.write_text(path.read_text().replace("impl: reference", "impl: cuda"))
    with pytest.raises(ConfigError, match="cuda kernels run on GPUs: set use_gpu: true"):
        load_sweep(path)
    path.write_text(path.read_text().replace("[onebit, qsgd]", "[onebit, fp16]") + "cluster: {use_gpu: true}\n")
    with pytest.raises(ConfigError, match="fp16 has no CUDA kernels"):
        load_sweep(path)


def test_the_cuda_impl_is_checked_where_it_cannot_run():
    """Without CuPy, impl 'cuda' names the extras; with it, on a CPU tensor it names the device; auto
    never takes the CUDA kernels for CPU tensors."""
    from compressors.core.base import cupy_installed

    if not cupy_installed():
        with pytest.raises(ValueError, match=r"impl 'cuda' needs CuPy \(pip install 'lowprec\[cuda12\]'"):
            compressors.get("qsgd", impl="cuda")
    with pytest.raises(ValueError, match="fp16 has no CUDA kernels"):
        compressors.get("fp16", impl="cuda")
    assert compressors.get("qsgd").uses_cuda("cpu") is False
    assert compressors.get("qsgd", impl="reference").uses_cuda("cuda") is False
