"""Bisect's pair test: one environment's repeats against another's, judged with the shared core (outcomes as
rates, metric definitions, a loss at a common step: runner/analysis/comparable.py; Welch's test and its interval:
runner/analysis/significance.py) and the one verdict type. The search over many environments is bisect_search.py."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from runner.analysis import resolution, significance
from runner.analysis.change import threshold_text
from runner.analysis.comparable import (
    Outcomes,
    at_common_step,
    no_ratio,
    outcome_change,
    why_not,
    with_outcomes,
)
from runner.analysis.verdict import Verdict
from runner.record.metrics import METRICS, Metric
from runner.record.metrics import STATUS_METRIC as STATUS  # only how each environment's repeats ended

OK = "ok"


@dataclass(frozen=True)
class Sample:
    """One environment's repeats of the cell, as far as a comparison may look: how each ended (final statuses,
    in repeat order) and the metric of the ok ones. `missing`: why nothing final could be measured there
    (the environment could not start), '' when it could."""

    statuses: tuple[str, ...] = ()
    values: tuple[float, ...] = ()
    reason: str = ""
    missing: str = ""
    # Per value (the ok repeats'): training steps before it, and its losses by step (bench's loss_at); and how
    # the metric was obtained (runner/analysis/comparable.py definition_text, joined when repeats differ).
    steps: tuple[int | None, ...] = ()
    ladders: tuple[Mapping[int, float] | None, ...] = ()
    definition: str = ""
    quanta: resolution.Quanta = resolution.Quanta()  # the values' printed resolution (runner/analysis/resolution.py)

    @property
    def n(self) -> int:
        return len(self.statuses)

    @property
    def state(self) -> str:
        """'ok' when at least half of the repeats ended ok, else their most common status; '' with none."""
        if not self.statuses:
            return ""
        counts = Counter(self.statuses)
        if 2 * counts[OK] >= len(self.statuses):
            return OK
        return max((s for s in counts if s != OK), key=lambda s: (counts[s], s))

    @property
    def flaky(self) -> bool:
        """Repeats that ended in more than one way (2 ok and 1 oom)."""
        return len(set(self.statuses)) > 1


@dataclass(frozen=True)
class Settings:
    """How the search decides. `threshold`: the smallest relative change that counts (0.05 = 5%), symmetric in
    log scale (+5% or -4.76%); `levels`: the repeats an environment gets, in growing steps; `share`: the part of
    the end-to-end change (log scale) a single culprit must explain."""

    threshold: float = 0.05
    metric: str = "throughput"
    levels: tuple[int, ...] = (3, 5, 8, 10)
    alpha: float = significance.ALPHA
    share: float = 0.5

    @property
    def alpha_look(self) -> float:
        """The significance level of one look: alpha over the number of levels (Bonferroni)."""
        return self.alpha / len(self.levels)

    @property
    def confidence(self) -> float:
        return 1 - self.alpha_look


def levels(first: int, most: int) -> tuple[int, ...]:
    """Repeat levels from `first` to `most`, each about 1.6 times the one before (3, 5, 8, 13, 20)."""
    first = max(2, first)
    most = max(first, most)
    out = [first]
    while out[-1] < most:
        out.append(min(most, max(out[-1] + 1, math.ceil(out[-1] * 1.6))))
    return tuple(out)


@dataclass(frozen=True)
class PairComparison:
    """Environment b against environment a (indices into the ordered list), judged with the one verdict type:
    FAIL changed (beyond the threshold and significant, or another status), PASS the same (the interval of the
    change inside ±threshold, or the same status that has no metric), UNDECIDED neither. `change` is b/a - 1,
    `ci` its interval at the look's confidence (significance.ratio_interval, less 1: never below -100%); `more`:
    more repeats could still decide it."""

    a: int
    b: int
    verdict: Verdict
    why: str
    kind: str = "metric"            # "metric" or "status"
    state_a: str = ""
    state_b: str = ""
    n_a: int = 0
    n_b: int = 0
    mean_a: float | None = None
    mean_b: float | None = None
    change: float | None = None
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    more: bool = False

    @property
    def changed(self) -> bool:
        return self.verdict is Verdict.FAIL

    @property
    def same(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def log_ratio(self) -> float | None:
        if self.change is None or self.change <= -1:
            return None
        return math.log1p(self.change)


def percent(change: float) -> str:
    """A change as a signed percentage, '+12.3%'; past ±10,000% in three figures ('+7.46e+23%'): the interval of
    a few spread repeats can reach that far up (never below -100%)."""
    return f"{change:+.1%}" if abs(change) < 100 else f"{change * 100:+.3g}%"


def _beyond(change: float, threshold: float) -> bool:
    return change > threshold or change < 1 / (1 + threshold) - 1


def _inside(low: float, high: float, threshold: float) -> bool:
    return low > 1 / (1 + threshold) - 1 and high < threshold


def compare(a: int, b: int, sa: Sample, sb: Sample, settings: Settings, last_level: bool = False) -> PairComparison:
    """Judge environment b against a from their samples. `last_level`: neither can get more repeats."""
    base: dict[str, Any] = {"a": a, "b": b, "state_a": sa.state, "state_b": sb.state, "n_a": sa.n, "n_b": sb.n}
    for side, s in (("A", sa), ("B", sb)):
        if s.missing or not s.statuses:
            return PairComparison(verdict=Verdict.UNDECIDED, why=f"nothing measured on {side}: "
                              f"{s.missing or 'no repeat ended'}", **base)
    metric = METRICS.get(settings.metric)
    apart = why_not(metric, ("", ""), (sa.definition, sb.definition)) if metric else ""
    if apart:
        return PairComparison(verdict=Verdict.UNDECIDED, why=apart, **base)
    outcomes = outcome_change(Outcomes.of(sa.statuses), Outcomes.of(sb.statuses), settings.alpha_look)
    if outcomes is not None and not (Outcomes.of(sa.statuses).n and Outcomes.of(sb.statuses).n):
        # Every repeat of a side set aside by admission (refused): no figure and no outcome to judge.
        return PairComparison(verdict=Verdict.UNDECIDED, why=outcomes.why, more=not last_level, **base)
    if outcomes is not None and outcomes.verdict is not Verdict.UNDECIDED:
        pure = not sa.flaky and not sb.flaky
        why = f"{sa.state} -> {sb.state}" if pure and outcomes.verdict is Verdict.FAIL else outcomes.why
        if outcomes.verdict is Verdict.PASS and pure:
            why = f"{sa.state} on both"
        return PairComparison(verdict=outcomes.verdict, kind=STATUS, why=why, **base)
    flaky = sa.flaky or sb.flaky
    if settings.metric == STATUS or outcomes is not None and not (sa.values and sb.values):
        if not flaky:
            return PairComparison(verdict=Verdict.PASS, kind=STATUS, why="ok on both", **base)
        why = outcomes.why if outcomes is not None else (
            f"failure rates not told apart ({Outcomes.of(sa.statuses).words} vs {Outcomes.of(sb.statuses).words})")
        if last_level:
            why = why.replace(": more repeats needed", "") + " at the most repeats"
        return PairComparison(verdict=Verdict.UNDECIDED, kind=STATUS, why=why, more=not last_level, **base)
    x, y, at = aligned(sa, sb, metric)
    if isinstance(at, str):
        return PairComparison(verdict=Verdict.UNDECIDED, why=at, **base)
    if x.size == 0 or y.size == 0:
        side = "A" if x.size == 0 else "B"
        return PairComparison(verdict=Verdict.UNDECIDED, why=f"{settings.metric} not measured in the ok repeats of {side}",
                          **base)
    if x.size < 2 or y.size < 2:
        return PairComparison(verdict=Verdict.UNDECIDED, why=significance.too_few(int(x.size), int(y.size)),
                          more=not last_level, **base)
    q = resolution.pair(sa.quanta, sb.quanta)
    judged = _metric(x, y, settings, last_level, base, (q, q))
    if at is not None:
        judged = replace(judged, why=f"{judged.why} (at step {at}, the last every repeat recorded)")
    verdict, why = with_outcomes(judged.verdict, judged.why, outcomes)
    if verdict is judged.verdict and why == judged.why:
        return judged
    return replace(judged, verdict=verdict, why=why, more=not last_level and verdict is Verdict.UNDECIDED)


def aligned(sa: Sample, sb: Sample, metric: Metric | None) -> tuple[np.ndarray, np.ndarray, int | None | str]:
    """Both sides' values as compare takes them (runner/analysis/comparable.py `at_common_step`)."""
    return at_common_step(metric, (sa.values, sa.steps, sa.ladders), (sb.values, sb.steps, sb.ladders))


