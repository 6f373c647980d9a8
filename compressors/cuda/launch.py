"""Launching a method's CUDA kernels on CUDA tensors through CuPy.

``kernels(method, device)`` compiles ``<method>.cu`` once per process (CuPy caches the binary
on disk) and returns a ``Kernels``: the compressors' ``_encode_cuda``/``_decode_cuda`` call it
with arrays (CuPy views of torch's tensors through DLPack: no copy) and NumPy scalars whose types
are the kernel's C parameters' (np.int64 for ``long long``, np.uint32 for ``unsigned int``,
np.float32 for ``float``, np.int32 for ``int``). Every launch has ``LP_THREADS`` threads per block
and runs on torch's current stream (``Kernels.on_stream``, which ``base.Compressor`` enters around
the glue), so it is ordered with the training step's own work.
"""
from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from . import build

THREADS = 256  # common.cuh's LP_THREADS
# Grid-stride kernels get at most this many blocks per multiprocessor: enough to hide latency.
_BLOCKS_PER_SM = 8
# Where a bucketed method's encode picks its path (scaled8, maxmin): buckets of up to GROUP_MAX
# entries share a warp (``lanes`` lanes each); longer ones get a block each where there are at least
# BUCKETS_MIN of them, else chunks of CHUNK entries whose statistics atomics combine.
GROUP_MAX = 1024
BUCKETS_MIN = 64
CHUNK = 8192


def lanes(bucket: int, per_lane: int) -> np.int32:
    """Lanes of a warp per bucket (a power of two, at most 32) for about ``per_lane`` entries a lane."""
    return np.int32(min(32, 1 << (-(-bucket // per_lane) - 1).bit_length()))


class Kernels(ABC):
    """One method's kernels and the array module they run on (CuPy here; NumPy under the host
    emulator in the tests). Kernels must give the same result for any grid ``grid`` returns."""

    xp: Any

    def __init__(self, method: str, max_blocks: int) -> None:
        self.method = method
        self.max_blocks = max_blocks
        self._tables: dict[Any, Any] = {}

    def __call__(self, kernel: str, blocks: int, *args: Any) -> None:
        """Launch ``kernel`` on ``blocks`` blocks of THREADS threads (nothing for 0 blocks), inside
        ``on_stream``."""
        if blocks > 0:
            self._launch(kernel, int(blocks), args)

    def grid(self, items: int, per_block: int = THREADS) -> int:
        """Blocks for a grid-stride loop over ``items`` work items, ``per_block`` to a block per round."""
        return max(1, min(-(-items // per_block), self.max_blocks))

    def empty(self, count: int, dtype: Any) -> Any:
        return self.xp.empty(int(count), dtype=dtype)

    def zeros(self, count: int, dtype: Any) -> Any:
        return self.xp.zeros(int(count), dtype=dtype)

    def section(self, body: Any, start: int, count: int, dtype: Any, *, writable: bool = False) -> Any:
        """``count`` items of ``dtype`` at byte ``start`` of a uint8 body. A section to read is copied
        when unaligned (a payload cut out of a gathered buffer), so that kernels load whole words;
        one to write must be aligned (a payload's body is: its header is a multiple of 8 bytes)."""
        size = np.dtype(dtype).itemsize
        raw = body[start:start + size * count]
        if self.address(raw) % size:
            if writable:
                raise ValueError(f"{self.method}: an encode's out buffer must be {size}-byte aligned")
            raw = raw.copy()
        return raw.view(dtype)

    @abstractmethod
    def address(self, array: Any) -> int:
        """The array's first byte's address (kernels pick 16-byte paths by it)."""

    def upload(self, host: np.ndarray) -> Any:
        """A constant host array on the device, complete on return (cached tables: a later launch
        may come from another stream)."""
        return self.xp.asarray(host)

    def table(self, key: Any, make: Any) -> Any:
        """``upload(make())`` once per ``key``: a constant table the launches read, kept with these kernels."""
        if key not in self._tables:
            self._tables[key] = self.upload(np.ascontiguousarray(make()))
        return self._tables[key]

    def on_stream(self) -> Any:
        """A context in which the glue's own array work (scratch from ``empty``/``zeros``, the
        copies ``section`` makes, tables, ``int(a[0])`` reads) runs where the launches do."""
        return contextlib.nullcontext()

    @abstractmethod
    def as_array(self, tensor: Any) -> Any:
        """An array of ``xp`` over a tensor's own memory."""

    @abstractmethod
    def _launch(self, kernel: str, blocks: int, args: tuple[Any, ...]) -> None:
        """Run ``kernel`` on ``blocks`` blocks with ``args``."""


class CupyKernels(Kernels):
    """The kernels of ``<method>.cu`` compiled by NVRTC, on one CUDA device."""

    def __init__(self, method: str, device_index: int) -> None:
        import cupy

        self.xp = cupy
        self._device = cupy.cuda.Device(device_index)
        with self._device:
            sms = self._device.attributes["MultiProcessorCount"]
            self._functions = _compiled(method, device_index)
        super().__init__(method, sms * _BLOCKS_PER_SM)

    def address(self, array: Any) -> int:
        return int(array.data.ptr)

    def upload(self, host):
        with self._device:
            array = self.xp.asarray(host)  # an asynchronous copy on the current stream
            self.xp.cuda.get_current_stream().synchronize()
        return array

    @contextlib.contextmanager
    def on_stream(self):
        # CuPy allocates, zeroes, copies and reads back on ITS current device and stream: unless
        # they are torch's (the launches'), a k.zeros memset, a section's copy or an int(a[0])
        # read is not ordered with the kernels (torch's side streams are non-blocking: the legacy
        # default stream does not wait for them), and the memory pool may hand a freed scratch
        # array to another stream while a kernel still uses it.
        import cupy
        import torch

        with self._device:
            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(self._device.id).cuda_stream,
                                              self._device.id)
            with stream:
                yield

    def _launch(self, kernel, blocks, args):
        # On CuPy's current device and stream, which on_stream made this device's and torch's.
        self._functions[kernel]((blocks,), (THREADS,), args)

    def as_array(self, tensor: Any) -> Any:
        """A CuPy view of a CUDA tensor (DLPack: the same memory)."""
        return self.xp.from_dlpack(tensor.detach())


@functools.cache
def _compiled(method: str, device_index: int) -> dict[str, Any]:
    """Compile ``<method>.cu`` for the current device; every kernel it declares, by name."""
    import cupy

    module = cupy.RawModule(code=build.source(method), options=build.OPTIONS)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as err:
        raise build.KernelCompileError(f"CUDA program {method}.cu (kernels {', '.join(build.kernel_names(method))}) "
                                       f"failed to compile with {' '.join(build.OPTIONS)}:\n{err}") from None
    functions = {}
    for name in build.kernel_names(method):
        try:
            functions[name] = module.get_function(name)
        except cupy.cuda.driver.CUDADriverError as err:
            raise build.KernelCompileError(f"CUDA program {method}.cu: kernel {name} not found in the "
                                           f"compiled module ({err})") from None
    return functions


@functools.cache
def kernels(method: str, device_index: int) -> CupyKernels:
    """The compiled kernels of ``<method>.cu`` on CUDA device ``device_index`` (once per process)."""
    return CupyKernels(method, device_index)
