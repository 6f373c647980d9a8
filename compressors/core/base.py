"""The compressor interface: encode to a validated payload, decode back.

Every compressor has the torch implementation (``impl="reference"``: the
oracle, and the path for any device) and, where it has CPU kernels, a Numba
one (``impl="numba"``) that gives the same payload bytes and the same decoded
bits, and for CUDA tensors a CUDA one through CuPy (``impl="cuda"``,
``compressors/cuda``) that gives them too. ``impl="auto"`` (the default) takes
Numba for CPU tensors and CUDA for CUDA tensors where the compressor has such
kernels and Numba or CuPy is installed, else the reference.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from . import registry, wire
from .params import SEED, Param, resolve


def get(name: str, **params: Any) -> Compressor:
    """A configured codec; ValueError names valid choices or ranges. ``impl="auto" | "reference" |
    "numba" | "cuda"`` picks its implementation (see ``Compressor``)."""
    return registry.codec_class(name)(**params)


def _as_f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@functools.cache
def numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


@functools.cache
def kernel_module(name: str) -> Any:
    """``compressors.kernels.<name>``, imported on a codec's first call that needs it (Numba compiles or loads
    its cache on import), then kept: an import statement in every call costs more than a small kernel."""
    return importlib.import_module(f"compressors.kernels.{name}")


@functools.cache
def cupy_installed() -> bool:
    return importlib.util.find_spec("cupy") is not None


class Compressor(ABC):
    """Base of every compressor.

    A concrete subclass declares ``name`` and ``wire_id`` in its own class
    body (which registers it: see ``compressors.core.registry``), ``params`` (each
    with a one-line ``doc``) and ``examples``, and implements ``_body_nbytes``,
    ``_encode_body`` and ``_decode_body`` (and ``_header_params`` if it has
    parameters that change the layout).  A class without ``name`` of its own
    (a shared intermediate base) does not register.
    ``encode`` takes ``step``, ``rank`` and ``stream`` (a tensor id) so that
    stochastic methods draw reproducible random numbers; the others ignore them.
    """

    name: ClassVar[str]
    # The header's compressor id, 1..255, unique; never reuse one a released payload format used.
    wire_id: ClassVar[int]
    params: ClassVar[tuple[Param, ...]] = ()
    # Parameter sets the contract tests run this compressor with (each is checked at registration).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    # Biased methods (sparse, 1-bit) only converge with residual memory.
    needs_error_feedback: ClassVar[bool] = False
    # The body holds indices (checked by decode): not every body of the right length is valid.
    sparse: ClassVar[bool] = False
    # Set when the body is the tensor cast to this dtype: the method can then travel through a
    # native all_reduce of the cast tensor (``compressors.CASTS``).
    cast_dtype: ClassVar[torch.dtype | None] = None
    # Set by a compressor that implements ``_encode_numba`` and ``_decode_numba``.
    has_numba: ClassVar[bool] = False
    # The CUDA program (``compressors/cuda/<cuda_program>.cu``) of a compressor that implements
    # ``_encode_cuda`` and ``_decode_cuda``; None: no CUDA kernels.
    cuda_program: ClassVar[str | None] = None
    # The algorithms it averages with where not every one suits it (None: ``registry.algorithms``'s rule).
    algorithms: ClassVar[tuple[str, ...] | None] = None
    # The algorithms it is offered over where methods are compared, where that is fewer than it runs (None:
    # every one; ``registry.algorithm_choices``).
    algorithm_choices: ClassVar[tuple[str, ...] | None] = None
    # Its memory keeps the velocity (DGC's momentum correction): the optimizer's momentum must be 0.
    owns_momentum: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            registry.register(cls)

    def __init__(self, *, impl: str = "auto", **params: Any) -> None:
        self._headers: dict[tuple, tuple[np.ndarray, torch.Tensor, int]] = {}
        self._paths: dict[str, str] = {}  # device type -> the code its tensors go through (``_path``)
        self._accepted: set[wire.Header] = set()  # headers whose parameters and body size decode checked
        self.config = resolve(self.name, self.params + (SEED,), params)
        problem = self.relations(self.config)
        if problem:
            raise ValueError(f"{self.name}: {problem}")
        for key, value in self.config.items():
            setattr(self, key, value)
        problem = registry.impl_problem(self.name, impl)
        if problem:
            raise ValueError(problem)
        if impl == "numba" and not numba_installed():
            raise ValueError(f"{self.name}: impl 'numba' needs the numba package (pip install numba)")
        if impl == "cuda" and not cupy_installed():
            raise ValueError(f"{self.name}: impl 'cuda' needs CuPy (pip install 'lowprec[cuda12]' or 'lowprec[cuda13]', "
                             "after your CUDA major version)")
        self.impl = impl

    @classmethod
    def relations(cls, params: dict[str, Any]) -> str | None:
        """What is wrong with parameters that are valid one by one but not together (None: nothing)."""
        return None

    @property
    def scales_by_tensor(self) -> bool:
        """Whether a piece of a tensor encoded on its own (sra's chunks) is to be scaled by the whole
        tensor's absolute maximum, given to ``encode`` as ``absmax``."""
        return False

    @property
    def split_axis(self) -> int:
        """The axis of the 2-D view (``wire.matrix_shape``) along which sra splits a tensor among the
        ranks: rows (0), unless a method's groups are columns (1), so that every chunk holds whole
        groups and the statistics are those of the whole tensor's groups."""
        return 0

    @property
    def has_cuda(self) -> bool:
        return self.cuda_program is not None

    def uses_numba(self, device: torch.device | str) -> bool:
        """Whether tensors on ``device`` go through the Numba kernels; ValueError where ``impl`` does not
        run on ``device`` (``encode`` and ``decode`` ask this for every tensor)."""
        kind = torch.device(device).type
        if not registry.runs_on(self.impl, kind):
            raise ValueError(f"{self.name}: impl '{self.impl}' runs on {registry.IMPL_DEVICES[self.impl].upper()} "
                             f"tensors, not on {device}")
        if kind != "cpu":
            return False
        return self.impl == "numba" or (self.impl == "auto" and self.has_numba and numba_installed())

    def _path(self, device: torch.device) -> str:
        """Which code tensors on ``device`` go through: "cuda", "numba" or "torch" (the reference), asked once
        per device type (ValueError, each time, where ``impl`` does not run there)."""
        path = self._paths.get(device.type)
        if path is None:
            path = "cuda" if self.uses_cuda(device) else "numba" if self.uses_numba(device) else "torch"
            self._paths[device.type] = path
        return path

    def uses_cuda(self, device: torch.device | str) -> bool:
        """Whether tensors on ``device`` go through the CUDA kernels."""
        if torch.device(device).type != "cuda":
            return False
        return self.impl == "cuda" or (self.impl == "auto" and self.has_cuda and cupy_installed())

    def _cuda_kernels(self, device: torch.device) -> Any:
        from ..cuda import launch

        return launch.kernels(self.cuda_program, torch.device(device).index or 0)

    def warm_up(self, device: torch.device | str = "cpu") -> None:
        """Compile (or load from the cache) the kernels a step on ``device`` will run, so that no timed
        step pays for it: encode, decode and decode-add of a small tensor."""
        if self.uses_numba(device) or self.uses_cuda(device):
            x = torch.linspace(-1.0, 1.0, 96, device=device).view(4, 24)
            out = torch.zeros(4, 24, device=device)
            payload = self.encode(x)
            self.decode(payload, out=out)
            self.decode(payload, out=out, add=True)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"

    def at_step(self, step: int) -> Compressor:
        """The codec of training step ``step`` (0-based), for a method whose parameters follow a schedule
        (DGC's sparsity warm-up); itself for the others."""
        return self

    # -- layout -----------------------------------------------------------
    def _header_params(self, shape: tuple[int, ...]) -> tuple[int, int, int, float]:
        return (0, 0, 0, 0.0)

    def _header(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[np.ndarray, torch.Tensor, int]:
        """The header of a tensor of ``shape`` and ``dtype`` (uint8, as numpy and as a CPU tensor) and its body's
        size, made once per shape: a training step encodes the same shapes every step, and building a header
        cost more than a small tensor's kernels."""
        params = self._header_params(shape)
        key = (shape, dtype, params)
        made = self._headers.get(key)
        if made is None:
            body_nbytes = self._body_nbytes(shape)
            header = np.frombuffer(wire.encode_header(self.name, dtype, shape, params, body_nbytes), dtype=np.uint8)
            if len(self._headers) >= _HEADERS_KEPT:  # a caller of ever new shapes keeps only recent ones
                self._headers.clear()
            made = self._headers[key] = (header, torch.from_numpy(header.copy()), body_nbytes)
        return made

    @abstractmethod
    def _body_nbytes(self, shape: tuple[int, ...]) -> int:
        """Body size in bytes for a tensor of ``shape``."""

    def payload_nbytes(self, shape: tuple[int, ...] | torch.Size) -> int:
        """Exact payload size in bytes for a tensor of ``shape``."""
        shape = tuple(int(s) for s in shape)
        return wire.header_nbytes(len(shape)) + self._body_nbytes(shape)

    # -- encode / decode --------------------------------------------------
    def encode(self, x: torch.Tensor, *, step: int = 0, rank: int = 0, stream: int = 0,
               out: torch.Tensor | None = None, absmax: float | None = None) -> torch.Tensor:
        """Encode ``x`` (float tensor, any shape) into a 1-D uint8 payload on ``x.device``; into
        ``out`` (a uint8 tensor of ``payload_nbytes(x.shape)`` bytes, reused across steps) if given.
        ``absmax``: the absolute maximum of the tensor ``x`` is a piece of, for a method that
        ``scales_by_tensor`` (it scales by the larger of it and x's own; a NaN is ignored)."""
        if not torch.is_tensor(x) or not x.is_floating_point():
            raise TypeError(f"{self.name}: expected a floating-point tensor, got {type(x).__name__}"
                            f"{'' if not torch.is_tensor(x) else ' of ' + str(x.dtype)}")
        _check_not_meta(self.name, x)
        if absmax is not None and not self.scales_by_tensor:
            raise ValueError(f"{self.name}: encode(absmax=) is for a method that scales by the whole tensor "
                             f"(dynamic8 or linear8 with scope 'tensor'), not {self!r}")
        extra = {} if absmax is None else {"absmax": absmax}
        shape = tuple(x.shape)
        header, header_tensor, body_nbytes = self._header(shape, x.dtype if x.dtype in wire.DTYPE_CODES
                                                          else torch.float32)
        if out is not None:
            _check_out(self.name, out, torch.uint8, len(header) + body_nbytes, x.device)
        path = self._path(x.device)
        if path == "numba":
            payload = out if out is not None else torch.empty(len(header) + body_nbytes, dtype=torch.uint8)
            array = payload.numpy()
            array[:len(header)] = header
            self._encode_numba(_flat_f32_numpy(x), array[len(header):], shape,
                               step=step, rank=rank, stream=stream, **extra)
            return payload
        flat = x.detach().reshape(-1).to(torch.float32)
        if path == "cuda":
            k = self._cuda_kernels(x.device)
            payload = out if out is not None else torch.empty(len(header) + body_nbytes, dtype=torch.uint8,
                                                              device=x.device)
            payload[:len(header)].copy_(header_tensor)
            with k.on_stream():  # the glue's scratch, copies and reads on the launches' stream
                self._encode_cuda(k, k.as_array(flat.contiguous()), k.as_array(payload)[len(header):], shape,
                                  step=step, rank=rank, stream=stream, **extra)
            return payload
        if self.cast_dtype is not None:  # one pass from the input into the payload: no body to concatenate
            payload = out if out is not None else torch.empty(len(header) + body_nbytes, dtype=torch.uint8,
                                                              device=x.device)
            payload[:len(header)].copy_(header_tensor)
            _cast_into(flat, payload[len(header):], self.cast_dtype)
            return payload
        body = [_flat_bytes(part) for part in self._encode_body(flat, shape, step=step, rank=rank, stream=stream,
                                                                **extra)]
        made = sum(part.numel() for part in body)
        if made != body_nbytes:  # the codec's own two halves disagree: say so here, not at a peer's decode
            raise ValueError(f"{self.name}: encode made a body of {made} bytes for a tensor of shape {list(shape)}, "
                             f"where its _body_nbytes says {body_nbytes}: _encode_body and _body_nbytes disagree")
        parts = [header_tensor.to(x.device), *body]
        return torch.cat(parts, out=out) if out is not None else torch.cat(parts)

    def decode(self, payload: torch.Tensor, *, out: torch.Tensor | None = None, add: bool = False) -> torch.Tensor:
        """Decode a payload made by an equally configured compressor to float32 of the original shape.

        ``out``: a float32 tensor of as many elements to write into (reused across steps); with
        ``add``, the decoded values are added into ``out`` instead (the summing step of a
        collective, in one pass where the kernels allow), element by element in float32.
        """
        if torch.is_tensor(payload):
            _check_not_meta(self.name, payload)
        header = wire.read_header(payload)
        if header not in self._accepted:  # a step decodes the same headers each step: checked once
            self._accept(header)
        if add and out is None:
            raise ValueError(f"{self.name}: decode(add=True) adds into out, which is missing")
        if out is not None:
            _check_out(self.name, out, torch.float32, header.numel, payload.device)
        path = self._path(payload.device)
        if path == "cuda":
            k = self._cuda_kernels(payload.device)
            target = out if out is not None else torch.empty(header.numel, dtype=torch.float32, device=payload.device)
            with k.on_stream():  # the glue's scratch, copies and reads on the launches' stream
                body = k.as_array(payload.contiguous())[header.nbytes:]
                self._decode_cuda(k, body, header.shape, k.as_array(target.view(-1)), add)
            return target.view(header.shape)
        if path == "numba":
            target = out if out is not None else torch.empty(header.numel, dtype=torch.float32)
            body = payload.contiguous().numpy()[header.nbytes:]
            self._decode_numba(body, header.shape, target.view(-1).numpy(), add)
            return target.view(header.shape)
        if self.cast_dtype is not None and out is not None:  # one pass from the payload into out
            self._decode_cast(payload.contiguous(), header, header.nbytes, out, add)
            return out.view(header.shape)
        # Sections are viewed in place, which needs a dense buffer.
        values = self._decode_body(payload.contiguous(), header.nbytes, header.shape)
        if out is None:
            return values.reshape(header.shape)
        if add:
            out.view(-1).add_(values)
        else:
            out.view(-1).copy_(values)
        return out.view(header.shape)

    def encode_many(self, xs: Sequence[torch.Tensor], *, step: int = 0, rank: int = 0, streams: Sequence[int],
                    absmaxes: Sequence[float | None] | None = None) -> torch.Tensor:
        """The payloads of ``xs`` back to back in one uint8 tensor: byte for byte ``torch.cat`` of each
        ``encode(xs[i], step=step, rank=rank, stream=streams[i], absmax=absmaxes[i])`` (a bucket's tensors in
        one call). Where the Numba kernels run, the checks and the code path are settled once for the call
        and a tensor costs its header's copy and its kernel; elsewhere (the reference, CUDA) it is those
        encodes."""
        if len(streams) != len(xs) or (absmaxes is not None and len(absmaxes) != len(xs)):
            raise ValueError(f"{self.name}: encode_many takes a stream (and an absmax, where given) per tensor: "
                             f"{len(xs)} tensors, {len(streams)} streams")
        absmaxes = absmaxes if absmaxes is not None else [None] * len(xs)
        if not xs:
            return torch.empty(0, dtype=torch.uint8)
        device = xs[0].device
        path = self._path(device) if all(torch.is_tensor(x) and x.device == device for x in xs) else None
        cast = path == "torch" and self.cast_dtype is not None and device.type == "cpu"
        if path != "numba" and not cast:
            return torch.cat([self.encode(x, step=step, rank=rank, stream=stream, absmax=absmax)
                              for x, stream, absmax in zip(xs, streams, absmaxes)])
        for x, absmax in zip(xs, absmaxes):
            if not x.is_floating_point():
                raise TypeError(f"{self.name}: expected a floating-point tensor, got one of {x.dtype}")
            if absmax is not None and not self.scales_by_tensor:
                raise ValueError(f"{self.name}: an absmax is for a method that scales by the whole tensor, not "
                                 f"{self!r}")
        made = [self._header(tuple(x.shape), x.dtype if x.dtype in wire.DTYPE_CODES else torch.float32) for x in xs]
        payload = torch.empty(sum(len(header) + body for header, _, body in made), dtype=torch.uint8)
        array = payload.numpy()
        at = 0
        for x, stream, absmax, (header, _, body_nbytes) in zip(xs, streams, absmaxes, made):
            array[at:at + len(header)] = header
            at += len(header)
            if cast:  # the cast straight into the payload
                _cast_into(x.detach().reshape(-1).to(torch.float32), payload[at:at + body_nbytes], self.cast_dtype)
                at += body_nbytes
                continue
            extra = {} if absmax is None else {"absmax": absmax}
            # A body is written in place where it starts on 8 bytes (its float32 sections aligned), else into
            # a scratch copied there.
            body = array[at:at + body_nbytes] if at % 8 == 0 else np.empty(body_nbytes, np.uint8)
            self._encode_numba(_flat_f32_numpy(x), body, tuple(x.shape), step=step, rank=rank, stream=stream,
                               **extra)
            if at % 8:
                array[at:at + body_nbytes] = body
            at += body_nbytes
        return payload

    def decode_many(self, payload: torch.Tensor, outs: Sequence[torch.Tensor], *, add: bool = False) -> None:
        """Decode ``encode_many``'s payloads, back to back in ``payload``, into ``outs`` (a float32 tensor of as
        many elements per payload, contiguous), adding with ``add``: each as ``decode(part, out=outs[i],
        add=add)`` would, in one call. PayloadError where the payloads do not fill ``payload`` exactly."""
        path = self._path(payload.device) if torch.is_tensor(payload) else "torch"
        cast = path == "torch" and self.cast_dtype is not None and payload.device.type == "cpu"
        if path != "numba" and not cast:
            at = 0
            for out in outs:
                header = wire.read_header_at(payload, at)
                size = header.nbytes + header.body_nbytes
                self.decode(payload[at:at + size], out=out, add=add)
                at += size
            _check_filled(self.name, at, payload.numel())
            return
        array = payload.contiguous().numpy()
        at = 0
        for out in outs:
            header = wire.read_header_at(array, at)
            if header not in self._accepted:
                self._accept(header)
            _check_out(self.name, out, torch.float32, header.numel, payload.device)
            start = at + header.nbytes
            if cast:
                self._decode_cast(payload, header, start, out, add)
            else:
                self._decode_numba(array[start:start + header.body_nbytes], header.shape, out.view(-1).numpy(), add)
            at = start + header.body_nbytes
        _check_filled(self.name, at, array.size)

    def _decode_cast(self, payload: torch.Tensor, header: wire.Header, start: int, out: torch.Tensor,
                     add: bool) -> None:
        """A cast's body at byte ``start`` of ``payload`` into ``out`` (added with ``add``), in one pass."""
        values = wire.section(payload, start, header.numel, self.cast_dtype)
        (out.view(-1).add_ if add else out.view(-1).copy_)(values)

    def _accept(self, header: wire.Header) -> None:
        """Check that this decoder reads ``header``'s payloads (codec, parameters, body size)."""
        if header.codec != self.name:
            raise wire.PayloadError(f"payload was made by {header.codec!r}, this decoder is {self.name!r}")
        expected = self._header_params(header.shape)
        got = header.params
        if tuple(got[:3]) != tuple(expected[:3]) or got[3] != _as_f32(expected[3]):
            raise wire.PayloadError(f"{self.name}: payload parameters {got} do not match this decoder's "
                                    f"{expected} ({self!r})")
        if header.body_nbytes != self._body_nbytes(header.shape):
            raise wire.PayloadError(f"{self.name}: body of {header.body_nbytes} bytes, a tensor of shape "
                                    f"{header.shape} needs {self._body_nbytes(header.shape)}")
        if len(self._accepted) >= _HEADERS_KEPT:  # a reader of ever new headers keeps only recent ones
            self._accepted.clear()
        self._accepted.add(header)

    @abstractmethod
    def _encode_body(self, flat: torch.Tensor, shape: tuple[int, ...], *, step: int, rank: int,
                     stream: int) -> list[torch.Tensor]:
        """The body's sections, in order, for the float32 ``flat`` view of the input."""

    @abstractmethod
    def _decode_body(self, payload: torch.Tensor, start: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Flat float32 values from a payload whose header and body length were checked."""


    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        """Write the body for float32 ``flat`` into ``body`` (uint8, exactly the body's size)."""
        raise NotImplementedError(f"{self.name} has no Numba kernels")

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        """Write (``add``: add) the decoded values into float32 ``out`` from a checked-length body;
        PayloadError where the body's content is invalid."""
        raise NotImplementedError(f"{self.name} has no Numba kernels")

    def _encode_cuda(self, k: Any, flat: Any, body: Any, shape: tuple[int, ...], *, step: int, rank: int,
                     stream: int) -> None:
        """``_encode_numba`` on the GPU: ``k`` is the program's ``compressors.cuda.launch.Kernels``,
        ``flat`` and ``body`` arrays of its array module (CuPy views of the tensors)."""
        raise NotImplementedError(f"{self.name} has no CUDA kernels")

    def _decode_cuda(self, k: Any, body: Any, shape: tuple[int, ...], out: Any, add: bool) -> None:
        """``_decode_numba`` on the GPU; a refused payload leaves ``out`` untouched."""
        raise NotImplementedError(f"{self.name} has no CUDA kernels")


_HEADERS_KEPT = 1024  # headers a codec keeps (``Compressor._header``)


def _check_filled(name: str, used: int, total: int) -> None:
    if used != total:
        raise wire.PayloadError(f"{name}: the payloads take {used} bytes of {total}: one per out, back to back")


def _check_not_meta(name: str, tensor: torch.Tensor) -> None:
    # A meta tensor has a shape but no values: torch raises NotImplementedError at the first read.
    if tensor.device.type == "meta":
        raise ValueError(f"{name}: meta tensors have no data to encode or decode; give a tensor on a real device")


def _check_out(name: str, out: torch.Tensor, dtype: torch.dtype, numel: int, device: torch.device) -> None:
    if (not torch.is_tensor(out) or out.dtype != dtype or out.numel() != numel or not out.is_contiguous()
            or out.device != device):
        raise ValueError(f"{name}: out must be a contiguous {dtype} tensor of {numel} elements on {device}, got "
                         + (f"{out.dtype} {tuple(out.shape)} on {out.device}" if torch.is_tensor(out)
                            else type(out).__name__))


def _flat_f32_numpy(x: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a flat float32 numpy array: a view where it is one already, else a converted copy."""
    if x.dtype == torch.float32 and x.is_contiguous():
        return x.detach().numpy().reshape(-1)
    return x.detach().reshape(-1).to(torch.float32).contiguous().numpy()


def _cast_into(flat: torch.Tensor, body: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``flat`` cast to ``dtype`` into the uint8 ``body``; through a temporary where the body sits at an offset
    the dtype cannot be viewed at (a payload inside a larger buffer)."""
    itemsize = dtype.itemsize
    if body.storage_offset() % itemsize == 0:
        body.view(dtype).copy_(flat)
    else:
        body.copy_(flat.to(dtype).view(torch.uint8))
    return body


def _flat_bytes(part: torch.Tensor) -> torch.Tensor:
    flat = part.reshape(-1)
    # A size-1 slice can count as contiguous with a stride other than 1.
    if flat.stride(0) != 1:
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