def _metric(x: np.ndarray, y: np.ndarray, settings: Settings, last_level: bool, base: dict[str, Any],
            quanta: tuple[float, float] = (0.0, 0.0)) -> PairComparison:
    """The metric's verdict: a significant change beyond the threshold, an interval inside it, or neither."""
    ma, mb = float(x.mean()), float(y.mean())
    base.update(mean_a=ma, mean_b=mb)
    metric = METRICS.get(settings.metric) or Metric(settings.metric, settings.metric, "", True)
    unsized = no_ratio(metric, ma, mb)  # the words compare and the gate say
    if unsized:
        return PairComparison(verdict=Verdict.UNDECIDED, why=unsized, **base)
    change = mb / ma - 1
    d = significance.difference(x, y, quanta=quanta)
    low, high = significance.ratio_interval(x, y, settings.confidence, quanta)  # of b/a, on the log scale: above 0
    ci = (low - 1, high - 1)
    p = d.p_value if d.decided else None
    base.update(change=change, ci=ci, p_value=p)
    thr = settings.threshold
    coarse = d.rounding / abs(ma)
    near = math.copysign(max(abs(change) - coarse, 0.0), change)  # the change rounding could not make up
    if d.decided and d.p_value < settings.alpha_look and _beyond(near, thr):
        return PairComparison(verdict=Verdict.FAIL, why=f"{percent(change)} beyond ±{threshold_text(thr)}, "
                                                        f"p={d.p_value:.2g}", **base)
    interval = f"{percent(change)}, interval {percent(ci[0])}..{percent(ci[1])}"
    if _inside(ci[0], ci[1], thr):
        return PairComparison(verdict=Verdict.PASS, why=f"{interval} within ±{threshold_text(thr)}", **base)
    why = f"{interval}: neither within ±{threshold_text(thr)} nor a significant change beyond it"
    if last_level:
        why += " at the most repeats"
    return PairComparison(verdict=Verdict.UNDECIDED, why=why, more=not last_level, **base)
