"""Live per-trial metrics on the Ray dashboard (Metrics tab / Prometheus), set from a train worker."""

from __future__ import annotations

from typing import Any

# metric reported by the training loop -> what the gauge shows
_GAUGES = {
    "bytes_sent": "Bytes one rank sends per training step (median over the last epoch).",
    "compression_ratio": "fp32 ring-allreduce bytes / bytes actually sent.",
    "step_time_s": "Median seconds per training step over the last epoch.",
    "test_accuracy": "Test accuracy after the last epoch.",
}


_made: dict[str, Any] = {}  # one Gauge per metric per process: a worker serves trial after trial


class StepGauges:
    """``lowprec_<metric>`` gauges tagged with the sweep and trial names; set once per report."""

    def __init__(self, sweep: str, trial: str):
        from ray.util.metrics import Gauge

        self._tags = {"sweep": sweep, "trial": trial}
        for metric, description in _GAUGES.items():
            if metric not in _made:
                _made[metric] = Gauge(f"lowprec_{metric}", description=description, tag_keys=("sweep", "trial"))

    def update(self, metrics: dict[str, Any]) -> None:
        for metric in _GAUGES:
            value = metrics.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                _made[metric].set(float(value), tags=self._tags)
