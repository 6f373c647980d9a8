"""A user's compressor module, outside the package (tests/orchestrator/study/test_user_workloads.py,
tests/orchestrator/test_job_submit.py): the upper 16 bits of each float32 (bfloat16 rounded toward
zero), sent as int16, so it travels through the compressed collectives rather than a native all_reduce."""
import torch

from compressors import Compressor
from compressors.core import wire
from compressors.core.base import numel


class Truncate16(Compressor):
    """The upper half of each float32's bits."""
    name = "truncate16"
    wire_id = 200

    def _body_nbytes(self, shape):
        return numel(shape) * 2

    def _encode_body(self, flat, shape, *, step, rank, stream):
        return [(flat.contiguous().view(torch.int32) >> 16).to(torch.int16)]

    def _decode_body(self, payload, start, shape):
        bits = wire.section(payload, start, numel(shape), torch.int16).to(torch.int32) << 16
        return bits.view(torch.float32)
