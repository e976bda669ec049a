"""The two-sample tests the gate and the history can use, and the one they do use.

benchmarks/stats_check.py measures each on resampled real repeats (false positives on A/A, power on a
slowdown); docs/statistics.md gives the figures and why TEST is the one chosen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
# Many pairs, one threshold: the p-values of one comparison (compare's pairs, one gate rule's pairs) are
# adjusted together so that the expected share of false discoveries stays under alpha.
CORRECTION = "benjamini-hochberg"

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


@dataclass(frozen=True)
class Difference:
    """Whether two samples differ as far as the data can tell: a p-value, or why there is none."""

    p_value: float      # NaN when undecided
    why: str = ""       # why undecided ('' when decided)
    exact: bool = False  # both sides without any spread: the difference (or its absence) is certain

    @property
    def decided(self) -> bool:
        return not math.isnan(self.p_value)


def too_few(n_a: int, n_b: int) -> str:
    """Why a pair cannot be tested: '1 ok repeat on A (a test needs 2+ per side)'."""
    short = [f"{n} ok repeat{'s' if n != 1 else ''} on {side}" for side, n in (("A", n_a), ("B", n_b)) if n < 2]
    return f"{' and '.join(short)} (a test needs 2+ per side)"


def difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, test: PValue = TEST
               ) -> Difference:
    """The one rule every decision uses: fewer than two values on a side is undecided; every value equal on
    both sides (n >= 2 each; typical of GPU peak memory) is certain, p = 0 when the values differ and 1 when
    they do not, so the size of the change decides; otherwise the test's p-value."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2:
        return Difference(math.nan, too_few(int(x.size), int(y.size)))
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return Difference(0.0 if x[0] != y[0] else 1.0, exact=True)
    p = test(x, y)
    if math.isnan(p):
        return Difference(math.nan, "the test gave no p-value")
    return Difference(p)


def adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control) over the decided ones;
    NaN (undecided) stays NaN and does not count as a test. Compare each with alpha."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, math.nan)
    tested = ~np.isnan(p)
    if tested.any():
        from scipy.stats import false_discovery_control

        out[tested] = false_discovery_control(np.clip(p[tested], 0.0, 1.0), method="bh")
    return out
