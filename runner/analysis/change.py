"""One pair's change, B against A, as every decision and every view takes it: the ratio of the means B/A and its
interval (made on the log scale: it never reaches 0), from which the gate's rules, compare's "same", the words, the
colours and the JSON fields all derive; and the rule that turns it into a verdict that says only what the data can
carry:

- **fail** when the change is beyond the threshold and significant (the caller's p-value, adjusted over its family);
- **pass** only when the data rule the change out: the interval of the change lies inside the threshold (for a
  one-sided rule such as `slower:3%`, its end on the feared side is below 3%);
- **undecided** otherwise, with the interval and the repeats a side that the spread seen says would decide it.

The interval is two-sided at CONFIDENCE (95%), so a pass is a one-sided test at 2.5%: a true change beyond the
threshold passes at most that often (benchmarks/stats_check.py measures it on real noise; docs/statistics.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from runner.analysis import resolution, significance
from runner.analysis.significance import CONFIDENCE, t_quantile
from runner.analysis.verdict import Verdict
from runner.record.metrics import Metric

# The ratios a float can size both ways: beyond them (a side's mean a subnormal or 1e-300 of the other's) B/A or A/B
# overflows, and no rule, word or JSON field could carry the change.
SIZEABLE = (1e-300, 1e300)
MOST_REPEATS = 10_000  # an estimate beyond this is "more than 10,000": the change sits at the threshold


def ratio_of(mean_a: float, mean_b: float) -> float:
    """B/A of two means, NaN unless both are positive and finite and the ratio can be sized both ways."""
    if not (0 < mean_a < math.inf and 0 < mean_b < math.inf):
        return math.nan
    r = mean_b / mean_a
    return r if SIZEABLE[0] < r < SIZEABLE[1] else math.nan


@dataclass(frozen=True)
class Change:
    """The change of one pair: B/A, its interval at `confidence` (NaN ends: no interval, fewer than two values a
    side), and what an estimate of the repeats needed reads (each side's CV and n). `exact`: neither side has any
    spread, so the ratio is the interval."""

    ratio: float
    low: float
    high: float
    n_a: int = 0
    n_b: int = 0
    cv_a: float = math.nan
    cv_b: float = math.nan
    confidence: float = CONFIDENCE
    exact: bool = False
    se: float = math.nan   # the standard error of log(B/A), and its degrees of freedom (what a geometric mean reads)
    dof: float = math.nan

    @property
    def sized(self) -> bool:
        return not math.isnan(self.ratio)

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def toward(self, sense: int) -> tuple[float, float, float]:
        """(change, low, high) as fractions in the direction `sense` fears: +1 a higher B (B/A - 1), -1 a lower B
        (A/B - 1); the ends ordered low to high. NaN where there is none."""
        def frac(r: float) -> float:
            if math.isnan(r):
                return math.nan
            if r <= 0:
                return math.inf if sense < 0 else -1.0
            if math.isinf(r):
                return math.inf if sense > 0 else -1.0
            return r - 1 if sense > 0 else 1 / r - 1
        ends = sorted((frac(self.low), frac(self.high))) if self.has_interval else [math.nan, math.nan]
        return frac(self.ratio), ends[0], ends[1]


def of_stats(mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int,
             quanta: tuple[float, float] = (0.0, 0.0), confidence: float = CONFIDENCE) -> Change:
    """The change from each side's mean, std (ddof=1) and n."""
    r = ratio_of(mean_a, mean_b)
    cv_a = std_a / mean_a if n_a >= 2 and mean_a > 0 else math.nan
    cv_b = std_b / mean_b if n_b >= 2 and mean_b > 0 else math.nan
    if math.isnan(r):
        return Change(r, math.nan, math.nan, n_a, n_b, cv_a, cv_b, confidence)
    low, high = significance.ratio_interval_stats(mean_a, std_a, n_a, mean_b, std_b, n_b, confidence, quanta)
    exact = n_a >= 2 and n_b >= 2 and std_a == 0 and std_b == 0
    se, dof = math.nan, math.nan
    if n_a >= 2 and n_b >= 2:
        sx, sy = std_a, std_b
        if resolution.half_width(quanta[0], quanta[1], mean_a):  # spreads at least the rounding's own, as the interval
            sx, sy = resolution.floor_std(sx, quanta[0]), resolution.floor_std(sy, quanta[1])
        se, dof = significance.log_ratio_se(mean_a, sx, n_a, mean_b, sy, n_b)
        if 0 < low and math.isfinite(high) and high > low and dof == dof:
            # As uncertain as the interval a reader sees: rounding moves the means too (a geometric mean reads this).
            se = max(se, math.log(high / low) / (2 * float(t_quantile(dof, confidence))))
    return Change(r, low, high, n_a, n_b, cv_a, cv_b, confidence, exact, se, dof)


def of_samples(a: object, b: object, quanta: tuple[float, float] = (0.0, 0.0),
               confidence: float = CONFIDENCE) -> Change:
    """The change of two samples (NaNs dropped)."""
    import numpy as np

    x, y = (np.asarray(v, dtype=float) for v in (a, b))
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    if not (x.size and y.size):
        return Change(math.nan, math.nan, math.nan, int(x.size), int(y.size))
    sx = float(x.std(ddof=1)) if x.size > 1 else math.nan
    sy = float(y.std(ddof=1)) if y.size > 1 else math.nan
    if x.size > 1 and np.ptp(x) == 0:
        sx = 0.0
    if y.size > 1 and np.ptp(y) == 0:
        sy = 0.0
    return of_stats(float(x.mean()), sx, int(x.size), float(y.mean()), sy, int(y.size), quanta, confidence)


@dataclass(frozen=True)
class Decision:
    """A verdict on a change against a threshold, and what would decide it when undecided."""

    verdict: Verdict
    reason: str
    needed: int | None = None   # repeats a side that would decide it, as far as the spread seen says (None: unknown)


def _log_threshold(threshold: float) -> float:
    return math.log1p(threshold)


def _half(cv_a: float, cv_b: float, n: int, confidence: float) -> float:
    """Half the log interval's width with n repeats a side and these CVs (Welch's degrees of freedom)."""
    va, vb = cv_a * cv_a / n, cv_b * cv_b / n
    se = math.sqrt(va + vb)
    if se == 0:
        return 0.0
    terms = (va * va + vb * vb) / (n - 1)
    dof = (va + vb) ** 2 / terms
    return float(t_quantile(dof, confidence)) * se


def needed(change: Change, threshold: float, sense: int | None, coarse: float = 0.0,
           fail_alpha: float | None = None) -> int | None:
    """The repeats a side at which the decision would be reached if the means and spreads stayed as measured: a
    significant change beyond the threshold, or an interval inside it (`sense`: the rule's feared direction, +1 or
    -1; None for both ways, compare's "same"). `coarse`: what the printed resolution alone may move the change by,
    which no number of repeats shrinks; `fail_alpha`: the level a fail must reach once adjusted over its family (its
    Bonferroni bound, alpha over the tests; default the interval's). None when the spread is unknown (fewer than two
    values on both sides), when rounding alone leaves no room, or when the change sits so near the threshold that
    MOST_REPEATS would not do."""
    if not change.sized:
        return None
    cvs = [c for c in (change.cv_a, change.cv_b) if not math.isnan(c)]
    if not cvs:
        return None
    cv_a = change.cv_a if not math.isnan(change.cv_a) else max(cvs)
    cv_b = change.cv_b if not math.isnan(change.cv_b) else max(cvs)
    f = math.log(change.ratio) * (sense if sense else 1)
    f = abs(f) if sense is None else f
    t = _log_threshold(threshold)
    r = math.log1p(coarse) if coarse else 0.0
    # Beyond the threshold (beyond what rounding could make up): decided when significant at the family's level, the
    # change less its rounding clearing the interval; inside: when the interval and the rounding clear the threshold.
    beyond = f - r > t
    room = f - r if beyond else t - f - r
    if room <= 0:
        return None
    level = 1 - fail_alpha if beyond and fail_alpha is not None else change.confidence

    def decides(n: int) -> bool:
        return _half(cv_a, cv_b, n, level) < room

    start = max(2, change.n_a + 1, change.n_b + 1)  # asked of an undecided change: more than it has
    if decides(start):
        return start
    hi = start
    while not decides(hi):
        if hi >= MOST_REPEATS:
            return None
        hi = min(MOST_REPEATS, hi * 2)
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def pct(x: float) -> str:
    """A change as a percentage, '5.1%'; past 10,000% in three figures ('7.46e+21%')."""
    if math.isinf(x):
        return "∞%"
    return f"{x:.1%}" if abs(x) < 100 else f"{x * 100:.3g}%"


def threshold_text(x: float) -> str:
    """A threshold as the user gave it: '2%', '2.5%', '0.5%' (never rounded to a whole percent that it is not)."""
    return f"{x * 100:.4g}%"


def _side_words(r: float, metric: Metric) -> tuple[str, float]:
    """A ratio B/A as (word, size): ('slower', 0.051) for a throughput 4.9% lower (A/B - 1: as compare's '1.05x
    slower'); ('higher', 0.02) for a peak memory 2% higher; ('', 0) for no change."""
    if metric.better == "faster":  # speed: how many times faster or slower, both ways as a factor
        gain = r if metric.higher_is_better else 1 / r
        return (metric.better, gain - 1) if gain >= 1 else (metric.worse, 1 / gain - 1)
    return ("higher", r - 1) if r >= 1 else ("lower", 1 - r)


def span_words(change: Change, metric: Metric) -> str:
    """The interval of the change in words: 'B is 0.6%-5.1% slower (95%)', 'B is between 1.2% faster and 4.0% slower
    (95%)'; for a metric without speed words, "B's peak memory is 2.0%-6.1% higher (95%)". '' without an interval."""
    if not change.has_interval or change.low <= 0 or math.isinf(change.high):
        return ""
    level = f"{change.confidence * 100:.3g}%"
    subject = "B is" if metric.better == "faster" else f"B's {metric.label} is"
    (wl, sl), (wh, sh) = _side_words(change.low, metric), _side_words(change.high, metric)
    # Past half again, a percentage misleads ("108.7% slower" of a throughput is 2.09x slower, not below zero): the
    # ends are said as compare says a change, in times.
    size = pct if max(sl, sh) < 0.5 else (lambda s: f"{1 + s:.2f}x")
    if wl == wh:
        a, b = sorted((sl, sh))
        return f"{subject} {size(a)}-{size(b)} {wl} ({level})"
    good = metric.better if metric.better == "faster" else "lower"
    (w1, s1), (w2, s2) = ((wl, sl), (wh, sh)) if wl == good else ((wh, sh), (wl, sl))
    return f"{subject} between {size(s1)} {w1} and {size(s2)} {w2} ({level})"


def needed_words(n: int | None, change: Change | None = None) -> str:
    """'about 9 repeats a side would decide', or why no number can be given: the spread is unknown (fewer than two
    values on each side), or the change sits so near the threshold that MOST_REPEATS would
    not do."""
    if n is not None:
        return f"about {n} repeats a side would decide"
    if change is not None and math.isnan(change.cv_a) and math.isnan(change.cv_b):
        return "no estimate of the repeats that would decide it (the spread is unknown)"
    return (f"no number of repeats would decide it at this change (it sits at the threshold: more than "
            f"{MOST_REPEATS:,} a side)")


def judge(change: Change, threshold: float, sense: int | None, p_adjusted: float, alpha: float,
          metric: Metric, coarse: float = 0.0, p_value: float | None = None, family: int = 1) -> Decision:
    """The verdict on a tested change: fail when it is beyond `threshold` and significant (`p_adjusted`, the
    caller's p-value adjusted over its `family` of tests, below `alpha`, and the interval leaving no change out),
    pass only when its interval lies inside the threshold, undecided otherwise with the interval and the repeats that
    would decide. `sense`: the direction a one-sided rule fears (+1 a higher B, -1 a lower B); None asks "is B the
    same as A?" both ways (compare). `coarse`: how far the printed resolution alone may move the change (its interval
    already spans it). `p_value`: the p before the adjustment, to say why a change that is significant alone is not
    once adjusted."""
    if not change.sized:
        return Decision(Verdict.UNDECIDED, "no ratio of the means to size")
    if sense is None:
        up = change.toward(+1)
        size = abs(math.log(change.ratio))
        t = _log_threshold(threshold)
        big = size - math.log1p(coarse) > t if coarse else size > t
        inside = change.has_interval and change.low >= 1 / (1 + threshold) and change.high <= 1 + threshold
        point = up[0]
    else:
        point, _, hi = change.toward(sense)
        big = point - coarse > threshold
        inside = change.has_interval and hi <= threshold
    # Significant by the test after the adjustment, and by the interval the reader sees: where rounding widens the
    # interval to reach no change, the test's shift of the difference is not enough to call it.
    clear = not change.has_interval or change.low > 1 or change.high < 1
    significant = p_adjusted < alpha and clear
    p_text = "no spread on either side" if change.exact else f"p={p_adjusted:.3g}"
    if big and significant:
        return Decision(Verdict.FAIL, f"{pct(abs(point)) if sense is None else pct(point)} beyond "
                                      f"{'±' if sense is None else ''}{pct(threshold)}, {p_text}")
    span = span_words(change, metric)
    if inside:
        within = f"within {'±' if sense is None else ''}{pct(threshold)}"
        if change.exact or not span:
            return Decision(Verdict.PASS, f"{point:+.1%} is {within} ({p_text})")
        return Decision(Verdict.PASS, f"{span}: {within}")
    n = needed(change, threshold, sense, coarse, alpha / max(family, 1))
    why = [span or f"{point:+.1%}"]
    if big:
        raw = p_value if p_value is not None else p_adjusted
        edge = f"{'±' if sense is None else ''}{pct(threshold)}"
        if raw < alpha <= p_adjusted and family > 1:
            why.append(f"beyond {edge}, significant alone (p={raw:.3g}) but not once adjusted over the {family} tests "
                       f"(p={p_adjusted:.3g})")
        elif p_adjusted < alpha and not clear:
            why.append(f"beyond {edge}, but rounding alone may make up the change (its interval reaches no change)")
        else:
            why.append(f"beyond {edge} but not significant ({p_text})")
    elif coarse:
        why.append(f"printed too coarsely to rule it out (rounding alone may move it by {pct(coarse)})")
    why.append(needed_words(n, change) if n is not None or not coarse else
               "more repeats would not decide it: the figures are printed too coarsely")
    return Decision(Verdict.UNDECIDED, "; ".join(why), n)


@dataclass(frozen=True)
class BoundTest:
    """A cell's mean against a reference's bound: where its interval lies. `verdict` is PASS (the interval inside),
    FAIL (the mean outside; significant only once `p_value`, adjusted over the references' family, is below alpha)
    or UNDECIDED (the interval across an edge)."""

    verdict: Verdict
    p_value: float        # the test of the mean against the nearest edge (NaN: inside, or no spread to test)
    needed: int | None    # repeats that would decide it, as far as the spread seen says
    why: str = ""


def bound_test(mean: float, std: float, n: int, low: float, high: float, ci: tuple[float, float],
               positive: bool, confidence: float = CONFIDENCE, fail_alpha: float | None = None) -> BoundTest:
    """The mean of n values (std ddof=1, `ci` its interval as the report shows it) against the bound [low, high]: the
    test is made on the log scale where the figure is `positive` (an edge at or below 0 is then beyond every value it
    can take: a positive figure is always above `>= 0` and never inside `<= 0`), else on the values. `fail_alpha`: the
    level a fail must reach once adjusted over the references (sizes the repeats estimate on that side)."""
    inside = low <= mean <= high
    if n < 2 or math.isnan(std):
        return BoundTest(Verdict.UNDECIDED, math.nan, None, "one ok repeat has no interval (a test needs 2+)")
    log = positive and mean > 0
    edges = [e for e in (low, high) if math.isfinite(e) and (e > 0 or not log)]
    if not edges:  # every edge at or below 0 on a positive figure: certain either way
        return BoundTest(Verdict.PASS if inside else Verdict.FAIL, math.nan if inside else 0.0, None)

    def at(x: float) -> float:
        return math.log(x) if log else x
    spread = (std / mean) if log else std
    near = min(edges, key=lambda e: abs(at(mean) - at(e)))
    room = abs(at(mean) - at(near))
    if spread == 0:
        return BoundTest(Verdict.PASS if inside else Verdict.FAIL, math.nan if inside else 0.0, None)
    se = spread / math.sqrt(n)
    if inside and ci[0] >= low and ci[1] <= high:
        return BoundTest(Verdict.PASS, math.nan, None)
    p = 2 * float(special.stdtr(n - 1, -room / se)) if not inside else math.nan
    level = 1 - fail_alpha if fail_alpha is not None and not inside else confidence
    return BoundTest(Verdict.FAIL if not inside else Verdict.UNDECIDED, p, repeats_for(spread, n, room, level))


def repeats_for(spread: float, n: int, room: float, level: float) -> int | None:
    """The fewest repeats (more than n) whose t interval of a mean, at `level`, is narrower than `room`, with this
    spread per repeat; None past MOST_REPEATS or without room."""
    if room <= 0 or not spread > 0:
        return None

    def decides(k: int) -> bool:
        return float(t_quantile(k - 1, level)) * spread / math.sqrt(k) < room

    hi = n + 1
    while not decides(hi):
        if hi >= MOST_REPEATS:
            return None
        hi = min(MOST_REPEATS, hi * 2)
    lo = max(n, hi // 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi
