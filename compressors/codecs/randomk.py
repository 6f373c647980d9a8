"""Random-k sparsification with memory (Stich, Cordonnier, Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018, rand_k; GRACE's ``grace_dl/torch/compressor/randomk.py``).

``k = ceil(pi * n)`` entries chosen uniformly at random are sent, their values unscaled:
the method is Stich et al.'s, biased and made to converge by the residual memory (error
feedback), not the ``n / k`` rescaled unbiased variant.

The choice: the first ``k`` of a keyed permutation of 0..n-1 under the counter hash's
key of (seed, step, rank, stream) (``rng.permuted``: a Feistel network walked in cycles),
a uniformly random k-subset as far as the network is a random permutation. As GRACE does
with its shared seed, no indices travel: the body holds the 32-bit stream key, and the
decoder draws the same k indices (k hashes, not n), so any body decodes (a changed key is
another valid choice) and there is nothing to check. The values go in draw order: value j
is the entry at the permutation's j-th index.

Body: the key (uint32), then ``k`` float32 values (``4 + 4k`` bytes).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core import rng, wire
from ..core.base import Compressor, kernel_module, numel
from ..core.params import Param
from .topk import PI_EXAMPLES, count_sent


def chosen(key: int, n: int, k: int, device: torch.device) -> torch.Tensor:
    """The indices of the ``k`` of ``n`` entries that the stream ``key`` chooses, in draw order."""
    return torch.from_numpy(rng.permuted(key, n, k)).to(device)


def _round_keys(key: int) -> np.ndarray:
    return np.array(rng.round_keys(key), np.uint32)


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
        kernels = kernel_module("randomk")
        f32_section = kernel_module("common").f32_section

        k = count_sent(self.pi, flat.size)
        key = rng.stream_key(self.seed, step, rank, stream)
        section = f32_section(body, 0, 1 + k, writable=True)
        section.view(np.uint32)[0] = key
        kernels.encode(flat, _round_keys(key), rng.permutation_half_bits(flat.size), section[1:])

    def _decode_numba(self, body: np.ndarray, shape: tuple[int, ...], out: np.ndarray, add: bool) -> None:
        kernels = kernel_module("randomk")
        f32_section = kernel_module("common").f32_section

        k = count_sent(self.pi, out.size)
        section = f32_section(body, 0, 1 + k)
        if not add:
            out.fill(0.0)
        kernels.decode(_round_keys(int(section.view(np.uint32)[0])), rng.permutation_half_bits(out.size),
                       section[1:], out, add)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        n = flat.size
        count = count_sent(self.pi, n)
        words = k.section(body, 0, 1 + count, np.uint32, writable=True)
        key = np.uint32(rng.stream_key(self.seed, step, rank, stream))
        # one block at least: its first thread writes the key (an empty tensor's body is the key alone)
        k("randomk_encode", k.grid(count), key, np.int64(n), np.int64(count), np.int32(rng.permutation_half_bits(n)),
          flat, words[:1], words[1:].view(np.float32))

    def _decode_cuda(self, k, body, shape, out, add) -> None:
        n = out.size
        count = count_sent(self.pi, n)
        if count == 0:
            return
        # The key stays on the device (read by the kernels): no synchronisation with the host.
        words = k.section(body, 0, 1 + count, np.uint32)
        idx = k.empty(count, np.int64)
        old = k.empty(count, np.float32)
        half = np.int32(rng.permutation_half_bits(n))
        k("randomk_take", k.grid(count), words[:1], np.int64(n), np.int64(count), half, out, np.int32(add), idx, old)
        k("randomk_clear", k.grid(n), np.int64(n), np.int32(add), out)
        k("randomk_put", k.grid(count), np.int64(count), idx, old, words[1:].view(np.float32), np.int32(add), out)
