"""How sure a timing is: a distribution-free 95% interval of a median, and of a ratio of medians.

A trial times every step; its step time is a median, and the machine's noise (other processes, a
hypervisor's steal, stragglers) moves it. The interval of a median comes from the order statistics (the
binomial's tails: no assumption on the distribution of step times); the interval of a ratio of medians
(a speedup, an overhead) from a bootstrap over the steps of both trials, and over the baseline's seeds
where there are several. The bootstrap draws from a fixed seed: the same steps give the same interval.
An interval that cannot be had (too few steps) is NaN; one that includes 1 says the difference is not
measurable here.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 1000
_SEED = 20261128


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """``(lo, hi)``: order statistics x_(k) and x_(n+1-k) (1-based) of the finite ``values``, the largest k whose
    interval covers the median with at least ``confidence`` (binomial(n, 1/2) tails); NaN for fewer than 6
    values, where no such k exists."""
    x = np.sort(np.asarray([v for v in values if math.isfinite(v)], dtype=float))
    n = len(x)
    tail, k = (1.0 - confidence) / 2.0, 0
    below = 0.0  # P(B <= j - 1) for B ~ Binomial(n, 1/2), summed as j grows
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1) / 2.0 ** n
        if below > tail:
            break
        k = j
    if k == 0:
        return math.nan, math.nan
    return float(x[k - 1]), float(x[n - k])


def ratio_factors(numerators: Sequence[Sequence[float]], denominator: Sequence[float],
                  confidence: float = CONFIDENCE, draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """How far a ratio of medians may move: ``(lo, hi)`` factors of ``mean_i median(numerators[i]) /
    median(denominator)`` (the ratio measured), the ``confidence`` percentile interval of that ratio over a
    bootstrap of the steps of each series (and of the numerators' seeds where there are several), divided by
    the measured ratio. Multiply a ratio built from these series by them for its interval. NaN where a
    series has fewer than 2 finite values."""
    numerators = [_finite(series) for series in numerators]
    denominator = _finite(denominator)
    if not numerators or len(denominator) < 2 or any(len(series) < 2 for series in numerators):
        return math.nan, math.nan
    rng = np.random.default_rng(_SEED)
    measured = np.mean([np.median(series) for series in numerators]) / np.median(denominator)
    if not measured > 0:
        return math.nan, math.nan
    seeds = rng.integers(len(numerators), size=(draws, len(numerators)))  # which baselines each draw takes
    drawn = np.stack([_medians(series, rng, draws) for series in numerators])  # [baselines, draws]
    tops = np.take_along_axis(drawn.T, seeds, axis=1).mean(axis=1)
    ratios = tops / _medians(denominator, rng, draws)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail])
    return float(lo / measured), float(hi / measured)


def measurable(lo: float, hi: float) -> bool:
    """Whether a ratio's interval excludes 1 (a NaN interval: not known, so not measurable)."""
    return bool(math.isfinite(lo) and math.isfinite(hi) and (lo > 1.0 or hi < 1.0))


def _finite(series: Sequence[float]) -> np.ndarray:
    values = np.asarray(series, dtype=float)
    return values[np.isfinite(values)]


def _medians(series: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """The medians of ``draws`` resamples of ``series`` with replacement."""
    return np.median(series[rng.integers(len(series), size=(draws, len(series)))], axis=1)
