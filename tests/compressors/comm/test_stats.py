"""Step statistics (compressors/comm/stats.py): overlapping communication spans count once.
"""
from __future__ import annotations

from compressors.comm.stats import span_union


def test_span_union_counts_each_second_once():
    assert span_union([]) == 0.0
    assert span_union([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == 2.0 + 1.0
    assert span_union([(1.0, 2.0), (0.0, 3.0)]) == 3.0
