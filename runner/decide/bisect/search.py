"""The search of `matrix bisect`, apart from how environments are measured: which adjacent pair of an ordered
list of environments changes a cell's metric by more than a threshold, measuring as few as possible.

The procedure (docs/decisions.md, "Bisect"):

1. Compare the two ends. Within the threshold (its confidence interval inside ±threshold): no change. Beyond it
   and significant, or a change of status (unsupported -> ok, ok -> oom): search. Neither: more repeats, up to the
   last level, then undecided.
2. Binary search: measure the middle of a changed interval and compare it with both ends of the interval; recurse
   into each half that changed. A single step shows as one half changed and the other within the threshold; both
   halves changed is more than one step; both within the threshold while the whole changed is a drift made of
   steps each below it.
3. A single step found is checked against the ends: the environments before it must match the first end, the
   ones after it the last (each pair compared directly, measuring the steps beside it when one changed), and it
   must explain at least `share` of the end-to-end change (log scale). Otherwise the change is spread and no
   culprit is named. A pair that could not be decided is undecided, never a culprit.

Every pair is judged with the one verdict type: FAIL (changed), PASS (the same within the threshold), UNDECIDED.
Repeats grow in levels (3, 5, 8, 10 by default); each comparison is a look at the data, and a pair is called
changed only at p < alpha / (number of levels) (Bonferroni over the looks), so adding repeats until something is
significant cannot manufacture a culprit. A comparison uses each environment's first `level` repeats, so the same
store always gives the same answer, and a second bisect over it measures nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from runner.analysis import significance
from runner.analysis.comparable import Outcomes, common_step, outcome_change, why_not, with_outcomes
from runner.analysis.frame import METRICS, PER_STEP_METRICS, Metric
from runner.analysis.verdict import Verdict
from runner.exitcodes import Exit

STATUS = "status"  # the metric that only looks at how each environment's repeats ended
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
class Comparison:
    """Environment b against environment a (indices into the ordered list), judged with the one verdict type:
    FAIL changed (beyond the threshold and significant, or another status), PASS the same (the interval of the
    change inside ±threshold, or the same status that has no metric), UNDECIDED neither. `change` is b/a - 1,
    `ci` its interval at the look's confidence; `more`: more repeats could still decide it."""

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


def _beyond(change: float, threshold: float) -> bool:
    return change > threshold or change < 1 / (1 + threshold) - 1


def _inside(low: float, high: float, threshold: float) -> bool:
    return low > 1 / (1 + threshold) - 1 and high < threshold


def compare(a: int, b: int, sa: Sample, sb: Sample, settings: Settings, last_level: bool = False) -> Comparison:
    """Judge environment b against a from their samples. `last_level`: neither can get more repeats."""
    base: dict[str, Any] = {"a": a, "b": b, "state_a": sa.state, "state_b": sb.state, "n_a": sa.n, "n_b": sb.n}
    for side, s in (("A", sa), ("B", sb)):
        if s.missing or not s.statuses:
            return Comparison(verdict=Verdict.UNDECIDED, why=f"nothing measured on {side}: "
                              f"{s.missing or 'no repeat ended'}", **base)
    metric = METRICS.get(settings.metric)
    apart = why_not(metric, ("", ""), (sa.definition, sb.definition)) if metric else ""
    if apart:
        return Comparison(verdict=Verdict.UNDECIDED, why=apart, **base)
    outcomes = outcome_change(Outcomes.of(sa.statuses), Outcomes.of(sb.statuses), settings.alpha_look)
    if outcomes is not None and outcomes.verdict is not Verdict.UNDECIDED:
        pure = not sa.flaky and not sb.flaky
        why = f"{sa.state} -> {sb.state}" if pure and outcomes.verdict is Verdict.FAIL else outcomes.why
        if outcomes.verdict is Verdict.PASS and pure:
            why = f"{sa.state} on both"
        return Comparison(verdict=outcomes.verdict, kind=STATUS, why=why, **base)
    flaky = sa.flaky or sb.flaky
    if settings.metric == STATUS or outcomes is not None and not (sa.values and sb.values):
        if not flaky:
            return Comparison(verdict=Verdict.PASS, kind=STATUS, why="ok on both", **base)
        why = outcomes.why if outcomes is not None else (
            f"failure rates not told apart ({Outcomes.of(sa.statuses).words} vs {Outcomes.of(sb.statuses).words})")
        if last_level:
            why = why.replace(": more repeats needed", "") + " at the most repeats"
        return Comparison(verdict=Verdict.UNDECIDED, kind=STATUS, why=why, more=not last_level, **base)
    x, y, at = aligned(sa, sb, metric)
    if isinstance(at, str):
        return Comparison(verdict=Verdict.UNDECIDED, why=at, **base)
    if x.size == 0 or y.size == 0:
        side = "A" if x.size == 0 else "B"
        return Comparison(verdict=Verdict.UNDECIDED, why=f"{settings.metric} not measured in the ok repeats of {side}",
                          **base)
    if x.size < 2 or y.size < 2:
        return Comparison(verdict=Verdict.UNDECIDED, why=significance.too_few(int(x.size), int(y.size)),
                          more=not last_level, **base)
    judged = _metric(x, y, settings, last_level, base)
    if at is not None:
        judged = replace(judged, why=f"{judged.why} (at step {at}, the last every repeat recorded)")
    verdict, why = with_outcomes(judged.verdict, judged.why, outcomes)
    if verdict is judged.verdict and why == judged.why:
        return judged
    return replace(judged, verdict=verdict, why=why, more=not last_level and verdict is Verdict.UNDECIDED)


