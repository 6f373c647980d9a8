"""The CUDA kernels on a GPU (marked gpu: skipped without CUDA and CuPy): ``impl="cuda"`` on CUDA
tensors against ``impl="numba"`` on the CPU, byte for byte and bit for bit.

Fresh random inputs every run (the seed is in a failure's message) of many sizes — 1, odd, 2**k +- 1
up to ``LOWPREC_GPU_MAX_NUMEL`` (default 2**26; compute-sanitizer runs take less) — and
the Numba tests' adversarial values (``tests.helpers.kernel_inputs``: zeros, ties, NaN, Inf, denormals); encode's out
buffer and decode's out poisoned before each run; mutated payloads refused alike; the compiled
programs' errors name the program. benchmarks/gpu_check.py runs this file, and compute-sanitizer
over its payload tests, among its steps.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch

import compressors
from compressors import COMPRESSORS, PayloadError
from compressors.core import wire
from tests.helpers import canonical, kernel_inputs, same_payload

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cupy")
pytest.importorskip("numba")

INPUTS = kernel_inputs()
MAX_NUMEL = int(os.environ.get("LOWPREC_GPU_MAX_NUMEL", str(2 ** 26)))
PROGRAMS = [name for name, cls in COMPRESSORS.items() if cls.cuda_program is not None]
CASES = [pytest.param(name, params, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}")
         for name in PROGRAMS for params in COMPRESSORS[name].examples]
SIZES = sorted({n for n in (1, 3, 31, 33, 1023, 1025, 4097, 65535, 65537, 2 ** 20 - 1, 2 ** 20 + 1, 2 ** 22 + 3,
                            2 ** 24, 2 ** 26) if n <= MAX_NUMEL})
SEED = int.from_bytes(os.urandom(4), "little")


@functools.cache  # the same for every case (the seed is the run's): made once, not per case
def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    cases = dict(INPUTS)
    for n in SIZES:
        cases[f"n{n}"] = torch.randn(n, generator=g) * float(torch.empty(1).uniform_(-3, 3, generator=g).exp())
    cases["2d_odd"] = torch.randn(1031, 257, generator=g)
    return cases


def _bits_equal(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Identical bits, compared on the GPU (a comparison on the CPU would take most of the run at 2**26)."""
    a, b = got.contiguous().reshape(-1), expected.to(got.device).contiguous().reshape(-1)
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _check_same(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if _bits_equal(got, expected):
        return
    # NaN payload bits may differ; anything else is a failure, located on the CPU.
    a, b = canonical(got.cpu().reshape(-1).numpy()), canonical(expected.cpu().reshape(-1).numpy())
    differ = np.flatnonzero(a != b)
    assert differ.size == 0, f"{what} (seed {SEED}): {differ.size} differ, first at {differ[:6].tolist()}"


def _check_payload(got: torch.Tensor, expected: torch.Tensor, start: int, what: str) -> None:
    """The kernels tests' payload comparison (bytes, NaN bits aside), the case and seed named."""
    if _bits_equal(got, expected):
        return
    try:
        same_payload(got.cpu(), expected, start)
    except AssertionError as error:
        raise AssertionError(f"{what} (seed {SEED}): {error}") from None


@pytest.mark.parametrize("name, params", CASES)
def test_the_same_payloads_and_decodes_as_numba(name, params):
    cpu = compressors.get(name, impl="numba", **params)
    gpu = compressors.get(name, impl="cuda", **params)
    for label, x in _inputs().items():
        what = f"{name} {params} input {label}"
        expected = cpu.encode(x, step=3, rank=1, stream=5)
        start = wire.read_header(expected).nbytes
        out = torch.full((expected.numel(),), 0xA5, dtype=torch.uint8, device="cuda")  # poisoned
        xg = x.cuda()
        _check_payload(gpu.encode(xg, step=3, rank=1, stream=5, out=out), expected, start, what)
        if x.numel() > 1:  # at an address 4 bytes off the allocation's (sra's chunks are such views)
            room = torch.empty(x.numel() + 1, device="cuda")
            room[1:].copy_(xg.reshape(-1))
            _check_payload(gpu.encode(room[1:].view(x.shape), step=3, rank=1, stream=5), expected, start,
                           what + " (unaligned)")
        decoded = cpu.decode(expected)
        into = torch.full(x.shape, float("nan"), device="cuda")
        into.view(torch.int32).fill_(-5921371)  # 0xFFA5A5A5: a NaN no decode makes
        _check_same(gpu.decode(expected.cuda(), out=into), decoded, what + " decode")
        base = torch.linspace(-2.0, 2.0, x.numel()).reshape(x.shape)
        summed = base.clone()
        cpu.decode(expected, out=summed, add=True)
        on_gpu = base.cuda()
        gpu.decode(expected.cuda(), out=on_gpu, add=True)
        _check_same(on_gpu, summed, what + " decode add")
        shifted = torch.cat([torch.zeros(1, dtype=torch.uint8), expected]).cuda()[1:]  # an odd address
        _check_same(gpu.decode(shifted), decoded, what + " decode (odd address)")


@pytest.mark.parametrize("name, params", CASES)
def test_a_random_payload_is_refused_or_decoded_alike(name, params):
    cpu = compressors.get(name, impl="numba", **params)
    gpu = compressors.get(name, impl="cuda", **params)
    g = torch.Generator().manual_seed(SEED)
    payload = cpu.encode(torch.randn(33, 31, generator=g))
    start = wire.read_header(payload).nbytes
    for trial in range(40):
        bad = payload.clone()
        where = torch.randint(start, payload.numel(), (1 + trial % 4,), generator=g)
        bad[where] = torch.randint(0, 256, (where.numel(),), generator=g, dtype=torch.uint8)
        out = torch.full((33, 31), 3.0, device="cuda")
        try:
            expected = cpu.decode(bad)
        except PayloadError as error:
            with pytest.raises(PayloadError) as got:
                gpu.decode(bad.cuda(), out=out)
            assert str(got.value) == str(error)
            assert bool((out == 3.0).all()), "a refused payload wrote into out"
            continue
        _check_same(gpu.decode(bad.cuda(), out=out), expected, f"mutation {trial}")


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_side_stream_orders_scratch_checks_and_kernels(name):
    """Under a non-blocking side stream (DDP's hooks run on such streams), scratch zeroing, the decode
    checks' reads and the kernels stay ordered: the same bytes, and a refused payload stays refused."""
    cpu, gpu = compressors.get(name, impl="numba"), compressors.get(name, impl="cuda")
    x = torch.randn(1031, 257)
    expected = cpu.encode(x, step=1)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        xg = x.cuda(non_blocking=True)
        got = gpu.encode(xg, step=1)
        decoded = gpu.decode(got)
    side.synchronize()
    _check_payload(got, expected, wire.read_header(expected).nbytes, f"{name} on a side stream")
    _check_same(decoded, cpu.decode(expected), f"{name} decode on a side stream")


def test_auto_takes_the_cuda_kernels_for_cuda_tensors():
    codec = compressors.get("dynamic8")
    assert codec.uses_cuda("cuda") and not codec.uses_cuda("cpu")
    with pytest.raises(ValueError, match="impl 'cuda' runs on CUDA tensors"):
        compressors.get("dynamic8", impl="cuda").encode(torch.ones(4))


def test_a_program_that_fails_to_compile_is_named(monkeypatch):
    from compressors.cuda import build, launch

    monkeypatch.setattr(build, "source", lambda method: "extern \"C\" __global__ void k(int* x) { x[0] = y; }")
    launch._compiled.cache_clear()
    try:
        with pytest.raises(build.KernelCompileError, match="CUDA program scaled8.cu .* failed to compile"):
            launch._compiled("scaled8", 0)
    finally:
        launch._compiled.cache_clear()
