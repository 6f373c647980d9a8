"""Error feedback (residual memory), kept apart from the compressors (GRACE's memory).

``v = g + residual`` is what gets compressed; after decoding,
``residual = v - decoded``.  So over any number of steps the sum of what was
decoded plus the last residual equals the sum of the inputs. DGC's memory
(``MomentumCorrection``) accumulates a velocity instead of the gradient.
"""
from __future__ import annotations

from collections.abc import Hashable

import torch


class ErrorFeedback:
    """Residuals per key (a parameter id, or a chunk of one), surviving across steps."""

    def __init__(self) -> None:
        self.residuals: dict[Hashable, torch.Tensor] = {}

    def compensate(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        """``grad + residual`` as float32 (a new tensor; ``grad`` is left alone)."""
        residual = self.residuals.get(key)
        v = grad.to(torch.float32, copy=True)
        if residual is not None:
            if residual.shape != v.shape:
                raise ValueError(f"residual for {key!r} has shape {tuple(residual.shape)}, "
                                 f"gradient {tuple(v.shape)}")
            v += residual
        return v

    def update(self, key: Hashable, compensated: torch.Tensor, decoded: torch.Tensor) -> None:
        self.residuals[key] = compensated - decoded.reshape(compensated.shape)

    def uncompressed(self, key: Hashable, grad: torch.Tensor) -> None:
        """``grad`` travels whole (too small to compress): it has no residual, and is left as it is."""

    def state_dict(self) -> dict:
        return {"residuals": {k: r.detach().cpu().clone() for k, r in self.residuals.items()}}

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        self.residuals = {k: r.to(device) for k, r in state["residuals"].items()}


class MomentumCorrection(ErrorFeedback):
    """DGC's memory (Lin et al. 2018, sections 3.2 and 3.3), per key: the gradient ``g``, clipped to the L2
    norm ``clip`` (0: not clipped), enters the velocity ``u = momentum * u + g``; the accumulation ``v = v + u``
    is what gets compressed. After decoding, the entries that were sent (decoded to a nonzero value: one
    sent as 0 keeps its u) are cleared in ``v`` (``v - decoded``, as error feedback) and in ``u`` (momentum
    factor masking). A tensor sent whole (``uncompressed``) keeps its u: it is plain momentum."""

    def __init__(self, momentum: float, clip: float = 0.0) -> None:
        super().__init__()
        self.momentum, self.clip = momentum, clip
        self.velocities: dict[Hashable, torch.Tensor] = {}

    def _advance(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        """The velocity after ``grad`` (clipped) entered it: ``u = momentum * u + g`` (the memory's own)."""
        g = grad.to(torch.float32, copy=True)
        if self.clip:
            # min(1, clip / |g|) on the device, without waiting for it: 1 exactly where |g| <= clip
            g.mul_(torch.clamp(self.clip / torch.linalg.vector_norm(g), max=1.0))
        u = self.velocities.get(key)
        if u is not None and u.shape != g.shape:
            raise ValueError(f"velocity for {key!r} has shape {tuple(u.shape)}, gradient {tuple(g.shape)}")
        self.velocities[key] = g if u is None else u.mul_(self.momentum).add_(g)
        return self.velocities[key]

    def compensate(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        return super().compensate(key, self._advance(key, grad))  # a copy plus v

    def uncompressed(self, key: Hashable, grad: torch.Tensor) -> None:
        """``grad`` becomes its velocity, sent whole: the mean of the velocities is the velocity of the
        mean, plain SGD momentum (nothing is masked)."""
        grad.copy_(self._advance(key, grad))

    def update(self, key: Hashable, compensated: torch.Tensor, decoded: torch.Tensor) -> None:
        decoded = decoded.reshape(compensated.shape)
        super().update(key, compensated, decoded)
        self.velocities[key].masked_fill_(decoded != 0, 0.0)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "velocities": {k: u.detach().cpu().clone() for k, u in self.velocities.items()}}

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        super().load_state_dict(state, device)
        # copies: the velocities change in place, the state handed in must not
        self.velocities = {k: u.to(device, copy=True) for k, u in state["velocities"].items()}
