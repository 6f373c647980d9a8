"""The performance model (orchestrator/predict/perfmodel.py) on hand-computed cases: collective costs,
a step's timeline with and without overlap, the speedup bound and the break-even bandwidth.
"""
from __future__ import annotations

import pytest

from orchestrator.predict import perfmodel

LINK = perfmodel.Link(bandwidth=1e6, latency=1e-3)  # 1 MB/s, 1 ms per message


def test_collective_costs_follow_the_formulas():
    # ring: 2(p-1) alpha + 2(p-1)/p M/B + (p-1)/p M/R
    assert perfmodel.ring_allreduce_s(4e6, 4, LINK, reduce_bps=1e9) == pytest.approx(6e-3 + 6.0 + 3e-3)
    assert perfmodel.allgather_s(1e5, 4, LINK) == pytest.approx(3e-3 + 0.3)
    assert perfmodel.alltoall_s(3e5, 4, LINK) == pytest.approx(3e-3 + 0.3)
    for cost in (perfmodel.ring_allreduce_s(4e6, 1, LINK), perfmodel.allgather_s(1e5, 1, LINK),
                 perfmodel.alltoall_s(0, 4, LINK)):
        assert cost == 0.0


def test_timeline_overlap_and_serial():
    # two buckets: ready at 1 and 3 (s into backward, which takes 4), encode 0.5 each, comm 2, decode 0.25
    b = [perfmodel.Bucket(1.0, 0.5, 2.0, 0.25), perfmodel.Bucket(3.0, 0.5, 2.0, 0.25)]
    # overlap, encodes and the first decode contend: f1 = 1 + 0.5 + 2 = 3.5; the second bucket is ready after
    # 3 + 0.5 + 0.25 + 0.5: f2 = max(3.5, 4.25) + 2 = 6.25, then its decode; backward 4 + 1.25 = 5.25
    assert perfmodel.step_time(1.0, 4.0, 0.5, b, overlap=True) == pytest.approx(1.0 + max(5.25, 6.5) + 0.5)
    # a long first collective: the second bucket waits for it, and the first decode is hidden behind it
    slow = [perfmodel.Bucket(1.0, 0.5, 6.0, 0.25), perfmodel.Bucket(3.0, 0.5, 2.0, 0.25)]
    assert perfmodel.step_time(1.0, 4.0, 0.5, slow, overlap=True) == pytest.approx(1.0 + (7.5 + 2.0 + 0.25) + 0.5)
    assert perfmodel.step_time(1.0, 4.0, 0.5, b, overlap=False) == pytest.approx(1.0 + 4.0 + 2 * 2.75 + 0.5)
    # communication hidden behind backward: the step is compute plus the encodes
    quick = [perfmodel.Bucket(1.0, 0.0, 0.1, 0.0)]
    assert perfmodel.step_time(1.0, 4.0, 0.5, quick, overlap=True) == pytest.approx(5.5)


def test_speedup_bound_and_break_even():
    assert perfmodel.speedup_bound(3.0, 1.0) == pytest.approx(3.0)
    assert perfmodel.speedup_bound(0.5, 1.0) == 1.0
    assert perfmodel.break_even(lambda b: b < 5e8, 1e6, 1e12) == pytest.approx(5e8, rel=1e-9)
    assert perfmodel.break_even(lambda b: False, 1e6, 1e12) == 1e6
    assert perfmodel.break_even(lambda b: True, 1e6, 1e12) == 1e12
