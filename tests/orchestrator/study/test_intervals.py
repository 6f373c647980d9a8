"""How sure a timing is (orchestrator/study/intervals.py): the order-statistic interval of a median against
hand-computed binomial tails, the bootstrap of a ratio of medians (deterministic, covering the measured
ratio), the spread between runs of one configuration and what it adds, and "not measurable" where an
interval includes 1."""
from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.study.intervals import measurable, median_interval, ratio_factors, run_effects, spread


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
    lo, hi = ratio_factors([([slow], fast)])
    assert (lo, hi) == ratio_factors([([slow], fast)])  # a fixed seed: the same steps give the same interval
    assert lo < 1.0 < hi
    measured = np.median(slow) / np.median(fast)
    assert measurable(measured * lo, measured * hi)  # twice as slow: a difference far beyond the noise
    same_lo, same_hi = ratio_factors([([fast], list(reversed(fast)))])
    assert not measurable(same_lo, same_hi)  # the same steps: nothing to measure
    assert all(math.isnan(v) for v in ratio_factors([([slow], [1.0])]))  # one step: no interval
    assert not measurable(math.nan, math.nan)


def test_the_effects_of_runs_are_each_runs_log_median_about_its_configurations_mean():
    # Two configurations run twice (medians 1, 4 and 2, 2) and one run once (left out): the logs about
    # their means are -+ln 2 and 0, 0, scaled by sqrt(2 / 1) so that they spread as sample deviations.
    effects = run_effects([[1.0, 4.0], [2.0, 2.0], [3.0], [5.0, math.nan]])
    assert effects == pytest.approx([-math.sqrt(2) * math.log(2), math.sqrt(2) * math.log(2), 0.0, 0.0])
    # pooled over the 2 degrees of freedom: sqrt((2 ln2^2 + 0) / 2) = ln 2
    assert spread(effects) == pytest.approx(math.log(2))
    assert len(run_effects([[1.0], [2.0]])) == 0 and math.isnan(spread(run_effects([[1.0]])))


def test_a_measured_spread_between_runs_widens_the_interval_and_none_leaves_it_as_it_was():
    rng = np.random.default_rng(1)
    slow, fast = list(1.10 + 0.01 * rng.random(80)), list(1.0 + 0.01 * rng.random(80))
    steps_only = ratio_factors([([slow], fast)])
    assert ratio_factors([([slow], fast)], np.empty(0)) == steps_only
    assert measurable(*(1.1 * f for f in steps_only))  # 10% apart, steps within 1%: measurable in one run
    # runs that move their median step by about 10% cover a 10% difference: not measurable
    rerun = ratio_factors([([slow], fast)], np.array([-0.1, 0.1, -0.1, 0.1]))
    assert rerun[0] < steps_only[0] and rerun[1] > steps_only[1]
    assert not measurable(*(1.1 * f for f in rerun))


def test_the_mean_of_several_seeds_ratios_is_surer_than_one_seeds():
    rng = np.random.default_rng(2)
    seeds = [([list(2.0 + 0.4 * rng.random(40))], list(1.0 + 0.2 * rng.random(40))) for _ in range(4)]
    effects = np.array([-0.05, 0.05])
    one, four = ratio_factors(seeds[:1], effects), ratio_factors(seeds, effects)
    assert four[1] - four[0] < one[1] - one[0]
    assert four[0] < 1.0 < four[1]
    assert all(math.isnan(v) for v in ratio_factors([([[1.0, 2.0]], [1.0])]))  # every pair too short: none


def test_one_baseline_of_several_seeds_is_drawn_once_so_its_noise_is_not_averaged_away():
    rng = np.random.default_rng(3)
    baseline = list(2.0 + 0.4 * rng.random(40))
    own = [list(1.0 + 0.05 * rng.random(40)) for _ in range(4)]
    shared = ratio_factors([([baseline], series) for series in own])
    copies = ratio_factors([([list(baseline)], series) for series in own])  # equal lists, distinct objects
    assert shared[1] - shared[0] > copies[1] - copies[0]


def test_an_overhead_is_the_mean_of_own_over_baseline_and_short_series_are_left_out():
    rng = np.random.default_rng(4)
    pairs = [([list(1.0 + 0.1 * rng.random(30))], list(s + 0.1 * rng.random(30))) for s in (1.8, 2.2)]
    lo, hi = ratio_factors(pairs, inverse=True)
    assert lo < 1.0 < hi and measurable(2.0 * lo, 2.0 * hi)
    assert ratio_factors([*pairs, ([[1.0]], [1.0, 2.0])], inverse=True) == (lo, hi)  # one step: left out
