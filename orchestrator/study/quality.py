"""What a study's trained models are judged by: the metric of its targets (accuracy, or a loss), its columns
and unit. The results tables and the predictor both ask here."""
from __future__ import annotations

import ast
from typing import NamedTuple

import pandas as pd


class Quality(NamedTuple):
    """What a study's trained models are judged by: the metric of its target."""

    metric: str  # the target's metric: test_accuracy, test_loss or test_perplexity
    final: str  # trials.csv's column of the final value
    delta: str  # ... and of its change against fp32
    name: str  # in words
    scale: float  # the change is shown times this ...
    unit: str  # ... in this unit
    short: str  # the name of its curve's figure: <short>_vs_time.png


_QUALITIES = {
    "test_accuracy": Quality("test_accuracy", "final_accuracy", "accuracy_delta", "accuracy", 100.0, "points",
                             "accuracy"),
    "test_loss": Quality("test_loss", "final_loss", "loss_delta", "test loss", 1.0, "nats", "loss"),
    "test_perplexity": Quality("test_perplexity", "final_loss", "loss_delta", "test loss", 1.0, "nats", "loss"),
}


def targets(trials: pd.DataFrame) -> list[tuple[str, float]]:
    """The distinct ``(metric, value)`` targets of the trials (target, or its shorthand target_accuracy)."""
    found = []
    for target, accuracy in zip(trials.get("target", pd.Series(None, index=trials.index)),
                                trials.get("target_accuracy", pd.Series(None, index=trials.index))):
        if isinstance(target, str):  # read back from trials.csv
            target = ast.literal_eval(target)
        if isinstance(target, dict):
            found.append((str(target["metric"]), float(target["value"])))
        elif accuracy is not None and pd.notna(accuracy):
            found.append(("test_accuracy", float(accuracy)))
    return sorted(set(found))


def quality(trials: pd.DataFrame) -> Quality:
    """The study's measure of its models: its targets' metric where they share one, else accuracy."""
    metrics = {metric for metric, _ in targets(trials)}
    return _QUALITIES[metrics.pop()] if len(metrics) == 1 else _QUALITIES["test_accuracy"]
