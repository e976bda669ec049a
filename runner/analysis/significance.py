"""The statistics every decision uses, in one place: one alpha and one confidence, Welch's test (from samples or
from each side's mean, std and n: one formula), its interval, the t interval of a mean, the exact test that
compares failure rates as rates, and the Benjamini-Hochberg correction. compare, the gate, check, bisect, the
history and the report's comparison views all come here; none computes a p-value or an interval of its own.

benchmarks/stats_check.py measures the candidate tests on resampled real repeats (false positives on A/A, power on
a slowdown); docs/statistics.md gives the figures and why TEST is the one chosen.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import special  # the t distribution; much lighter to import than scipy.stats

from runner.analysis import resolution
from runner.analysis.resolution import NEGLIGIBLE

ALPHA = 0.05
CONFIDENCE = 1 - ALPHA  # every interval matrix prints is at this confidence (0.95)
BOOTSTRAP_RESAMPLES = 2000
# Many pairs, one threshold: the p-values of one comparison (compare's pairs, one gate rule's pairs) are
# adjusted together so that the expected share of false discoveries stays under alpha.
CORRECTION = "benjamini-hochberg"
RATE_TEST = "fisher"  # failure rates: Fisher's exact test on the 2x2 table of ok and not-ok repeats

PValue = Callable[[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray], float]


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return x[~np.isnan(x)]


def t_quantile(dof: Any, confidence: float = CONFIDENCE) -> Any:
    """The two-sided t quantile for `confidence` at `dof` degrees of freedom (arrays welcome)."""
    return special.stdtrit(dof, 0.5 + confidence / 2)


def t_half_width(std: Any, n: Any, confidence: float = CONFIDENCE) -> Any:
    """Half the width of the t confidence interval of a mean (NaN where n < 2)."""
    n_arr = np.asarray(n, dtype=float)
    df = np.where(n_arr >= 2, n_arr - 1, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return t_quantile(df, confidence) * np.asarray(std, dtype=float) / np.sqrt(n_arr)


def _welch_parts(std_a: Any, n_a: Any, std_b: Any, n_b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Welch's standard error of the difference of means and its Welch-Satterthwaite degrees of freedom."""
    sa, na = np.asarray(std_a, dtype=float), np.asarray(n_a, dtype=float)
    sb, nb = np.asarray(std_b, dtype=float), np.asarray(n_b, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        va, vb = sa * sa / na, sb * sb / nb
        se = np.sqrt(va + vb)
        terms = np.where(va > 0, va * va / (na - 1), 0.0) + np.where(vb > 0, vb * vb / (nb - 1), 0.0)
        dof = (va + vb) ** 2 / terms
    return se, dof


def welch_from_stats(mean_a: Any, std_a: Any, n_a: Any, mean_b: Any, std_b: Any, n_b: Any,
                     q_a: Any = 0.0, q_b: Any = 0.0) -> np.ndarray:
    """Welch's two-sided p-value from each side's mean, std (ddof=1) and n, for whole columns at once. The rule of
    `difference` holds: fewer than two values on a side is NaN (undecided); neither side with any spread (std 0,
    n >= 2 each) is certain, p = 0 when the means differ and 1 when they are equal. `q_a`, `q_b`: each side's
    printed resolution (runner/analysis/resolution.py): where it matters, the difference is first moved toward 0 by
    what rounding alone may explain and each spread is at least the rounding's own, so rounding is never certainty."""
    ma, sa, na = (np.asarray(x, dtype=float) for x in (mean_a, std_a, n_a))
    mb, sb, nb = (np.asarray(x, dtype=float) for x in (mean_b, std_b, n_b))
    ma, sa, mb, sb = _resolved(ma, sa, np.asarray(q_a, dtype=float), mb, sb, np.asarray(q_b, dtype=float))
    se, dof = _welch_parts(sa, na, sb, nb)
    # Two positive means (a throughput, a time, a memory): the test is made on the log scale, as the ratio's interval
    # is (`ratio_interval_stats`: each side's CV over the root of its n, Welch's degrees of freedom), so p < alpha
    # exactly when that interval leaves 1 out; a decision's p-value and its interval never disagree.
    positive = (ma > 0) & (mb > 0) & np.isfinite(ma) & np.isfinite(mb)
    with np.errstate(invalid="ignore", divide="ignore"):
        safe_a, safe_b = np.where(positive, ma, 1.0), np.where(positive, mb, 1.0)
        se_log, dof_log = _welch_parts(sa / safe_a, na, sb / safe_b, nb)
        enough = (na >= 2) & (nb >= 2)
        flat = enough & (sa == 0) & (sb == 0)
        t = np.where(positive, np.abs(np.log(safe_b) - np.log(safe_a)) / se_log, np.abs(mb - ma) / se)
        p = 2 * special.stdtr(np.where(positive, dof_log, dof), -t)
    exact = np.where(ma != mb, 0.0, 1.0)
    out = np.where(enough & ~flat, np.clip(p, 0.0, 1.0), np.where(flat, exact, math.nan))
    return out * np.ones(np.broadcast(ma, mb).shape)


def _resolved(ma: np.ndarray, sa: np.ndarray, qa: np.ndarray, mb: np.ndarray, sb: np.ndarray, qb: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Means and spreads with the printed resolution taken in (identity where it is negligible)."""
    qa, qb = np.where(np.isfinite(qa) & (qa > 0), qa, 0.0), np.where(np.isfinite(qb) & (qb > 0), qb, 0.0)
    with np.errstate(invalid="ignore"):
        half = (qa + qb) / 2
        matters = (half > NEGLIGIBLE * np.abs(ma)) & np.isfinite(ma) & np.isfinite(mb)
    if not np.any(matters):
        return ma, sa, mb, sb
    d = mb - ma
    shrunk = np.sign(d) * np.maximum(np.abs(d) - half, 0.0)
    root12 = math.sqrt(12.0)
    with np.errstate(invalid="ignore"):
        fa = np.where(matters & ~(sa >= qa / root12), qa / root12, sa)
        fb = np.where(matters & ~(sb >= qb / root12), qb / root12, sb)
    return ma, fa, np.where(matters, ma + shrunk, mb), fb


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test; NaN below two values a side or with no spread at all."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan
    return _welch_one(float(x.mean()), float(x.std(ddof=1)), int(x.size), float(y.mean()), float(y.std(ddof=1)),
                      int(y.size))


def _welch_one(ma: float, sa: float, na: int, mb: float, sb: float, nb: int) -> float:
    """`welch_from_stats` for one pair without printed resolution, in plain floats (a history tests thousands of
    points one by one; numpy's arrays of one cost more than the test). The same formula, the same answer."""
    if na < 2 or nb < 2:
        return math.nan
    if sa == 0 and sb == 0:
        return 0.0 if ma != mb else 1.0
    if ma > 0 and mb > 0 and math.isfinite(ma) and math.isfinite(mb):
        ca, cb, diff = sa / ma, sb / mb, abs(math.log(mb) - math.log(ma))
    else:
        ca, cb, diff = sa, sb, abs(mb - ma)
    va, vb = ca * ca / na, cb * cb / nb
    se = math.sqrt(va + vb)
    terms = (va * va / (na - 1) if va > 0 else 0.0) + (vb * vb / (nb - 1) if vb > 0 else 0.0)
    dof = (va + vb) ** 2 / terms
    return min(1.0, max(0.0, 2 * float(special.stdtr(dof, -diff / se))))


def welch_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                   confidence: float = CONFIDENCE, quanta: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The interval of mean(b) - mean(a) with Welch's degrees of freedom: it excludes 0 exactly when `welch`
    gives p < 1 - confidence. Neither side with spread: the difference itself, both ends. With a printed
    resolution that matters, widened on each end by what rounding alone may move the difference."""
    x, y = _clean(a), _clean(b)
    diff = float(y.mean() - x.mean())
    rounding = resolution.half_width(quanta[0], quanta[1], float(x.mean()))
    sx, sy = float(x.std(ddof=1)), float(y.std(ddof=1))
    if rounding:
        sx, sy = resolution.floor_std(sx, quanta[0]), resolution.floor_std(sy, quanta[1])
    se, dof = _welch_parts(sx, x.size, sy, y.size)
    if float(se) == 0:
        return diff - rounding, diff + rounding
    half = float(t_quantile(dof, confidence) * se)
    return diff - half - rounding, diff + half + rounding


def ratio_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                   confidence: float = CONFIDENCE, quanta: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The interval of the ratio mean(b) / mean(a) from two samples: `ratio_interval_stats` of their means, spreads
    (ddof=1) and sizes."""
    x, y = _clean(a), _clean(b)
    if not (x.size and y.size):
        return math.nan, math.nan
    sx = float(x.std(ddof=1)) if x.size > 1 else math.nan
    sy = float(y.std(ddof=1)) if y.size > 1 else math.nan
    return ratio_interval_stats(float(x.mean()), sx, int(x.size), float(y.mean()), sy, int(y.size), confidence,
                                quanta)


def ratio_interval_stats(ma: float, sx: float, na: int, mb: float, sy: float, nb: int,
                         confidence: float = CONFIDENCE, quanta: tuple[float, float] = (0.0, 0.0)
                         ) -> tuple[float, float]:
    """The interval of the ratio mb / ma, made on the log scale: log(mb / ma) with the delta method's standard error
    (each side's CV over the root of its n) and Welch's degrees of freedom, then exponentiated. A ratio's interval
    stays above 0 (a change is never below -100%, however few or spread the repeats) and is as wide each way in the
    log, as ratios and their geometric mean are. Neither side with spread (n >= 2 each, std 0): the ratio itself, both
    ends; fewer than two values on a side, or a mean that is not above 0: NaN. `quanta`: each side's printed
    resolution; where it matters (runner/analysis/resolution.py) each mean may be off by half of it, so the interval
    spans the ratios of the means moved apart by that, and each spread is at least the rounding's own."""
    if not (ma > 0 and mb > 0 and math.isfinite(ma) and math.isfinite(mb)) or na < 2 or nb < 2:
        return math.nan, math.nan
    ha = hb = 0.0
    if resolution.half_width(quanta[0], quanta[1], ma):
        ha, hb = quanta[0] / 2, quanta[1] / 2
        sx, sy = resolution.floor_std(sx, quanta[0]), resolution.floor_std(sy, quanta[1])
    low, high = (mb - hb) / (ma + ha), (mb + hb) / (ma - ha) if ma > ha else math.inf
    se, dof = log_ratio_se(ma, sx, na, mb, sy, nb)
    if se == 0:
        return low, high
    half = float(t_quantile(dof, confidence) * se)
    with np.errstate(over="ignore"):  # an interval past what a float holds is unbounded: inf
        return max(low, 0.0) * float(np.exp(-half)), high * float(np.exp(half))


def log_ratio_se(ma: float, sx: float, na: int, mb: float, sy: float, nb: int) -> tuple[float, float]:
    """The standard error of log(mb / ma) by the delta method (each side's CV over the root of its n) and its Welch
    degrees of freedom: what the ratio's interval and the test on the log scale are made of."""
    se, dof = _welch_parts(sx / ma, na, sy / mb, nb)
    return float(se), float(dof)


def geometric_interval(log_ratios: Sequence[float], ses: Sequence[float], dofs: Sequence[float],
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of the geometric mean of several ratios, each with its log standard error and degrees of freedom:
    the mean of the logs, its standard error sqrt(sum se^2) / k, Welch-Satterthwaite's degrees of freedom. The
    geometric mean over these pairs, as uncertain as their measurements make it (NaN without one)."""
    lr, se, df = (np.asarray(x, dtype=float) for x in (log_ratios, ses, dofs))
    keep = np.isfinite(lr) & np.isfinite(se)
    if not keep.any():
        return math.nan, math.nan
    lr, se, df = lr[keep], se[keep], df[keep]
    k = lr.size
    var = float((se * se).sum())
    centre = float(lr.mean())
    if var == 0:
        return math.exp(centre), math.exp(centre)
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = var * var / float(np.where(se > 0, se ** 4 / df, 0.0).sum())
    half = float(t_quantile(dof, confidence)) * math.sqrt(var) / k
    return math.exp(centre - half), math.exp(centre + half)


def mean_interval(mean: Any, std: Any, n: Any, positive: Any = False, confidence: float = CONFIDENCE
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The interval of a mean, for whole columns at once (NaN below two values). Where `positive` (a throughput, a
    time, a memory, an energy: a figure that is above 0 by nature, with a positive mean) it is made on the log scale
    as a ratio's is: log(mean) +- t * CV / sqrt(n), exponentiated, so it never reaches 0 or below however few or
    spread the repeats; otherwise the t interval, mean +- t * std / sqrt(n)."""
    m, s = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    half = t_half_width(s, n, confidence)
    pos = np.asarray(positive, dtype=bool) & (m > 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        log_half = np.where(pos, half / np.where(m > 0, m, 1.0), 0.0)
        low = np.where(pos, m * np.exp(-log_half), m - half)
        high = np.where(pos, m * np.exp(log_half), m + half)
    return low, high


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (exact for small samples without ties)."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
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
    rounding: float = 0.0  # how far the printed resolution alone may move the difference of the means (0: none)

    @property
    def decided(self) -> bool:
        return not math.isnan(self.p_value)


def too_few(n_a: int, n_b: int) -> str:
    """Why a pair cannot be tested: '1 ok repeat on A (a test needs 2+ per side)'."""
    short = [f"{n} ok repeat{'s' if n != 1 else ''} on {side}" for side, n in (("A", n_a), ("B", n_b)) if n < 2]
    return f"{' and '.join(short)} (a test needs 2+ per side)"


def difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, test: PValue = TEST,
               quanta: tuple[float, float] = (0.0, 0.0)) -> Difference:
    """The one rule every decision uses: fewer than two values on a side is undecided; every value equal on
    both sides (n >= 2 each; typical of GPU peak memory) is certain, p = 0 when the values differ and 1 when
    they do not, so the size of the change decides; otherwise the test's p-value. `quanta`: each side's printed
    resolution; where it matters (runner/analysis/resolution.py), Welch's test on the difference less what
    rounding may explain, never certainty."""
    x, y = _clean(a), _clean(b)
    if x.size < 2 or y.size < 2:
        return Difference(math.nan, too_few(int(x.size), int(y.size)))
    rounding = resolution.half_width(quanta[0], quanta[1], float(x.mean()))
    if rounding:
        p = float(welch_from_stats(x.mean(), x.std(ddof=1), x.size, y.mean(), y.std(ddof=1), y.size, *quanta))
        return Difference(p, rounding=rounding) if not math.isnan(p) else Difference(p, "the test gave no p-value")
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return Difference(0.0 if x[0] != y[0] else 1.0, exact=True)
    p = test(x, y)
    if math.isnan(p):
        return Difference(math.nan, "the test gave no p-value")
    return Difference(p)


def rate_difference(bad_a: int, n_a: int, bad_b: int, n_b: int) -> Difference:
    """Two failure rates compared as rates (`bad` of `n` repeats did not end ok). Both sides pure (every repeat
    one way on each side) is certain, as `difference` calls two sides without spread: p = 0 when they differ,
    1 when not. A side with mixed outcomes gets Fisher's exact test, so one crash in three is not "failed"."""
    if n_a < 1 or n_b < 1:
        return Difference(math.nan, f"no repeat ended on {'A' if n_a < 1 else 'B'}")
    pure_a, pure_b = bad_a in (0, n_a), bad_b in (0, n_b)
    if pure_a and pure_b:
        return Difference(0.0 if (bad_a == 0) != (bad_b == 0) else 1.0, exact=True)
    return Difference(_fisher(n_a - bad_a, bad_a, n_b - bad_b, bad_b))


FISHER_TIES = 10**14  # scipy's relative tolerance (1e-14) for a table as likely as the one observed
FISHER_EXACT_MOST = 4000  # the most tables the exact sum takes (0.02 s at 4,000); scipy's fisher_exact beyond


@functools.lru_cache(maxsize=4096)
def _fisher(ok_a: int, bad_a: int, ok_b: int, bad_b: int) -> float:
    """Fisher's exact two-sided p of the 2x2 table [[ok_a, bad_a], [ok_b, bad_b]], as scipy.stats.fisher_exact defines
    it (the tables with the same margins no likelier than the observed one, within a relative 1e-14; 1 when the
    observed is the likeliest), in exact integer arithmetic rounded once: scipy's float sums differ from it by 1e-15 at
    most, relative (tests/analysis/test_fisher.py), and importing scipy.stats costs 0.9 s of a report. Margins that
    allow more than FISHER_EXACT_MOST tables (thousands of repeats failing on both sides) get scipy's floats.
    Once per table: a report asks it of hundreds of pairs whose repeats ended alike."""
    rows, n = (ok_a + bad_a, ok_b + bad_b), ok_a + ok_b  # the margins: each side's repeats, and all the ok ones
    if 0 in (*rows, n, bad_a + bad_b):
        return 1.0
    low, high = max(0, n - rows[1]), min(n, rows[0])
    if high - low > FISHER_EXACT_MOST:  # thousands of repeats failing on both sides: scipy's floats, in time
        from scipy.stats import fisher_exact

        return float(fisher_exact([[ok_a, bad_a], [ok_b, bad_b]], alternative="two-sided").pvalue)
    weight = {low: math.comb(rows[0], low) * math.comb(rows[1], n - low)}  # P(x) = weight / comb(all, n)
    for x in range(low, high):  # each from the one before: comb(r0, x+1) comb(r1, n-x-1), exactly
        weight[x + 1] = weight[x] * (rows[0] - x) * (n - x) // ((x + 1) * (rows[1] - n + x + 1))
    seen, likeliest = weight[ok_a], weight[(n + 1) * (rows[0] + 1) // (sum(rows) + 2)]  # scipy's mode
    if abs(seen - likeliest) * FISHER_TIES <= max(seen, likeliest):
        return 1.0
    tail = sum(w for w in weight.values() if w * FISHER_TIES <= seen * (FISHER_TIES + 1))
    return min(float(Fraction(tail, math.comb(sum(rows), n))), 1.0)


def adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values over the decided ones; NaN (undecided) stays NaN and does not count as
    a test. Compare each with alpha."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, math.nan)
    tested = ~np.isnan(p)
    if tested.any():
        out[tested] = benjamini_hochberg(np.clip(p[tested], 0.0, 1.0))
    return out


def benjamini_hochberg(ps: np.ndarray) -> np.ndarray:
    """scipy.stats.false_discovery_control(ps, method="bh") for a 1-d array of p-values in [0, 1], step for step and
    so to the bit (tests/analysis/test_fdr.py compares them): importing scipy.stats costs 0.8 s on the
    2-vCPU VM, a quarter of the report of a small store. Sorted (stably), each times m/i, the running minimum from
    the largest down, back in the given order, clipped to [0, 1]."""
    m = ps.shape[-1]
    if m <= 1:
        return ps
    order = np.argsort(ps, kind="stable")
    adjusted = ps[order] * (m / np.arange(1, m + 1, dtype=ps.dtype))
    np.minimum.accumulate(adjusted[::-1], out=adjusted[::-1])
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return np.clip(out, 0.0, 1.0)
