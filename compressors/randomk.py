"""Random-k sparsification with memory (Stich, Cordonnier, Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018, rand_k; GRACE's ``grace_dl/torch/compressor/randomk.py``).

``k = ceil(pi * n)`` entries chosen uniformly at random are sent, their values unscaled:
the method is Stich et al.'s, biased and made to converge by the residual memory (error
feedback), not the ``n / k`` rescaled unbiased variant.

The choice: every entry draws ``u_i`` from the counter hash of (seed, step, rank, stream,
i) (compressors/rng.py) and the ``k`` largest ``u_i`` are taken, ties by lowest index
(``sparse.select_largest``): a uniformly random k-subset up to the hash's 24-bit ties. As
GRACE does with its shared seed, no indices travel: the body holds the 32-bit stream key,
and the decoder draws the same ``u`` and makes the same choice, so any body decodes (a
changed key is another valid choice) and there is nothing to check. The values go in
ascending index order.

Body: the key (uint32), then ``k`` float32 values (``4 + 4k`` bytes).
"""
from __future__ import annotations

import numpy as np
import torch

from . import rng, wire
from .base import Compressor, numel
from .params import Param
from .sparse import PI_EXAMPLES, count_sent, select_largest


def chosen(key: int, n: int, k: int, device: torch.device) -> torch.Tensor:
    """Ascending indices of the ``k`` of ``n`` entries that the stream ``key`` chooses."""
    return select_largest(rng.uniform(key, n, device), k)


class RandomK(Compressor):
    name = "randomk"
    wire_id = 24
    params = (Param("pi", 0.01, float, low=0.0, high=1.0, low_open=True,
                    doc="share of the entries sent, chosen uniformly at random (k = ceil(pi * n))"),)
    examples = PI_EXAMPLES
    needs_error_feedback = True
    has_numba = True

    def _header_params(self, shape):
        return (count_sent(self.pi, numel(shape)), 0, 0, self.pi)

    def _body_nbytes(self, shape):
        return 4 + 4 * count_sent(self.pi, numel(shape))

    def _encode_body(self, flat, shape, *, step, rank, stream):
        key = rng.stream_key(self.seed, step, rank, stream)
        idx = chosen(key, flat.numel(), count_sent(self.pi, flat.numel()), flat.device)
        # int64 -> the key's 4 little-endian bytes (a uint32 above 2**31 does not fit an int32).
        head = torch.tensor([key], dtype=torch.int64, device=flat.device).view(torch.uint8)[:4]
        return [head, flat[idx]]

    def _decode_body(self, payload, start, shape):
        n = numel(shape)
        k = count_sent(self.pi, n)
        key = int.from_bytes(bytes(wire.section(payload, start, 4, torch.uint8).cpu().tolist()), "little")
        values = wire.section(payload, start + 4, k, torch.float32)
        out = torch.zeros(n, dtype=torch.float32, device=payload.device)
        out[chosen(key, n, k, payload.device)] = values
        return out

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        from .kernels import randomk as kernels
        from .kernels.common import f32_section

        k = count_sent(self.pi, flat.size)
        key = rng.stream_key(self.seed, step, rank, stream)
        section = f32_section(body, 0, 1 + k, writable=True)
        section.view(np.uint32)[0] = key
        kernels.encode(flat, key, section[1:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        from .kernels import randomk as kernels
        from .kernels.common import f32_section

        k = count_sent(self.pi, out.size)
        section = f32_section(body, 0, 1 + k)
        kernels.decode(int(section.view(np.uint32)[0]), section[1:], out, add)
