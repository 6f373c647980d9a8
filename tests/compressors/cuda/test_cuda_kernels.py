"""The CUDA kernels (compressors/cuda) against the Numba kernels, on the CPU through the host
emulator (cuda_host, beside this file): the same payload bytes, the same decoded bits, decode-add's same sums.

Every compressor with a ``cuda_program``, every example parameter set; inputs of many sizes and
values (the Numba tests' ``kernel_inputs``, plus 2**k +- 1 and larger random ones), the input at an address
that is 4 bytes off a 16-byte boundary as well as aligned, payload bodies and decode outputs
poisoned before each run, bodies to decode at unaligned addresses, mutated payloads refused (out
left untouched) or decoded alike. The GPU itself: test_cuda_gpu.py.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing

import numpy as np
import pytest
import torch

import compressors
from compressors import COMPRESSORS, PayloadError
from compressors.core import wire
from tests.compressors.cuda import cuda_host
from tests.helpers import canonical, kernel_inputs, same_payload

# Exhaustive (every example, every input, through an emulator): slow, out of the quick check.
pytestmark = pytest.mark.slow
pytest.importorskip("numba")
if cuda_host.available():
    pytest.skip(f"the CUDA host emulator cannot run: {cuda_host.available()}", allow_module_level=True)

PROGRAMS = [name for name, cls in COMPRESSORS.items() if cls.cuda_program is not None]
CASES = [pytest.param(name, params, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}")
         for name in PROGRAMS for params in COMPRESSORS[name].examples]
POISON = 0xA5
INPUTS = kernel_inputs()


def _more_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(23)
    cases = {f"n{n}": torch.randn(n, generator=g) * 3 for n in (31, 32, 33, 255, 257, 4095, 4097, 65535, 65537)}
    cases["scales"] = torch.randn(5000, generator=g) * torch.logspace(-30, 30, 5000)
    cases["ties_big"] = torch.tensor([0.25, -0.25, 1.0, 0.0] * 3000)
    return cases


ALL_INPUTS = {**INPUTS, **_more_inputs()}


def _numba(name: str, params: dict) -> compressors.Compressor:
    return compressors.get(name, impl="numba", **params)


def _host_encode(codec, x: torch.Tensor, *, offset: int, absmax: float | None = None) -> np.ndarray:
    """codec's payload with the body made by its CUDA kernels (header: the Numba payload's)."""
    k = cuda_host.host_kernels(codec.cuda_program)
    shape = tuple(x.shape)
    values = x.reshape(-1).to(torch.float32).numpy()
    room = np.empty(values.size + 8, np.float32)  # numpy aligns to 16: offset 1 is 4 bytes off
    flat = room[offset:offset + values.size]
    flat[:] = values
    size = codec.payload_nbytes(shape)
    start = size - codec._body_nbytes(shape)
    payload = np.full(size, POISON, np.uint8)
    extra = {} if absmax is None else {"absmax": absmax}
    payload[:start] = codec.encode(x, step=3, rank=1, stream=5, **extra).numpy()[:start]
    codec._encode_cuda(k, flat, payload[start:], shape, step=3, rank=1, stream=5, **extra)
    return payload


def _host_decode(codec, payload: np.ndarray, out: np.ndarray, add: bool, shift: int) -> None:
    header = wire.read_header(torch.from_numpy(payload))
    room = np.zeros(payload.size + 16, np.uint8)
    moved = room[shift:shift + payload.size]
    moved[:] = payload
    k = cuda_host.host_kernels(codec.cuda_program)
    codec._decode_cuda(k, moved[header.nbytes:], header.shape, out, add)


def _same_bits(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    differ = np.flatnonzero(canonical(got) != canonical(expected))
    assert differ.size == 0, f"{what}: {differ.size} values differ, first at {differ[:6].tolist()}: " \
                             f"{got[differ[:3]].tolist()} vs {expected[differ[:3]].tolist()}"


def _same_body(got: np.ndarray, expected: np.ndarray, start: int, what: str) -> None:
    """The kernels tests' payload comparison (bytes, NaN bits aside), the case named."""
    try:
        same_payload(torch.from_numpy(got), torch.from_numpy(expected), start)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}") from None


