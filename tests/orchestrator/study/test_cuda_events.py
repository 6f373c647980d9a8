"""The GPU's account of a step (orchestrator.study.cuda_events): its bookkeeping with stand-in events
on any machine, and the training loop's on a GPU (marked gpu)."""
from __future__ import annotations

import pytest
import torch

from orchestrator.study import train_loop
from orchestrator.study.cuda_events import EventClock


class _Event:
    """Stands in for torch.cuda.Event: its time on the GPU's clock (ms) is set by the test."""
    clock_ms = 0.0

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing

    def record(self) -> None:
        self.at = _Event.clock_ms

    def elapsed_time(self, end: "_Event") -> float:
        return end.at - self.at


def test_nothing_is_recorded_on_a_cpu_device():
    clock = EventClock(torch.device("cpu"))
    clock.mark(1.0)
    clock.mark(2.0)
    clock.mark(3.0)
    clock.end_step(4.0)
    assert clock.summary() is None


def test_the_medians_and_the_lag_behind_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    clock = EventClock(torch.device("cuda", 0))
    # (CPU times of start, backward, optimizer; GPU ms at each; the step's CPU time)
    steps = [((10.0, 10.5, 10.6), (0.0, 700.0, 900.0), 1.0),
             ((20.0, 20.2, 20.3), (0.0, 300.0, 350.0), 0.4),
             ((30.0, 30.4, 30.5), (0.0, 400.0, 500.0), 0.6)]
    for cpu, gpu_ms, step_time in steps:
        for cpu_time, ms in zip(cpu, gpu_ms):
            _Event.clock_ms = ms
            clock.mark(cpu_time)
        clock.end_step(step_time)
    summary = clock.summary()
    assert summary["steps"] == 3
    assert summary["step_time_s"] == 0.6
    assert summary["backward_cpu_s"] == pytest.approx(0.4)
    assert summary["backward_gpu_s"] == pytest.approx(0.4)
    # backward's lags: 0.7 - 0.5, 0.3 - 0.2, 0.4 - 0.4
    assert summary["backward_gpu_lag_s"] == pytest.approx(0.1)
    assert summary["optimizer_cpu_s"] == pytest.approx(0.5)
    assert summary["optimizer_gpu_s"] == pytest.approx(0.5)
    assert summary["optimizer_gpu_lag_s"] == pytest.approx(0.05)  # 0.3, 0.05, 0.0


def test_a_step_with_a_missing_mark_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    clock = EventClock(torch.device("cuda", 0))
    clock.mark(1.0)
    clock.mark(2.0)
    with pytest.raises(RuntimeError, match="1 marks after its start, not 2"):
        clock.end_step(1.5)


def test_the_training_loop_on_a_cpu_reports_no_gpu_account():
    result = train_loop.train({"dataset": "synthetic", "model": "mlp", "epochs": 1, "max_steps_per_epoch": 3,
                               "compressor": "qsgd"}, threads=1)
    assert result["status"] == "ok" and result["cuda_events"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_training_loop_on_a_gpu_reports_the_gpus_account():
    result = train_loop.train({"dataset": "synthetic", "model": "mlp", "epochs": 1, "max_steps_per_epoch": 5,
                               "compressor": "qsgd", "use_gpu": True})
    events = result["cuda_events"]
    assert result["status"] == "ok" and events["steps"] == 5
    # The GPU reaches each mark after the step's start, and the optimizer's end after backward's.
    assert 0 < events["backward_gpu_s"] <= events["optimizer_gpu_s"]
