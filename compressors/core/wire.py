"""Wire format shared by every compressor.

A payload is one flat ``torch.uint8`` tensor: a fixed header followed by the
body.  The header (little-endian) is::

    magic    4s   b"LPGC"
    version  u8   FORMAT_VERSION
    codec    u8   compressor id (the class's ``wire_id``, see ``registry``)
    dtype    u8   dtype of the encoded tensor (``DTYPE_CODES``)
    ndim     u8   0..MAX_NDIM
    p0,p1,p2 u32  compressor parameters (meaning per compressor)
    p3       f32  compressor parameter (meaning per compressor)
    numel    u64  number of elements
    body     u64  body length in bytes
    shape    ndim x u64

That is ``40 + 8 * ndim`` bytes, a multiple of 8, so fp32/int32 sections of the
body can be viewed in place.  ``read_header`` checks every field against the
bytes actually present before any section of the body is touched.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import torch

from . import registry

MAGIC = b"LPGC"
FORMAT_VERSION = 1
MAX_NDIM = 8
# numel is kept below 2**31 so int32 indices and offsets can never overflow.
MAX_NUMEL = 2**31 - 1
_FIXED = struct.Struct("<4sBBBBIIIfQQ")
HEADER_FIXED_NBYTES = _FIXED.size  # 40
_SHAPES = [struct.Struct(f"<{ndim}Q") for ndim in range(MAX_NDIM + 1)]
# Headers read and checked (``read_header``), by their bytes: a header's bytes say all it holds.
_READ: dict[bytes, "Header"] = {}
_READ_KEPT = 4096

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}
_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


class PayloadError(ValueError):
    """A payload is truncated, corrupted, or was not made by this decoder."""


@dataclass(frozen=True)
class Header:
    codec: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    numel: int
    params: tuple[int, int, int, float]
    body_nbytes: int

    @property
    def nbytes(self) -> int:
        return header_nbytes(len(self.shape))


def header_nbytes(ndim: int) -> int:
    return HEADER_FIXED_NBYTES + 8 * ndim


def encode_header(codec: str, dtype: torch.dtype, shape: tuple[int, ...],
                  params: tuple[int, int, int, float], body_nbytes: int) -> bytes:
    shape = tuple(int(s) for s in shape)
    if len(shape) > MAX_NDIM:
        raise ValueError(f"tensors of at most {MAX_NDIM} dimensions can be encoded, got {len(shape)}")
    if dtype not in DTYPE_CODES:
        raise ValueError(f"dtype {dtype} cannot be encoded; valid: {sorted(map(str, DTYPE_CODES))}")
    numel = math.prod(shape)
    if numel > MAX_NUMEL:
        raise ValueError(f"tensors of at most {MAX_NUMEL} elements can be encoded, got {numel}")
    p0, p1, p2, p3 = params
    fixed = _FIXED.pack(MAGIC, FORMAT_VERSION, registry.wire_id_of(codec), DTYPE_CODES[dtype], len(shape),
                        p0, p1, p2, p3, numel, body_nbytes)
    return fixed + _SHAPES[len(shape)].pack(*shape)


def read_header(payload: torch.Tensor) -> Header:
    """Parse and check the header of ``payload`` (any device)."""
    if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8 or payload.dim() != 1:
        raise PayloadError("a payload must be a 1-D torch.uint8 tensor")
    total = payload.numel()
    if total < HEADER_FIXED_NBYTES:
        raise PayloadError(f"payload truncated: {total} bytes, the header alone needs {HEADER_FIXED_NBYTES}")
    # One read of the longest header there can be (one copy from a GPU), the shape parsed from it below.
    header = _parse(_host_bytes(payload, min(total, header_nbytes(MAX_NDIM))), total)
    if total != header.nbytes + header.body_nbytes:
        raise PayloadError(f"payload is {total} bytes, its header says {header.nbytes + header.body_nbytes}")
    return header


def read_header_at(buffer: np.ndarray | torch.Tensor, start: int) -> Header:
    """Parse and check the header of the payload at byte ``start`` of payloads back to back (a uint8 numpy
    ``buffer`` on the host, or a 1-D uint8 tensor on any device): the payload must fit in what follows."""
    room = (buffer.size if isinstance(buffer, np.ndarray) else buffer.numel()) - start
    if room < HEADER_FIXED_NBYTES:
        raise PayloadError(f"payload truncated: {room} bytes, the header alone needs {HEADER_FIXED_NBYTES}")
    count = min(room, header_nbytes(MAX_NDIM))
    head = buffer[start:start + count].tobytes() if isinstance(buffer, np.ndarray) else \
        _host_bytes(buffer[start:], count)
    header = _parse(head, room)
    if room < header.nbytes + header.body_nbytes:
        raise PayloadError(f"payload truncated: {room} bytes, its header says {header.nbytes + header.body_nbytes}")
    return header


def _parse(head: bytes, room: int) -> Header:
    """The header at the start of ``head`` (the first bytes of at most ``room`` there are), checked but for
    the payload's length, which the callers check against theirs."""
    # A training step decodes the same headers every step: one read and checked before is looked up.
    known = _READ.get(head[:header_nbytes(head[7])])  # byte 7: ndim
    if known is not None:
        return known
    magic, version, codec_id, dtype_code, ndim, p0, p1, p2, p3, numel, body = _FIXED.unpack_from(head)
    if magic != MAGIC:
        raise PayloadError(f"not a compressor payload: magic {magic!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PayloadError(f"payload format version {version}, this decoder reads version {FORMAT_VERSION}")
    codec = registry.name_of_wire_id(codec_id)
    if codec is None:
        raise PayloadError(f"unknown compressor id {codec_id} in payload")
    if dtype_code not in _DTYPES:
        raise PayloadError(f"unknown dtype code {dtype_code} in payload")
    if ndim > MAX_NDIM:
        raise PayloadError(f"payload claims {ndim} dimensions, at most {MAX_NDIM} are valid")
    hdr_len = header_nbytes(ndim)
    if room < hdr_len:
        raise PayloadError(f"payload truncated: {room} bytes, the header needs {hdr_len}")
    shape = _SHAPES[ndim].unpack_from(head, HEADER_FIXED_NBYTES)
    if numel > MAX_NUMEL or any(d > MAX_NUMEL for d in shape) or math.prod(shape) != numel:
        raise PayloadError(f"payload shape {shape} does not match its element count {numel}")
    header = Header(codec, _DTYPES[dtype_code], tuple(shape), numel, (p0, p1, p2, p3), body)
    if len(_READ) >= _READ_KEPT:  # a reader of ever new headers keeps only recent ones
        _READ.clear()
    _READ[head[:hdr_len]] = header
    return header


def _host_bytes(payload: torch.Tensor, count: int) -> bytes:
    """The first ``count`` bytes of ``payload`` on the host."""
    if payload.device.type == "cpu":
        return payload.numpy()[:count].tobytes()
    return payload[:count].cpu().numpy().tobytes()


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D view ``(rows, cols)`` = (out, in) of the grouping methods (onebit, adaptive) and of sra's
    chunks: ``(shape[0], numel // shape[0])`` for tensors of two or more dimensions (a conv weight's
    (out, in*kh*kw)), a single row for 0-D and 1-D ones. The papers' "column" (CNTK and LBANN store
    (out x in) column-major) is a column of this view, per input unit (``grouping: column``); a row is
    per output unit (``grouping: row``).
    """
    numel = math.prod(shape)
    if numel == 0:
        return (0, 0)
    if len(shape) < 2:
        return (1, numel)
    return (shape[0], numel // shape[0])


def section(payload: torch.Tensor, start: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """``count`` elements of ``dtype`` at byte ``start``; callers have checked the body length."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = payload[start:start + count * itemsize]
    # A payload sliced out of a gathered buffer may sit at an odd offset.
    if (raw.storage_offset() * raw.element_size()) % itemsize:
        raw = raw.clone()
    return raw.view(dtype)
