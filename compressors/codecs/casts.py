"""The baselines: fp32 as is, and the 16-bit casts."""
from __future__ import annotations

import torch

from ..core import wire
from ..core.base import Compressor, numel


class _Cast(Compressor):
    """The tensor cast to ``cast_dtype``: ``n * itemsize`` body bytes."""

    # Where methods are compared a cast is a baseline, averaged as DDP averages it (its native all_reduce) or
    # hierarchically. Over allgather and sra it is the same cast sent through our compressed collectives
    # (their exact test case), not a method of its own: a study's baselines are told apart by name alone.
    algorithm_choices = ("allreduce", "hierarchical")

    def _body_nbytes(self, shape):
        return numel(shape) * self.cast_dtype.itemsize

    def _encode_body(self, flat, shape, *, step, rank, stream):
        return [flat.to(self.cast_dtype)]

    def _decode_body(self, payload, start, shape):
        return wire.section(payload, start, numel(shape), self.cast_dtype).to(torch.float32)


class Float32(_Cast):
    """fp32 on the wire, the baseline; ``4 n`` body bytes."""
    name = "fp32"
    wire_id = 1
    cast_dtype = torch.float32


class Float16(_Cast):
    """IEEE half precision; ``2 n`` body bytes (values beyond 65504 become inf)."""
    name = "fp16"
    wire_id = 2
    cast_dtype = torch.float16


class BFloat16(_Cast):
    """bfloat16 (fp32's range, 8-bit mantissa); ``2 n`` body bytes."""
    name = "bf16"
    wire_id = 3
    cast_dtype = torch.bfloat16
