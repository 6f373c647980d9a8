"""How sure a timing is: a distribution-free 95% interval of a median, and of a ratio of medians.

A trial times every step; its step time is a median, and the machine's noise (other processes, a
hypervisor's steal, stragglers) moves it. The interval of a median comes from the order statistics (the
binomial's tails: no assumption on the distribution of step times); the interval of a ratio of medians
(a speedup, an overhead) from a bootstrap over the steps of both trials, and over the baseline's seeds
where there are several. The bootstrap draws from a fixed seed: the same steps give the same interval.
An interval that cannot be had (too few steps) is NaN; one that includes 1 says the difference is not
measurable here.

Steps of one run share what the run landed on (cores, memory placement, what else ran meanwhile): a
second run of the same configuration differs by more than its steps' noise. Where a study runs a
configuration more than once (several seeds), that spread between runs is measured (``run_effects``) and
every ratio's bootstrap also draws a rerun of each trial compared from it, so the interval says what
running the study again would show, not only what one run's steps say.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


def run_effects(runs: Iterable[Sequence[float]]) -> np.ndarray:
    """How much a run moves its median step: per configuration, the log of each run's median step minus
    their mean, scaled by sqrt(n / (n - 1)) so that their spread is the sample standard deviation's; pooled
    over the configurations of ``runs`` (each the median steps of one configuration's runs) run at least
    twice. Empty where none was."""
    effects = []
    for medians in runs:
        logs = np.log([m for m in medians if math.isfinite(m) and m > 0])
        if len(logs) >= 2:
            effects.extend((logs - logs.mean()) * math.sqrt(len(logs) / (len(logs) - 1)))
    return np.asarray(effects, dtype=float)


def spread(effects: np.ndarray) -> float:
    """The standard deviation of a run's log median step that ``effects`` measure (NaN without any)."""
    return float(math.sqrt(np.mean(effects ** 2))) if len(effects) else math.nan


def ratio_factors(pairs: Sequence[tuple[Sequence[Sequence[float]], Sequence[float]]],
                  effects: np.ndarray | None = None, inverse: bool = False, confidence: float = CONFIDENCE,
                  draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """How far a mean of ratios of medians may move. Each pair ``(numerators, denominator)`` (a trial of a
    configuration: its baselines' steps and its own) has the ratio ``mean_i median(numerators[i]) /
    median(denominator)``, its reciprocal with ``inverse`` (an overhead); the result is ``(lo, hi)``, the
    ``confidence`` percentile interval of the mean of the pairs' ratios over a bootstrap of the steps of each
    series (and of each pair's baselines where there are several), divided by the mean measured. With
    ``effects`` (``run_effects``), each draw also moves every series by a rerun's effect drawn from them. A
    series given to several pairs (the same object: one baseline trial of several seeds) is drawn once per
    draw. Pairs with a series of fewer than 2 finite values are left out; NaN where none is left. Multiply
    the mean ratio by the factors for its interval."""
    rng = np.random.default_rng(_SEED)
    drawn: dict[int, np.ndarray] = {}

    def draw(series: Sequence[float], finite: np.ndarray) -> np.ndarray:
        if id(series) not in drawn:
            medians = _medians(finite, rng, draws)
            if effects is not None and len(effects):  # the series run again: moved by a measured run's effect
                medians = medians * np.exp(effects[rng.integers(len(effects), size=draws)])
            drawn[id(series)] = medians
        return drawn[id(series)]

    measured, ratios = [], []
    for numerators, denominator in pairs:
        tops, bottom = [_finite(series) for series in numerators], _finite(denominator)
        if not tops or len(bottom) < 2 or any(len(series) < 2 for series in tops):
            continue
        each = np.stack([draw(series, finite) for series, finite in zip(numerators, tops)], axis=1)
        taken = rng.integers(len(tops), size=(draws, len(tops)))  # which baselines each draw takes
        top_draws, bottom_draws = np.take_along_axis(each, taken, axis=1).mean(axis=1), draw(denominator, bottom)
        top, bottom_median = np.mean([np.median(series) for series in tops]), np.median(bottom)
        measured.append(bottom_median / top if inverse else top / bottom_median)
        ratios.append(bottom_draws / top_draws if inverse else top_draws / bottom_draws)
    mean = float(np.mean(measured)) if measured else math.nan
    if not mean > 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(np.mean(ratios, axis=0), [tail, 1.0 - tail])
    return float(lo / mean), float(hi / mean)


def measurable(lo: float, hi: float) -> bool:
    """Whether a ratio's interval excludes 1 (a NaN interval: not known, so not measurable)."""
    return bool(math.isfinite(lo) and math.isfinite(hi) and (lo > 1.0 or hi < 1.0))


def _finite(series: Sequence[float]) -> np.ndarray:
    values = np.asarray(series, dtype=float)
    return values[np.isfinite(values)]


def _medians(series: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """The medians of ``draws`` resamples of ``series`` with replacement."""
    return np.median(series[rng.integers(len(series), size=(draws, len(series)))], axis=1)
