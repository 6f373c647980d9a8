"""Reader for the IDX format of MNIST (unsigned-byte tensors, optionally gzip-compressed).

Format: 2 zero bytes, a type byte (0x08 = unsigned byte), a byte with the number
of dimensions, one big-endian uint32 per dimension, then the data in C order.
Every length is checked against the header before the data is used.
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np

from .dataset_types import DatasetFormatError

_GZIP_MAGIC = b"\x1f\x8b"
_UBYTE = 0x08


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """The uint8 array stored in an IDX file with ``ndim`` dimensions (3 for images, 1 for labels)."""
    raw = path.read_bytes()
    # Decided by content rather than by file name: people gunzip files and keep the name.
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:
            raise DatasetFormatError(f"{path}: corrupt or truncated gzip data ({err})") from err
    expected_magic = f"0x{_UBYTE:06x}{ndim:02x}"
    if len(raw) < 4 + 4 * ndim:
        raise DatasetFormatError(
            f"{path}: {len(raw)} bytes is too short for an IDX header with {ndim} dimension(s)"
        )
    if raw[0] != 0 or raw[1] != 0 or raw[2] != _UBYTE or raw[3] != ndim:
        raise DatasetFormatError(
            f"{path}: bad IDX magic 0x{raw[:4].hex()}, expected {expected_magic} "
            f"(unsigned bytes, {ndim} dimension(s))"
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    header = 4 + 4 * ndim
    expected = math.prod(shape)  # exact: numpy's int64 product wraps for a forged header
    found = len(raw) - header
    if found != expected:
        problem = "truncated" if found < expected else "trailing bytes"
        raise DatasetFormatError(
            f"{path}: {problem}: header shape {list(shape)} needs {expected} data bytes, found {found}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)
