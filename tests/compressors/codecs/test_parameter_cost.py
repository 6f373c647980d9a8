"""A codec's cost follows its tensor, never a parameter's size: encode and decode of a 1,000-element
tensor with each parameter that could reach past the tensor (fp8's, dynamic8's and linear8's ``block``,
qsgd's, terngrad's and maxmin's ``bucket``, dgc's ``ramp_steps``) at its largest allowed value, and
every share-like one (the sparse methods' ``pi``, terngrad's ``clip``) at its own, on every
implementation this machine has: no buffer beyond 64 bytes an entry (and the kernels' fixed scratch), no
torch operation more than with that parameter equal to the tensor's length, and the kernels' bytes
(Numba's, and the CUDA programs' through the host emulator) the reference's.

Torch's buffers are checked before they are made: a dispatch mode (``SizeGuard``) computes every
operation's outputs on the meta device first and refuses one over the limit, so a regression fails
at once instead of asking for gigabytes. NumPy's and Numba's buffers (the counter hash's draws, the
kernels' scratch) come from Python's allocator, which tracemalloc counts.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import compressors as C
from compressors import COMPRESSORS
from compressors.core import wire
from compressors.core.base import numba_installed
from tests.helpers import canonical, kernel_inputs, same_payload

N = 1000
PER_ENTRY = 64  # bytes of one buffer per entry of the tensor: the references' largest is 16 (adaptive)
# The kernels' fixed scratch, the same for every tensor and parameter: the radix select's histogram of
# 2**16 int32 bins (topk, dgc, randomk, adaptive), a transpose's 64 x 64 tile.
FIXED = 512 * 1024


class Refused(AssertionError):
    pass


class SizeGuard(TorchDispatchMode):
    """Counts the torch operations run under it and refuses, before it is made, any output larger than
    ``limit`` bytes (an operation the meta device cannot run, one whose output depends on the data,
    runs first and is checked after)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.ops = 0
        self.largest = 0

    def _check(self, func, outputs, before: bool) -> None:
        for t in tree_flatten(outputs)[0]:
            if isinstance(t, torch.Tensor):
                nbytes = t.numel() * t.element_size()
                self.largest = max(self.largest, nbytes)
                if nbytes > self.limit:
                    raise Refused(f"{func} {'would make' if before else 'made'} a buffer of {nbytes} bytes "
                                  f"(limit {self.limit})")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1

        def meta(a):
            if isinstance(a, torch.Tensor):
                return a.to("meta")
            return torch.device("meta") if isinstance(a, torch.device) else a

        try:
            meta_kwargs = tree_map(meta, kwargs)
            if "device" in meta_kwargs:
                meta_kwargs["device"] = torch.device("meta")
            shapes = func(*tree_map(meta, args), **meta_kwargs)
        except Exception:  # no meta kernel, or data-dependent output (nonzero, item)
            shapes = None
        if shapes is not None:
            self._check(func, shapes, before=True)
        out = func(*args, **kwargs)
        if shapes is None:
            self._check(func, out, before=False)
        return out


def _grows(p) -> bool:
    """A parameter whose largest value reaches past the tensor (a block, a bucket, a step count), or a
    bounded float (a share, a clip)."""
    return p.high is not None and ((p.kind is int and p.high > N) or p.kind is float)


def _cases() -> list:
    """Per codec, each setting of its examples' choices (format, norm, rounding, grouping...) with every
    growing parameter at its largest value (where the choices allow it: scope 'tensor' is block 0's)."""
    cases, seen = [], set()
    for name, cls in COMPRESSORS.items():
        grown = {p.name: p.high for p in cls.params if _grows(p)}
        for example in cls.examples:
            params = {k: v for k, v in example.items() if isinstance(v, str)}
            for grown_name, value in grown.items():
                try:
                    C.check_params(name, **{**params, grown_name: value})
                except ValueError:
                    continue
                params[grown_name] = value
            key = (name, tuple(sorted(params.items())))
            if key in seen or not set(params) & set(grown):
                continue
            seen.add(key)
            cases.append(pytest.param(name, example, params,
                                      id=f"{name}-" + "-".join(f"{k}{v}" for k, v in params.items())))
    return cases


CASES = _cases()


