from __future__ import annotations

import types

import pytest

from benchmarks import record


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock the benchmarks' budgets read, set by the test: ``clock[0]`` seconds."""
    now = [0.0]
    monkeypatch.setattr(record, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now
