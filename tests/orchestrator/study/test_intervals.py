"""How sure a timing is (orchestrator/study/intervals.py): the order-statistic interval of a median against
hand-computed binomial tails, the bootstrap of a ratio of medians (deterministic, covering the measured
ratio), and "not measurable" where an interval includes 1."""
from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.study.intervals import measurable, median_interval, ratio_factors


@pytest.mark.parametrize("n, k", [
    (6, 1),    # P(B <= 0) = 1/64 <= 0.025 < P(B <= 1) = 7/64
    (17, 5),   # P(B <= 4) = 3214/131072 = 0.0245 <= 0.025 < P(B <= 5) = 9402/131072
    (100, 40), # the textbook's 40th and 61st of 100
])
def test_the_median_interval_is_the_order_statistics_of_the_binomials_tails(n, k):
    values = [float(v) for v in np.random.default_rng(n).permutation(n) + 1]  # 1..n shuffled
    assert median_interval(values) == (float(k), float(n + 1 - k))


def test_too_few_steps_give_no_interval_and_non_finite_steps_are_left_out():
    assert all(math.isnan(v) for v in median_interval([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert median_interval([1.0, 2.0, math.nan, 3.0, 4.0, 5.0, 6.0, math.inf]) == (1.0, 6.0)


def test_a_ratio_of_medians_interval_is_deterministic_and_spans_the_measured_ratio():
    rng = np.random.default_rng(0)
    slow, fast = list(2.0 + 0.2 * rng.random(60)), list(1.0 + 0.1 * rng.random(60))
    lo, hi = ratio_factors([slow], fast)
    assert (lo, hi) == ratio_factors([slow], fast)  # a fixed seed: the same steps give the same interval
    assert lo < 1.0 < hi
    measured = np.median(slow) / np.median(fast)
    assert measurable(measured * lo, measured * hi)  # twice as slow: a difference far beyond the noise
    same_lo, same_hi = ratio_factors([fast], list(reversed(fast)))
    assert not measurable(same_lo, same_hi)  # the same steps: nothing to measure
    assert all(math.isnan(v) for v in ratio_factors([slow], [1.0]))  # one step: no interval
    assert not measurable(math.nan, math.nan)