def aligned(sa: Sample, sb: Sample, metric: Metric | None) -> tuple[np.ndarray, np.ndarray, int | None | str]:
    """Both sides' finite values, a loss or accuracy taken at a step every repeat of both reached (as compare does:
    the last step every repeat recorded when their windows differ); the step used (None: as measured), or why
    they cannot be compared."""
    x, y = np.asarray(sa.values, dtype=float), np.asarray(sb.values, dtype=float)
    if metric is not None and metric.name in PER_STEP_METRICS:
        steps = set((*sa.steps, *sb.steps))
        if len(steps) > 1:
            ladders = [*sa.ladders, *sb.ladders]
            step = common_step(ladders) if metric.name == "loss_end" and len(ladders) == x.size + y.size else None
            if step is None:
                shown = ", ".join(str(s) for s in sorted(st for st in steps if st is not None)) or "unknown"
                return x[:0], y[:0], (f"not comparable: the {metric.label} comes after different numbers of "
                                      f"training steps ({shown}) and no step was recorded by every repeat")
            x = np.asarray([d[step] for d in sa.ladders if d is not None], dtype=float)
            y = np.asarray([d[step] for d in sb.ladders if d is not None], dtype=float)
            return x[np.isfinite(x)], y[np.isfinite(y)], step
    return x[np.isfinite(x)], y[np.isfinite(y)], None


def _metric(x: np.ndarray, y: np.ndarray, settings: Settings, last_level: bool, base: dict[str, Any]) -> Comparison:
    """The metric's verdict: a significant change beyond the threshold, an interval inside it, or neither."""
    ma, mb = float(x.mean()), float(y.mean())
    base.update(mean_a=ma, mean_b=mb)
    if ma <= 0 or mb < 0:
        return Comparison(verdict=Verdict.UNDECIDED, why=f"{settings.metric} is not positive (mean {ma:g} on A)",
                          **base)
    change = mb / ma - 1
    d = significance.difference(x, y)
    low, high = significance.welch_interval(x, y, settings.confidence)
    ci = (low / ma, high / ma)
    p = d.p_value if d.decided else None
    base.update(change=change, ci=ci, p_value=p)
    thr = settings.threshold
    if d.decided and d.p_value < settings.alpha_look and _beyond(change, thr):
        return Comparison(verdict=Verdict.FAIL, why=f"{change:+.1%} beyond ±{thr:.0%}, p={d.p_value:.2g}", **base)
    if _inside(ci[0], ci[1], thr):
        return Comparison(verdict=Verdict.PASS, why=f"{change:+.1%}, interval {ci[0]:+.1%}..{ci[1]:+.1%} within "
                          f"±{thr:.0%}", **base)
    why = (f"{change:+.1%}, interval {ci[0]:+.1%}..{ci[1]:+.1%}: neither within ±{thr:.0%} nor a significant "
           "change beyond it")
    if last_level:
        why += " at the most repeats"
    return Comparison(verdict=Verdict.UNDECIDED, why=why, more=not last_level, **base)


FOUND, SPREAD, NO_CHANGE, UNDECIDED = "found", "spread", "no change", "undecided"
EXIT = {FOUND: Exit.OK, NO_CHANGE: Exit.FAILED, UNDECIDED: Exit.UNDECIDED, SPREAD: Exit.SPREAD}


@dataclass
class Answer:
    """What the search found. `outcome`: found (one pair, `culprit`), spread (several steps, `steps`, or a drift
    of steps each below the threshold, `drifts`), no change (the ends are the same within the threshold) or
    undecided (`unresolved` says where, `culprit` then holds the candidate that could not be confirmed)."""

    outcome: str
    end: Comparison
    why: str = ""
    culprit: Comparison | None = None
    steps: list[Comparison] = field(default_factory=list)
    drifts: list[Comparison] = field(default_factory=list)
    unresolved: list[Comparison] = field(default_factory=list)
    decisions: list[Comparison] = field(default_factory=list)
    repeats: dict[int, int] = field(default_factory=dict)  # environment index -> repeats the search looked at
    samples: dict[int, Sample] = field(default_factory=dict)  # environment index -> what it looked at last
    share: float | None = None

    @property
    def exit_code(self) -> Exit:
        return EXIT[self.outcome]