def _same_payloads_and_decodes(name: str, params: dict) -> None:
    """The CUDA kernels' payload of every input (aligned and 4 bytes off), their decode (into a poisoned
    output) and decode-add (at shifted payload addresses) against Numba's, for one parameter set."""
    codec = _numba(name, params)
    rng = np.random.default_rng(7)
    for label, x in ALL_INPUTS.items():
        expected = codec.encode(x, step=3, rank=1, stream=5).numpy()
        start = expected.size - codec._body_nbytes(tuple(x.shape))
        for offset in (0, 1):
            what = f"input {label}, input offset {4 * offset} bytes"
            got = _host_encode(codec, x, offset=offset)
            _same_body(got, expected, start, what)
        decoded = codec.decode(torch.from_numpy(expected)).reshape(-1).numpy()
        out = np.full(decoded.size, np.nan, np.float32)
        out.view(np.uint32)[:] = 0xFFA5A5A5  # poisoned: a NaN no decode makes
        _host_decode(codec, expected, out, False, shift=int(rng.integers(0, 4)))
        _same_bits(out, decoded, f"input {label}: decode")
        base = torch.linspace(-2.0, 2.0, decoded.size)
        summed = base.clone()
        codec.decode(torch.from_numpy(expected), out=summed.view(x.shape), add=True)
        into = base.numpy().copy()
        _host_decode(codec, expected, into, True, shift=int(rng.integers(0, 4)))
        _same_bits(into, summed.numpy(), f"input {label}: decode add")


def _verdict(name: str, params: dict) -> str | None:
    """``_same_payloads_and_decodes`` in a helper process: None, or the failed assertion's message."""
    try:
        _same_payloads_and_decodes(name, params)
    except AssertionError as error:
        return str(error) or f"{name} {params}: assertion failed"
    return None


