"""Deep Gradient Compression (Lin et al., ICLR 2018): top-k with momentum correction.

The payload is top-k's ((index, value) pairs of the ``k = ceil(pi * n)``
largest magnitudes, the same kernels). What makes it DGC lives elsewhere:

- momentum correction and momentum factor masking (section 3.2): the
  memory keeps the velocity ``u = m * u + g`` and accumulates ``v += u``; ``v``
  is what gets sent, and where an entry was sent both its ``v`` and its ``u``
  are cleared (``compressors.comm.feedback.MomentumCorrection``). The method
  owns the momentum (the ``Reducer``'s ``momentum``, a trial's ``momentum``
  setting): the optimizer runs without.
- local gradient clipping (section 3.3): each worker clips each tensor's
  gradient to the L2 norm ``clip_norm * N ** -0.5`` before it enters the
  memory (N workers), so that the sum of N independent such gradients has a
  norm of about ``clip_norm``. The paper clips the whole gradient; a
  communication hook sees one bucket at a time, so here each tensor is clipped
  on its own.
- a tensor too small to compress (``min_compress_numel``) travels whole in
  the fp32 all-reduce as its velocity: plain momentum.
- sparsity warm-up (section 3.4): the density goes 25%, 6.25%, 1.5625%,
  0.4% (75% ... 99.6% sparsity), ``ramp_steps`` steps each (the paper: one
  epoch each), then ``pi``; a stage's density below ``pi`` is ``pi``.
  ``at_step`` gives the codec of a step; the header carries its density, so
  a payload decodes only with the codec of its own stage.

Averaged by all-gathering the sparse payloads, as the paper does: the
velocity is each worker's own, so there is no server side to keep one.
"""
from __future__ import annotations

from typing import Any

from ..core.params import Param
from .topk import TopK

PI = Param("pi", 0.001, float, low=0.0, high=1.0, low_open=True,
           doc="share of the entries sent after the warm-up, those of largest accumulated velocity")
CLIP_NORM = Param("clip_norm", 0.0, float, low=0.0,
                  doc="L2 norm each tensor's gradient is clipped to, times N^-1/2 for N workers (0: no clipping)")
RAMP_STEPS = Param("ramp_steps", 0, int, low=0, high=2**31 - 1,
                   doc="steps of each of the four warm-up densities 25%, 6.25%, 1.5625%, 0.4% before pi (0: pi from the start)")

# The paper's warm-up: sparsity 75%, 93.75%, 98.4375%, 99.6%, then the target (99.9%).
RAMP = (0.25, 0.0625, 0.015625, 0.004)


class DGC(TopK):
    """Top-k's payload; the memory of momentum correction (``owns_momentum``) and a warm-up of densities."""
    name = "dgc"
    wire_id = 29
    params = (PI, CLIP_NORM, RAMP_STEPS)
    examples = ({}, {"pi": 0.1}, {"pi": 0.37, "clip_norm": 1.0}, {"ramp_steps": 3})
    algorithms = ("allgather",)
    owns_momentum = True

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._stages: dict[float, DGC] = {self.pi: self}

    def density(self, step: int) -> float:
        """The share of entries sent at ``step`` (0-based): the warm-up's, then ``pi``."""
        stage = step // self.ramp_steps if self.ramp_steps else len(RAMP)
        return max(RAMP[stage], self.pi) if stage < len(RAMP) else self.pi

    def at_step(self, step: int) -> DGC:
        density = self.density(step)
        if density not in self._stages:
            self._stages[density] = type(self)(**{**self.config, "pi": density}, impl=self.impl)
        return self._stages[density]