def _impls(name: str) -> list[str]:
    impls = ["reference"]
    if COMPRESSORS[name].has_numba and numba_installed():
        impls.append("numba")
    return impls


def _at_length(name: str, params: dict) -> dict:
    """``params`` with each int parameter past the tensor's length set to that length."""
    cls = COMPRESSORS[name]
    return {**params, **{p.name: N for p in cls.params if p.kind is int and p.name in params and params[p.name] > N}}


def _inputs() -> dict[str, torch.Tensor]:
    """Some of the kernels' tests' inputs: empty, one entry, sizes either side of the test's, a matrix,
    zeros, denormals, huge values, NaN and Inf."""
    every = kernel_inputs()
    chosen = ("n0", "n1", "n7", "n1025", "33x31", "zeros", "denormals", "huge", "nan_inf")
    return {**{k: every[k] for k in chosen}, "wide": _input()}


def _guard(x: torch.Tensor) -> SizeGuard:
    """The guard for the runs of other tests at the largest values: a regression fails them at once too."""
    return SizeGuard(PER_ENTRY * max(x.numel(), N))


def _warm(name: str, example: dict, x: torch.Tensor) -> None:
    """Its example's encode and decode, outside any count: kernels compiled or loaded, tables made once
    per process (dynamic8's bin table has 32,513 entries whatever the tensor)."""
    for impl in _impls(name):
        _run(C.get(name, impl=impl, **example), x)


def _run(c: C.Compressor, x: torch.Tensor) -> None:
    payload = c.encode(x, step=1, rank=2, stream=3)
    c.decode(payload)
    c.decode(payload, out=torch.zeros(x.shape), add=True)


def _input() -> torch.Tensor:
    x = torch.randn(N, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, N)
    x[::97] = 0.0
    return x


def test_the_cases_cover_every_sized_parameter():
    # fp8's block, the defect's parameter, is among them; so is every bucket and every share
    names = {case.values[0] for case in CASES}
    assert {"fp8", "dynamic8", "linear8", "qsgd", "terngrad", "maxmin", "topk", "randomk", "adaptive",
            "dgc"} <= names
    assert any(case.values[0] == "fp8" and case.values[2]["block"] == 2**31 - 1 for case in CASES)


@pytest.mark.parametrize("name, example, params", CASES)
def test_no_buffer_grows_with_the_parameter(name, example, params):
    x = _input()
    _warm(name, example, x)
    for impl in _impls(name):
        c = C.get(name, impl=impl, **params)
        with SizeGuard(PER_ENTRY * N) as guard:
            _run(c, x)
        tracemalloc.start()
        try:
            _run(c, x)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= PER_ENTRY * N + FIXED, f"{impl}: {peak} bytes traced at the peak"
        assert guard.largest <= PER_ENTRY * N


@pytest.mark.parametrize("name, example, params", CASES)
def test_a_parameter_past_the_tensor_costs_what_the_tensor_length_does(name, example, params):
    """The reference's work as its torch operations: as many as with the parameter at the tensor's
    length (a Python loop over blocks the tensor does not have would add some)."""
    x = _input()
    _warm(name, example, x)
    counts = []
    for p in (params, _at_length(name, params)):
        c = C.get(name, impl="reference", **p)
        with SizeGuard(PER_ENTRY * N):
            _run(c, x)  # an instance's own first-use work (a cached table), outside the count
        with SizeGuard(PER_ENTRY * N) as guard:
            _run(c, x)
        counts.append(guard.ops)
    assert counts[0] == counts[1]


@pytest.mark.parametrize("name, example, params", [c for c in CASES if COMPRESSORS[c.values[0]].has_numba])
def test_the_kernels_give_the_references_bytes_at_the_largest_values(name, example, params):
    pytest.importorskip("numba")
    _warm(name, example, _input())
    reference, kernel = C.get(name, impl="reference", **params), C.get(name, impl="numba", **params)
    for label, x in _inputs().items():
        with _guard(x):
            expected = reference.encode(x, step=3, rank=1, stream=5)
            a = reference.decode(expected)
        got = kernel.encode(x, step=3, rank=1, stream=5)
        same_payload(expected, got, wire.read_header(expected).nbytes)
        b = kernel.decode(expected)
        assert np.array_equal(canonical(a.contiguous().numpy().reshape(-1)),
                              canonical(b.contiguous().numpy().reshape(-1))), label


