"""Step statistics (compressors/comm/stats.py): overlapping communication spans count once; adding
statistics sums every field they declare.
"""
from __future__ import annotations

from dataclasses import fields

from compressors.comm.stats import StepStats, span_union


def test_span_union_counts_each_second_once():
    assert span_union([]) == 0.0
    assert span_union([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == 2.0 + 1.0
    assert span_union([(1.0, 2.0), (0.0, 3.0)]) == 3.0


def test_adding_stats_sums_every_declared_field():
    a = StepStats(**{f.name: [(0.0, 1.0)] if f.name == "comm_spans" else i + 1 for i, f in enumerate(fields(StepStats))})
    b = StepStats(**{f.name: [(2.0, 3.0)] if f.name == "comm_spans" else 10 * (i + 1)
                     for i, f in enumerate(fields(StepStats))})
    spans = a.comm_spans
    a += b
    for i, f in enumerate(fields(StepStats)):
        expected = [(0.0, 1.0), (2.0, 3.0)] if f.name == "comm_spans" else 11 * (i + 1)
        assert getattr(a, f.name) == expected, f.name
    assert a.comm_spans is spans  # extended in place
