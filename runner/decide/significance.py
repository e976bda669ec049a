"""The two-sample tests the gate and the history can use, and the one they do use.

benchmarks/stats_check.py measures each on resampled real repeats (false positives on A/A, power on a
slowdown); docs/statistics.md gives the figures and why TEST is the one chosen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000

PValue = Callable[[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray], float]


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return x[~np.isnan(x)]


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test; NaN below two values a side or with no spread at all."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (exact for small samples without ties)."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan
    from scipy import stats

    return float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)


def bootstrap(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
              resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> float:
    """Two-sided percentile-bootstrap p-value for a difference of means: twice the share of resampled
    differences on the far side of zero (each side resampled with replacement, a fixed seed)."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan
    rng = np.random.default_rng(seed)
    diff = (rng.choice(y, (resamples, y.size)).mean(axis=1) - rng.choice(x, (resamples, x.size)).mean(axis=1))
    below = float(np.mean(diff <= 0))
    above = float(np.mean(diff >= 0))
    return min(1.0, 2 * min(below, above))


TESTS: dict[str, PValue] = {"welch": welch, "mann-whitney": mann_whitney, "bootstrap": bootstrap}
TEST_NAME = "welch"  # chosen from benchmarks/stats_check.py's figures: docs/statistics.md
TEST: PValue = TESTS[TEST_NAME]
