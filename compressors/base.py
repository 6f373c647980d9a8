"""The compressor interface: encode to a validated payload, decode back."""
from __future__ import annotations

import math
import struct
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from . import registry, wire
from .params import SEED, Param, resolve


def _as_f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


class Compressor(ABC):
    """Base of every compressor.

    A concrete subclass declares ``name`` and ``wire_id`` in its own class
    body (which registers it: see ``compressors.registry``), ``params`` (each
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            registry.register(cls)

    def __init__(self, **params: Any) -> None:
        self.config = resolve(self.name, self.params + (SEED,), params)
        for key, value in self.config.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"

    # -- layout -----------------------------------------------------------
    def _header_params(self, shape: tuple[int, ...]) -> tuple[int, int, int, float]:
        return (0, 0, 0, 0.0)

    @abstractmethod
    def _body_nbytes(self, shape: tuple[int, ...]) -> int:
        """Body size in bytes for a tensor of ``shape``."""

    def payload_nbytes(self, shape: tuple[int, ...] | torch.Size) -> int:
        """Exact payload size in bytes for a tensor of ``shape``."""
        shape = tuple(int(s) for s in shape)
        return wire.header_nbytes(len(shape)) + self._body_nbytes(shape)

    # -- encode / decode --------------------------------------------------
    def encode(self, x: torch.Tensor, *, step: int = 0, rank: int = 0, stream: int = 0) -> torch.Tensor:
        """Encode ``x`` (float tensor, any shape) into a 1-D uint8 payload on ``x.device``."""
        if not torch.is_tensor(x) or not x.is_floating_point():
            raise TypeError(f"{self.name}: expected a floating-point tensor, got {type(x).__name__}"
                            f"{'' if not torch.is_tensor(x) else ' of ' + str(x.dtype)}")
        shape = tuple(x.shape)
        header = wire.encode_header(self.name, x.dtype if x.dtype in wire.DTYPE_CODES else torch.float32,
                                    shape, self._header_params(shape), self._body_nbytes(shape))
        flat = x.detach().reshape(-1).to(torch.float32)
        body = self._encode_body(flat, shape, step=step, rank=rank, stream=stream)
        parts = [torch.frombuffer(bytearray(header), dtype=torch.uint8).to(x.device)]
        parts += [_flat_bytes(part) for part in body]
        return torch.cat(parts)

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        """Decode a payload made by an equally configured compressor to float32 of the original shape."""
        header = wire.read_header(payload)
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
        # Sections are viewed in place, which needs a dense buffer.
        out = self._decode_body(payload.contiguous(), header.nbytes, header.shape)
        return out.reshape(header.shape)

    @abstractmethod
    def _encode_body(self, flat: torch.Tensor, shape: tuple[int, ...], *, step: int, rank: int,
                     stream: int) -> list[torch.Tensor]:
        """The body's sections, in order, for the float32 ``flat`` view of the input."""

    @abstractmethod
    def _decode_body(self, payload: torch.Tensor, start: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Flat float32 values from a payload whose header and body length were checked."""


def _flat_bytes(part: torch.Tensor) -> torch.Tensor:
    flat = part.reshape(-1)
    # A size-1 slice can count as contiguous with a stride other than 1.
    if flat.stride(0) != 1:
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