@pytest.mark.slow  # the emulator compiles each CUDA program with g++ on first use
@pytest.mark.parametrize("name, example, params", [c for c in CASES if COMPRESSORS[c.values[0]].has_cuda])
def test_the_cuda_glue_sizes_scratch_and_grids_by_the_tensor(name, example, params, monkeypatch):
    """The CUDA kernels' glue at the largest values, through the host emulator: every scratch array it
    asks for and every grid's work items follow the tensor, and the body and the decode are the
    reference's."""
    from tests.compressors.cuda import cuda_host

    if cuda_host.available():
        pytest.skip(f"the CUDA host emulator cannot run: {cuda_host.available()}")
    x = _input()
    _warm(name, example, x)
    codec = C.get(name, impl="reference", **params)
    k = cuda_host.host_kernels(codec.cuda_program)
    asked = {"scratch": [0], "items": [0]}

    def recording(method, what, size):
        def wrapper(count, *args, **kwargs):
            asked[what].append(size(count, *args))
            return method(count, *args, **kwargs)
        return wrapper

    def nbytes(count, dtype):
        return count * np.dtype(dtype).itemsize

    monkeypatch.setattr(k, "empty", recording(k.empty, "scratch", nbytes))
    monkeypatch.setattr(k, "zeros", recording(k.zeros, "scratch", nbytes))
    monkeypatch.setattr(k, "grid", recording(k.grid, "items", lambda items, *rest: items))
    with _guard(x):
        expected = codec.encode(x, step=3, rank=1, stream=5)
        decoded = codec.decode(expected)
    start = wire.read_header(expected).nbytes
    payload = expected.numpy().copy()
    payload[start:] = 0xA5
    codec._encode_cuda(k, x.numpy(), payload[start:], tuple(x.shape), step=3, rank=1, stream=5)
    same_payload(expected, torch.from_numpy(payload), start)
    out = np.full(N, np.nan, np.float32)
    codec._decode_cuda(k, payload[start:], tuple(x.shape), out, False)
    assert np.array_equal(canonical(out), canonical(decoded.numpy()))
    assert max(asked["scratch"]) <= PER_ENTRY * N and max(asked["items"]) <= N, asked


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_an_fp8_block_past_the_tensor_is_the_whole_tensor(fmt, rounding):
    """The same body as block 0 (one scale for the tensor) and as a block of exactly its length."""
    for label, x in _inputs().items():
        n = x.numel()
        bodies, values = [], []
        for block in (0, max(n, 1), n + 1, 2**31 - 1):
            c = C.get("fp8", format=fmt, rounding=rounding, block=block, impl="reference")
            with _guard(x):
                payload = c.encode(x, step=2)
                decoded = c.decode(payload)
            bodies.append(payload[wire.read_header(payload).nbytes:])
            values.append(canonical(decoded.contiguous().numpy().reshape(-1)))
        assert all(np.array_equal(v, values[0]) for v in values), label
        assert all(torch.equal(b, bodies[0]) for b in bodies), label


def test_the_guard_refuses_before_allocating():
    """The guard would catch today's kind of defect without paying for it: 64 GiB asked for, refused
    before any memory is touched."""
    with SizeGuard(1 << 20) as guard:
        with pytest.raises(Refused, match="would make a buffer of 68719476736 bytes"):
            torch.nn.functional.pad(torch.ones(10), (0, 2**34 - 10))
        with pytest.raises(Refused, match="would make"):
            torch.zeros(2**34)
        torch.ones(10) + 1  # small ones pass
    assert guard.largest == 2**36


def test_size_bounds_are_what_a_tensor_can_need():
    """Every int parameter declares its upper bound (so the cases above test it there), which a header's
    u32 field holds; a block or bucket longer than the longest tensor (wire.MAX_NUMEL) would mean nothing
    more, so none is allowed past it."""
    for name, cls in COMPRESSORS.items():
        for p in cls.params:
            if p.kind is int:
                assert p.high is not None and p.high <= 2**32 - 1, (name, p.name)
            if p.name in ("block", "bucket"):
                assert p.high == wire.MAX_NUMEL, (name, p.name)
