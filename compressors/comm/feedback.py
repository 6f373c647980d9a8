"""Error feedback (residual memory), kept apart from the compressors (GRACE's memory).

``v = g + residual`` is what gets compressed; after decoding,
``residual = v - decoded``.  So over any number of steps the sum of what was
decoded plus the last residual equals the sum of the inputs.
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

    def state_dict(self) -> dict:
        return {"residuals": {k: r.detach().cpu().clone() for k, r in self.residuals.items()}}

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        self.residuals = {k: r.to(device) for k, r in state["residuals"].items()}
