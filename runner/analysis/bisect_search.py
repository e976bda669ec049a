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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from runner.analysis.bisect_pair import OK, STATUS, PairComparison, Sample, Settings, compare
from runner.analysis.verdict import Verdict
from runner.base.exitcodes import Exit

FOUND, SPREAD, NO_CHANGE, UNDECIDED = "found", "spread", "no change", "undecided"
EXIT = {FOUND: Exit.OK, NO_CHANGE: Exit.FAILED, UNDECIDED: Exit.UNDECIDED, SPREAD: Exit.SPREAD}


@dataclass
class SearchAnswer:
    """What the search found. `outcome`: found (one pair, `culprit`), spread (several steps, `steps`, or a drift
    of steps each below the threshold, `drifts`), no change (the ends are the same within the threshold) or
    undecided (`unresolved` says where, `culprit` then holds the candidate that could not be confirmed)."""

    outcome: str
    end: PairComparison
    why: str = ""
    culprit: PairComparison | None = None
    steps: list[PairComparison] = field(default_factory=list)
    drifts: list[PairComparison] = field(default_factory=list)
    unresolved: list[PairComparison] = field(default_factory=list)
    decisions: list[PairComparison] = field(default_factory=list)
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
        self.decisions: list[PairComparison] = []
        self._decided: dict[tuple[int, int], PairComparison] = {}

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
    def decide(self, a: int, b: int) -> PairComparison:
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

    def look(self, a: int, b: int) -> PairComparison:
        """Compare b with a on the repeats measured so far (no more are added)."""
        top = len(self.settings.levels) - 1
        c = compare(a, b, self.samples[a], self.samples[b], self.settings,
                    last_level=self.level[a] == top and self.level[b] == top)
        self._decided[(a, b)] = c
        self.decisions.append(c)
        return c

    def split(self, lo: int, mid: int, hi: int) -> tuple[PairComparison, PairComparison]:
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

    def _locate(self, c: PairComparison, answer: SearchAnswer) -> None:
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

    def run(self) -> SearchAnswer:
        last = self.count - 1
        end = self.decide(0, last)
        answer = SearchAnswer(UNDECIDED, end)
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

    def _check_single(self, answer: SearchAnswer) -> None:
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

    def _conclude(self, answer: SearchAnswer) -> None:
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


def explained(step: PairComparison, end: PairComparison) -> float | None:
    """The share of the end-to-end change the step makes (log scale: 1.0 is all of it); a status change that
    takes the first end's status to the last end's explains all of it."""
    if end.kind == STATUS or step.kind == STATUS:
        return 1.0 if (step.state_a, step.state_b) == (end.state_a, end.state_b) else 0.0
    s, e = step.log_ratio, end.log_ratio
    if s is None or e is None or e == 0:
        return None
    return s / e


def bisect(count: int, measure: Measure, settings: Settings) -> SearchAnswer:
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
