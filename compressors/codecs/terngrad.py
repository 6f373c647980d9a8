"""TernGrad (Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad: Ternary Gradients to Reduce
Communication in Distributed Deep Learning", NeurIPS 2017; GRACE's
``grace_dl/torch/compressor/terngrad.py``).

Per layer the scale is ``s = max |g|``, and each entry becomes ``s * sign(g) * b`` with
``b ~ Bernoulli(|g| / s)``: unbiased, ``E[decode] = g``, three values, 2 bits an entry.
That is QSGD (compressors.codecs.qsgd) with 2 bits and the max norm, a code of
``sign << 1 | b``, so this codec is that one with those two settings fixed: the same
counter-hash draws (reproducible payloads) and the same Numba kernels. ``bucket`` entries
share one scale; the default, longer than any tensor, is the paper's one scale per layer.

``clip`` is the paper's optional gradient clipping (its Sec. 3.3, c = 2.5 in its
experiments, as in GRACE): entries are clamped to ``[-c sigma, c sigma]`` first, sigma the
tensor's standard deviation, which makes the method biased; 0 (the default) leaves it
off. sigma is computed in float64 with the pairwise tree sums (compressors/core/pairwise.py),
so both implementations clamp alike. Not done: the paper's scaler sharing (every worker
uses the maximum of all workers' scales), which needs a collective before the encode.

Body: ``ceil(n / bucket)`` float32 scales, then ``ceil(n / 4)`` bytes of 2-bit codes.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.base import kernel_module
from ..core.pairwise import pairwise_sum
from ..core.params import Param
from .qsgd import QSGD


class TernGrad(QSGD):
    name = "terngrad"
    wire_id = 23
    params = (
        Param("bucket", 2**31 - 1, int, low=1, high=2**31 - 1,
              doc="entries that share one scale max|g| (the default: the whole tensor, the paper's per layer)"),
        Param("clip", 0.0, float, low=0.0, high=1e6,
              doc="clamp entries to [-clip*std, clip*std] first (the paper uses 2.5; 0: no clipping, unbiased)"),
    )
    examples = ({}, {"bucket": 7}, {"bucket": 512}, {"clip": 2.5}, {"clip": 1.0, "bucket": 64})
    bits = 2
    norm = "max"

    def _header_params(self, shape):
        return (self.bits, self.bucket, 0, self.clip)

    def _clipped(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` clamped to ``[-clip * std, clip * std]`` (itself when ``clip`` is 0 or it is empty)."""
        n = flat.numel()
        if self.clip == 0.0 or n == 0:
            return flat
        x = flat.double().view(1, -1)
        mean = pairwise_sum(x) / n
        std = torch.sqrt(pairwise_sum((x - mean) ** 2) / n)
        bound = (self.clip * std).to(torch.float32)
        return torch.minimum(torch.maximum(flat, -bound), bound)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        return super()._encode_body(self._clipped(flat), shape, step=step, rank=rank, stream=stream)

    def _encode_numba(self, flat: np.ndarray, body: np.ndarray, shape: tuple[int, ...], *, step: int,
                      rank: int, stream: int) -> None:
        if self.clip != 0.0 and flat.size:
            kernels = kernel_module("terngrad")

            clipped = np.empty_like(flat)
            kernels.clip(flat, self.clip, clipped)
            flat = clipped
        super()._encode_numba(flat, body, shape, step=step, rank=rank, stream=stream)

    def _encode_cuda(self, k, flat, body, shape, *, step, rank, stream) -> None:
        if self.clip != 0.0:
            # The clamp as the reference makes it (torch on the same device: pairwise sums, then one
            # elementwise pass), shared with the kernels through the array interfaces, no copy.
            flat = k.xp.asarray(self._clipped(torch.as_tensor(flat)))
        super()._encode_cuda(k, flat, body, shape, step=step, rank=rank, stream=stream)