Measure = Callable[[Mapping[int, int]], Mapping[int, Sample]]


class Search:
    """One bisect over `count` ordered environments. `measure({index: repeats})` makes sure each environment has
    that many repeats (measuring what is missing) and returns their samples, limited to those repeats."""

    def __init__(self, count: int, measure: Measure, settings: Settings) -> None:
        if count < 2:
            raise ValueError("a bisect needs at least two environments")
        self.count = count
        self.measure = measure
        self.settings = settings
        self.level: dict[int, int] = {}      # index -> position in settings.levels
        self.samples: dict[int, Sample] = {}
        self.decisions: list[Comparison] = []
        self._decided: dict[tuple[int, int], Comparison] = {}

    # measuring -----------------------------------------------------------------------------------------
    def _fetch(self, wanted: Mapping[int, int]) -> None:
        ask = {i: self.settings.levels[pos] for i, pos in wanted.items()}
        got = self.measure(ask)
        for i in wanted:
            self.level[i] = wanted[i]
            self.samples[i] = got[i]

    def ensure(self, *indices: int) -> None:
        """Measure environments not measured yet at the first level (together, so they can be interleaved)."""
        new = {i: 0 for i in indices if i not in self.level}
        if new:
            self._fetch(new)

    # deciding ------------------------------------------------------------------------------------------
    def decide(self, a: int, b: int) -> Comparison:
        """Compare b with a, adding repeats (lower level first) while the answer is undecided and can change."""
        known = self._decided.get((a, b))
        if known is not None and (known.verdict is not Verdict.UNDECIDED or not known.more):
            return known
        self.ensure(a, b)
        top = len(self.settings.levels) - 1
        while True:
            last = self.level[a] == top and self.level[b] == top
            c = compare(a, b, self.samples[a], self.samples[b], self.settings, last_level=last)
            if c.verdict is not Verdict.UNDECIDED or not c.more or last:
                break
            low = min(self.level[a], self.level[b])
            self._fetch({i: low + 1 for i in (a, b) if self.level[i] == low})
        self._decided[(a, b)] = c
        self.decisions.append(c)
        return c

    def look(self, a: int, b: int) -> Comparison:
        """Compare b with a on the repeats measured so far (no more are added)."""
        top = len(self.settings.levels) - 1
        c = compare(a, b, self.samples[a], self.samples[b], self.settings,
                    last_level=self.level[a] == top and self.level[b] == top)
        self._decided[(a, b)] = c
        self.decisions.append(c)
        return c

    def split(self, lo: int, mid: int, hi: int) -> tuple[Comparison, Comparison]:
        """The two halves of a changed interval: adds repeats (the lower level first) until a half changed, or both
        are the same within the threshold, or the last level; one half changed is enough to go on, since a single
        step leaves the other half at its end's level."""
        self.ensure(lo, mid, hi)
        top = len(self.settings.levels) - 1
        while True:
            halves = []
            for a, b in ((lo, mid), (mid, hi)):
                last = self.level[a] == top and self.level[b] == top
                halves.append(compare(a, b, self.samples[a], self.samples[b], self.settings, last_level=last))
            left, right = halves
            if left.changed or right.changed or (left.same and right.same):
                break
            raise_ = {}
            for c in halves:
                if c.verdict is Verdict.UNDECIDED and c.more:
                    low = min(self.level[c.a], self.level[c.b])
                    raise_.update({i: low + 1 for i in (c.a, c.b) if self.level[i] == low})
            if not raise_:
                break
            self._fetch(raise_)
        for c in (left, right):
            self._decided[(c.a, c.b)] = c
            self.decisions.append(c)
        return left, right

    def _locate(self, c: Comparison, answer: Answer) -> None:
        """Where the change of a changed interval happens: the steps, drifts and undecided parts inside it."""
        lo, hi = c.a, c.b
        if hi == lo + 1:
            answer.steps.append(c)
            return
        mid = (lo + hi) // 2
        left, right = self.split(lo, mid, hi)
        for half in (left, right):
            if half.changed:
                self._locate(half, answer)
        if not (left.changed or right.changed):
            if left.same and right.same:
                answer.drifts.append(c)
            else:
                answer.unresolved.extend(h for h in (left, right) if h.verdict is Verdict.UNDECIDED)

    def run(self) -> Answer:
        last = self.count - 1
        end = self.decide(0, last)
        answer = Answer(UNDECIDED, end)
        if end.same:
            answer.outcome, answer.why = NO_CHANGE, f"the ends are the same within the threshold ({end.why})"
        elif end.verdict is Verdict.UNDECIDED:
            answer.why = f"the ends could not be told apart or shown the same: {end.why}"
        else:
            self._locate(end, answer)
            if len(answer.steps) == 1 and not answer.drifts and not answer.unresolved:
                self._check_single(answer)
            self._conclude(answer)
        answer.decisions = list(self.decisions)
        answer.repeats = {i: self.settings.levels[pos] for i, pos in sorted(self.level.items())}
        answer.samples = dict(sorted(self.samples.items()))
        return answer

    def _check_single(self, answer: Answer) -> None:
        """A single step must leave the rest of the way unchanged: the environments before it against the first
        end, the ones after it against the last (measuring the steps there when one changed). A side that stays
        undecided at the most repeats is unresolved: the step is then a candidate, not a culprit."""
        step = answer.steps[0]
        for a, b in ((0, step.a), (step.b, self.count - 1)):
            if a == b:
                continue
            side = self.decide(a, b)
            if side.changed:
                self._locate(side, answer)
            elif side.verdict is Verdict.UNDECIDED:
                # Not shown the same at the most repeats: another step may hide there, so the pair is a candidate.
                answer.unresolved.append(side)
        if len(answer.steps) == 1:
            # On every repeat measured by now (the ends and the pair may have gained some since they were decided).
            last = self.count - 1
            answer.share = explained(compare(step.a, step.b, self.samples[step.a], self.samples[step.b], self.settings),
                                     compare(0, last, self.samples[0], self.samples[last], self.settings))

    def _conclude(self, answer: Answer) -> None:
        steps, drifts, unresolved = answer.steps, answer.drifts, answer.unresolved
        if len(steps) > 1 or drifts:
            answer.outcome = SPREAD
            parts = [f"{len(steps)} steps beyond the threshold"] if len(steps) > 1 else \
                [f"{len(steps)} step beyond the threshold"] if steps else []
            if drifts:
                parts.append(f"{len(drifts)} interval{'s' if len(drifts) > 1 else ''} whose change is made of "
                             "steps each within the threshold")
            answer.why = "the change is spread: " + " and ".join(parts)
            if unresolved:
                answer.why += f"; {len(unresolved)} interval{'s' if len(unresolved) > 1 else ''} undecided"
            return
        if len(steps) == 1 and unresolved:
            answer.outcome, answer.culprit = UNDECIDED, steps[0]
            answer.why = ("one step found, but another part of the range could not be decided, so it is a candidate, "
                          "not a culprit")
            return
        if not steps:
            answer.why = "no pair could be decided inside the changed range"
            return
        step = steps[0]
        if answer.share is None or answer.share < self.settings.share:
            answer.outcome = SPREAD
            shown = "an unknown share" if answer.share is None else f"{answer.share:.0%}"
            answer.why = (f"the one step found explains {shown} of the end-to-end change: the rest is spread over "
                          "steps each within the threshold")
            return
        answer.outcome, answer.culprit = FOUND, step
        answer.why = f"one step explains {answer.share:.0%} of the end-to-end change"


