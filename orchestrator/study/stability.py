"""Training that collapsed without a NaN: a finished run that is not an ordinary result.

A run whose loss becomes NaN stops as ``diverged`` (the training loop checks
that itself). Some compressors instead let training drift: the loss climbs and
the accuracy falls back towards what a constant prediction scores, with every
number finite; others never learn at all (signsgd at too large a learning
rate). Such a run of two or more epochs ends ``unstable``, with the reason, so
that its accuracy and times are not read as an ordinary trade-off.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

LOSS_RISE = 2.0  # the last epoch's training loss above this multiple of the lowest epoch's
CHANCE_MARGIN = 0.05  # a test accuracy within this of a constant prediction's is chance
LEARNED_MARGIN = 0.2  # ... after a best this far above it


def unstable_reason(history: Sequence[dict[str, Any]], constant_accuracy: float | None) -> str | None:
    """Why a finished run collapsed, or None. ``history``: its epochs (train_loss, test_accuracy);
    ``constant_accuracy``: the test accuracy of always predicting the most frequent class (None where the
    dataset does not say: then only the loss is judged)."""
    if len(history) < 2:
        return None
    losses = [float(e["train_loss"]) for e in history]
    lowest = min(range(len(losses)), key=losses.__getitem__)
    if math.isfinite(losses[-1]) and losses[-1] > LOSS_RISE * losses[lowest]:
        return (f"the training loss rose to {losses[-1]:.3g} in the last epoch, more than {LOSS_RISE:g}x its "
                f"lowest ({losses[lowest]:.3g}, epoch {lowest + 1})")
    if constant_accuracy is None:
        return None
    accuracies = [float(e["test_accuracy"]) for e in history]
    best = max(range(len(accuracies)), key=accuracies.__getitem__)
    if accuracies[best] <= constant_accuracy + CHANCE_MARGIN:
        return (f"the test accuracy never rose above {accuracies[best]:.4f}, where always predicting the most "
                f"frequent class scores {constant_accuracy:.4f}: it did not learn")
    if accuracies[best] >= constant_accuracy + LEARNED_MARGIN and accuracies[-1] <= constant_accuracy + CHANCE_MARGIN:
        return (f"the test accuracy fell to {accuracies[-1]:.4f}, where always predicting the most frequent class "
                f"scores {constant_accuracy:.4f}, from {accuracies[best]:.4f} in epoch {best + 1}")
    return None
