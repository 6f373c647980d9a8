"""The baselines: fp32 as is, and the 16-bit casts."""
from __future__ import annotations

import torch

from . import wire
from .base import Compressor, numel


class _Cast(Compressor):
    wire_dtype: torch.dtype

    def _body_nbytes(self, shape):
        return numel(shape) * self.wire_dtype.itemsize

    def _encode_body(self, flat, shape, *, step, rank, stream):
        return [flat.to(self.wire_dtype)]

    def _decode_body(self, payload, start, shape):
        return wire.section(payload, start, numel(shape), self.wire_dtype).to(torch.float32)


class NoCompression(_Cast):
    """fp32 on the wire; ``4 n`` body bytes."""
    name = "none"
    wire_dtype = torch.float32


class Float16(_Cast):
    """IEEE half precision; ``2 n`` body bytes (values beyond 65504 become inf)."""
    name = "fp16"
    wire_dtype = torch.float16


class BFloat16(_Cast):
    """bfloat16 (fp32's range, 8-bit mantissa); ``2 n`` body bytes."""
    name = "bf16"
    wire_dtype = torch.bfloat16
