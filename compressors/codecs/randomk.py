"""Random-k sparsification with memory (Stich, Cordonnier, Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018, rand_k; GRACE's ``grace_dl/torch/compressor/randomk.py``).

``k = ceil(pi * n)`` entries chosen uniformly at random are sent, their values unscaled:
the method is Stich et al.'s, biased and made to converge by the residual memory (error
feedback), not the ``n / k`` rescaled unbiased variant.

The choice: every entry draws ``u_i`` from the counter hash of (seed, step, rank, stream,
i) (compressors/core/rng.py) and the ``k`` largest ``u_i`` are taken, ties by lowest index
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

from ..core import rng, wire
from ..core.base import Compressor, numel
from ..core.params import Param
from .topk import PI_EXAMPLES, count_sent, select_largest


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
    cuda_program = "randomk"

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
        from ..kernels import randomk as kernels
        from ..kernels.common import f32_section

        k = count_sent(self.pi, flat.size)
        key = rng.stream_key(self.seed, step, rank, stream)
        section = f32_section(body, 0, 1 + k, writable=True)
        section.view(np.uint32)[0] = key
        kernels.encode(flat, key, section[1:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        from ..kernels import randomk as kernels
        from ..kernels.common import f32_section

        k = count_sent(self.pi, out.size)
        section = f32_section(body, 0, 1 + k)
        kernels.decode(int(section.view(np.uint32)[0]), section[1:], out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        n = flat.size
        count = count_sent(self.pi, n)
        words = k.section(body, 0, 1 + count, np.uint32, writable=True)
        key = np.uint32(rng.stream_key(self.seed, step, rank, stream))
        if count == 0:  # an empty tensor's body is its key alone, which randomk_place writes
            k("randomk_place", 1, key, np.int32(0), words[:1], np.int64(0), k.zeros(5, np.int64),
              k.zeros(2, np.int64), np.int32(0), flat, words[1:].view(np.float32), flat, np.int32(0))
            return
        _place_cuda(k, key, np.int32(0), words[:1], n, count, np.int32(0), flat, words[1:].view(np.float32),
                    flat, np.int32(0))

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        count = count_sent(self.pi, n)
        if count == 0:
            return
        # The key stays on the device (read by the kernels): no synchronisation with the host.
        words = k.section(body, 0, 1 + count, np.uint32)
        _place_cuda(k, np.uint32(0), np.int32(1), words[:1], n, count, np.int32(1), out,
                    words[1:].view(np.float32), out, np.int32(add))


_CUDA_TILE = 8192  # compressors/cuda/randomk.cu's RANDOMK_TILE: indices a block ranks at a time
_CUDA_BINS = 4096


def _place_cuda(k, key, from_body, keyp, n, count, mode, x, values, out, add) -> None:
    """The choice on the GPU (compressors/cuda/randomk.cu): the two histograms and thresholds, the
    per-tile counts and their scan, then ``mode`` 0 (values = x at the chosen entries, the key into
    ``keyp``) or 1 (out (+)= the values at the chosen entries, +0.0 elsewhere)."""
    state = k.zeros(5, np.int64)
    for stage in (0, 1):
        hist = k.zeros(_CUDA_BINS, np.uint32)
        k("randomk_histogram", k.grid(n), key, from_body, keyp, np.int64(n), np.int32(stage), state, hist)
        k("randomk_find", 1, hist, np.int64(count), np.int32(stage), state)
    tiles = -(-n // _CUDA_TILE)
    counts = k.empty(2 * tiles, np.uint32)
    k("randomk_count", k.grid(tiles, 1), key, from_body, keyp, np.int64(n), state, counts)
    offsets = k.empty(2 * tiles, np.int64)
    k("randomk_scan", 1, counts, np.int64(tiles), offsets)
    k("randomk_place", k.grid(tiles, 1), key, from_body, keyp, np.int64(n), state, offsets, mode, x, values,
      out, add)