def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def helper_process(request):
    """The emulator is one OS thread with global state, so two cases run at once only in two processes:
    the second half of the selected cases of test_the_same_payloads_and_decodes_as_numba (whole codecs,
    each codec's kernels loaded by one process) is checked in one spawned process while this one checks
    the first half (a case's callspec id -> the helper's future verdict)."""
    selected = [item for item in request.session.items if getattr(item, "module", None) is request.module
                and item.originalname == "test_the_same_payloads_and_decodes_as_numba"]
    if len(selected) < 8:  # not worth a process's start-up
        yield {}
        return
    for program in sorted({COMPRESSORS[item.callspec.params["name"]].cuda_program for item in selected}):
        cuda_host.host_kernels(program)  # compiled here first: the two processes never build one library at once
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_one_thread)
    try:
        yield {item.callspec.id: pool.submit(_verdict, item.callspec.params["name"], item.callspec.params["params"])
               for item in selected[len(selected) // 2:]}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name, params", CASES)
def test_the_same_payloads_and_decodes_as_numba(name, params, helper_process, request):
    verdict = helper_process.get(request.node.callspec.id)
    if verdict is None:
        _same_payloads_and_decodes(name, params)
    else:
        failure = verdict.result()
        assert failure is None, failure


def _paths_beyond_the_examples() -> list:
    """Parameters and inputs whose kernel paths the examples with ALL_INPUTS never take (the
    kernels pick a path by bucket length and count): (compressor, params, input)."""
    g = torch.Generator().manual_seed(31)
    wide = torch.randn(70_000, generator=g)
    octaves = torch.randn(20_000, generator=g) * torch.logspace(-35, 35, 20_000)
    special = torch.randn(64, 300, generator=g)
    special[5, 7], special[5, 100], special[5, 200], special[9, 3] = float("nan"), float("inf"), -float("inf"), float("nan")
    cases = [
        ("dynamic8", {"block": 1500}, torch.randn(100_000, generator=g)),  # >= 64 blocks of > 1024 entries
        ("linear8", {"block": 1025}, wide),
        ("maxmin", {"bucket": 4096}, wide),  # long buckets, a multiple of 8, few of them
        ("maxmin", {"bucket": 1032}, wide),  # many long buckets, a multiple of 8
        ("maxmin", {"bucket": 1031, "bits": 3}, wide),  # long buckets, not a multiple of 8
        ("qsgd", {"bucket": 4096, "norm": "l2"}, wide),  # buckets over a block's tile
        ("qsgd", {"bucket": 5000, "bits": 3}, torch.cat([wide[:20_000], torch.tensor([float("nan")])])),
        ("scaledsign", {}, torch.randn(1_100_000, generator=g)),  # more than 256 runs of 4096 leaves
        ("signsgd", {}, torch.cat([torch.zeros(1_050_000), torch.tensor([float("nan")])])),
        ("onebit", {"grouping": "row"}, torch.randn(3, 4100, generator=g)),  # rows over a tile
        ("onebit", {"grouping": "row"}, torch.full((4, 64), -0.0)),  # a power-of-two row of -0.0: mean -0.0
        ("onebit", {}, torch.randn(4100, 3, generator=g)),
        ("randomk", {"pi": 0.37, "seed": 660}, torch.randn(40_000, generator=g)),  # indices walked past n
        ("randomk", {"pi": 1.0}, torch.full((5,), -0.0)),  # every entry, a walk on 16 values
        ("adaptive", {}, octaves),  # one group whose partial sums round: the serial chain
        ("adaptive", {"pi": 0.1, "grouping": "row"}, octaves.view(20, 1000)),
        ("adaptive", {"threshold": "sampled"}, special),  # NaN and +-inf inside groups
        ("adaptive", {"threshold": "sampled", "grouping": "row"}, special),
        ("topk", {"pi": 0.05}, octaves),
    ]
    return [pytest.param(name, params, x, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}"
                         f"-{'x'.join(map(str, x.shape))}") for name, params, x in cases]


@pytest.mark.parametrize("name, params, x", _paths_beyond_the_examples())
def test_paths_beyond_the_examples_give_numbas_bytes(name, params, x):
    codec = _numba(name, params)
    expected = codec.encode(x, step=3, rank=1, stream=5).numpy()
    start = expected.size - codec._body_nbytes(tuple(x.shape))
    for offset in (0, 1):
        _same_body(_host_encode(codec, x, offset=offset), expected, start, f"input offset {4 * offset} bytes")
    decoded = codec.decode(torch.from_numpy(expected)).reshape(-1).numpy()
    out = np.empty(decoded.size, np.float32)
    out.view(np.uint32)[:] = 0xFFA5A5A5
    _host_decode(codec, expected, out, False, shift=3)
    _same_bits(out, decoded, "decode")
    base = torch.linspace(-2.0, 2.0, decoded.size)
    summed = base.clone()
    codec.decode(torch.from_numpy(expected), out=summed.view(x.shape), add=True)
    into = base.numpy().copy()
    _host_decode(codec, expected, into, True, shift=0)
    _same_bits(into, summed.numpy(), "decode add")


@pytest.mark.parametrize("name, params", [c for c in CASES if COMPRESSORS[c.values[0]](**c.values[1]).scales_by_tensor])
def test_the_whole_tensors_maximum_is_the_floor_alike(name, params):
    codec = _numba(name, params)
    x = ALL_INPUTS["n1025"]
    for floor in (0.0, 0.5, 100.0, float("nan"), float("inf")):
        expected = codec.encode(x, absmax=floor).numpy()
        start = expected.size - codec._body_nbytes(tuple(x.shape))
        _same_body(_host_encode(codec, x, offset=1, absmax=floor), expected, start, f"absmax {floor}")


@pytest.mark.parametrize("name, params", CASES)
def test_a_random_payload_is_refused_or_decoded_alike(name, params):
    """Mutated bodies: the CUDA kernels raise PayloadError with Numba's message exactly where Numba
    does, leaving out untouched, and otherwise decode the same values."""
    codec = _numba(name, params)
    g = torch.Generator().manual_seed(5)
    x = INPUTS["33x31"]
    payload = codec.encode(x).numpy()
    start = wire.read_header(torch.from_numpy(payload)).nbytes
    for trial in range(40):
        bad = payload.copy()
        where = torch.randint(start, payload.size, (1 + trial % 4,), generator=g).numpy()
        bad[where] = torch.randint(0, 256, (where.size,), generator=g, dtype=torch.uint8).numpy()
        out = np.full(x.numel(), 3.0, np.float32)
        try:
            expected = codec.decode(torch.from_numpy(bad)).reshape(-1).numpy()
        except PayloadError as error:
            with pytest.raises(PayloadError) as got:
                _host_decode(codec, bad, out, False, shift=trial % 4)
            assert str(got.value) == str(error)
            assert (out == 3.0).all(), "a refused payload wrote into out"
            continue
        _host_decode(codec, bad, out, False, shift=trial % 4)
        _same_bits(out, expected, f"mutation {trial}")


def test_every_compressor_with_numba_kernels_has_cuda_kernels():
    assert PROGRAMS == [name for name, cls in COMPRESSORS.items() if cls.has_numba]


@pytest.mark.parametrize("name", PROGRAMS)
def test_encode_and_decode_dispatch_to_the_cuda_kernels(name, monkeypatch):
    """base.Compressor's CUDA branch end to end (header, out buffers, shapes, add), with the host
    emulator standing in for CuPy: every codec on CPU tensors as if they were CUDA tensors."""
    from compressors.core.base import Compressor

    reference = _numba(name, {})
    codec = compressors.get(name, impl="reference")
    monkeypatch.setattr(Compressor, "uses_cuda", lambda self, device: True)
    monkeypatch.setattr(Compressor, "_cuda_kernels", lambda self, device: cuda_host.host_kernels(self.cuda_program))
    x = INPUTS["33x31"]
    expected = reference.encode(x, step=2, rank=1, stream=4)
    out = torch.full_like(expected, POISON)
    assert codec.encode(x, step=2, rank=1, stream=4, out=out).data_ptr() == out.data_ptr()
    start = wire.read_header(expected).nbytes
    _same_body(out.numpy(), expected.numpy(), start, "encode into out")
    _same_body(codec.encode(x, step=2, rank=1, stream=4).numpy(), expected.numpy(), start, "encode")
    decoded = codec.decode(expected)
    assert decoded.shape == x.shape
    _same_bits(decoded.reshape(-1).numpy(), reference.decode(expected).reshape(-1).numpy(), "decode")
    total = torch.ones(x.shape)
    codec.decode(expected, out=total, add=True)
    _same_bits(total.reshape(-1).numpy(), (1.0 + reference.decode(expected)).reshape(-1).numpy(), "decode add")


@pytest.mark.parametrize("element", ["e4m3", "e2m1", "int8"])
def test_mx_rounds_an_entry_far_below_its_scale_up_on_a_draw_of_zero_alike(element, monkeypatch):
    # The case of tests/compressors/codecs/test_mx.py: an entry whose product with its block's scale
    # underflows float32, and the draw 0 at its index.
    from compressors.core import rng

    index = 5
    key = (index * rng.GOLDEN) & 0xFFFFFFFF
    monkeypatch.setattr(rng, "stream_key", lambda *counters: key)
    x = torch.zeros(32)
    x[0], x[index] = 2.0**100, 2.0**-60
    codec = _numba("mx", {"element": element, "rounding": "stochastic"})
    expected = codec.encode(x, step=1).numpy()
    start = expected.size - codec._body_nbytes(tuple(x.shape))
    _same_body(_host_encode(codec, x, offset=0), expected, start, "draw 0")