def explained(step: Comparison, end: Comparison) -> float | None:
    """The share of the end-to-end change the step makes (log scale: 1.0 is all of it); a status change that
    takes the first end's status to the last end's explains all of it."""
    if end.kind == STATUS or step.kind == STATUS:
        return 1.0 if (step.state_a, step.state_b) == (end.state_a, end.state_b) else 0.0
    s, e = step.log_ratio, end.log_ratio
    if s is None or e is None or e == 0:
        return None
    return s / e


def bisect(count: int, measure: Measure, settings: Settings) -> Answer:
    """The search over `count` ordered environments (see the module's docstring)."""
    return Search(count, measure, settings).run()


def replay(samples: Sequence[Sample | Sequence[float] | str]) -> Measure:
    """A Measure over recorded data: per environment a Sample (every repeat), a list of ok values, or a status
    ('unsupported'); `measure` hands out the first `level` repeats, as the store does."""
    full: list[Sample] = []
    for s in samples:
        if isinstance(s, Sample):
            full.append(s)
        elif isinstance(s, str):
            full.append(Sample(statuses=(s,) * 1000, reason=s))
        else:
            values = tuple(float(v) for v in s)
            full.append(Sample(statuses=(OK,) * len(values), values=values))

    def measure(wanted: Mapping[int, int]) -> dict[int, Sample]:
        out = {}
        for i, n in wanted.items():
            s = full[i]
            statuses = s.statuses[:n]
            ok_seen = sum(1 for st in statuses if st == OK)
            out[i] = Sample(statuses, s.values[:ok_seen], s.reason, s.missing, s.steps[:ok_seen],
                            s.ladders[:ok_seen], s.definition)
        return out

    return measure
