"""A cell's throughput across measurements over time, with a marker where a significant step happened.

A series is one definition of a cell (its key: environment definition, params, iterations, warmup, seed) on one
machine (the store that measured it, and its device): the same measurement on different dates, e.g. a `latest`
image measured every night with `matrix run --force`. Where a name's definition changes from one point to the next,
the history draws a boundary with what changed, and never tests a change across it. A point is one
measurement of the cell: the runs that stored its repeats until a run measured a repeat again. A run that
only adds repeats the cell did not have yet (a resume after Ctrl-C or a crash, `--rerun-failed` filling a
repeat that did not end ok, adaptive repeats or a larger `repeats:` in a later run) continues the point, a
repeat's newest row standing for it; a run that stores a repeat whose number already has an ok one (`--force`),
or re-stores a number of a point without any ok repeat, starts the next point. Every outcome makes a point: a night whose repeats all ran out of memory is a point,
its outcomes compared with the previous point's as rates by the decision core (comparable.outcome_change), so
"ok -> oom" is a step, never a gap in the line. Otherwise a point is a step when it differs from the previous
point by at least `min_effect` and the chosen test (runner/analysis/significance.py) says the difference is
significant.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from runner.analysis import (
    CELL_KEYS,
    METRICS,
    MIN_EFFECT,
    change,
    change_words,
    describe,
    judge_pair,
    resolution,
    significance,
)
from runner.analysis.comparable import (
    NOT_OUTCOMES,
    no_ratio,
    outcome_change,
    why_not,
    with_outcomes,
)
from runner.analysis.history_points import Name, Point, points
from runner.analysis.identity import definition_ids, origins, what_changed
from runner.analysis.verdict import Verdict
from runner.record.metrics import HEADLINE, Metric

# `series`: the definition on its machine a point belongs to (runner/analysis/identity.py); `machine`: the store that
# measured it ("" for this store); `boundary`: what changed from the name's previous point, when its definition did.
COLUMNS = ["cell_key", "series", "machine", *CELL_KEYS, "point", "run_id", "runs", "date", "n", "outcomes", "mean", "std",
           "ci_low", "ci_high", "unit", "ratio", "ratio_low", "ratio_high", "p_value", "step", "direction", "change",
           "undecided", "boundary"]


def history(frame: pd.DataFrame, metric: str = HEADLINE, min_effect: float = MIN_EFFECT,
            alpha: float = significance.ALPHA, test: significance.PValue = significance.TEST,
            min_points: int = 2) -> pd.DataFrame:
    """One row per (series, measurement) over every stored row (not only each repeat's newest: a re-run with
    --force supersedes older repeats in the other views, here it is the next point). A series is one definition of
    a cell on one machine (runner/analysis/identity.py: its key, its store, its device); a name (environment and
    params) on a machine lists its series' points in time order, and where its definition changes from one point
    to the next `boundary` says what changed (run settings, image, versions, device): a point is tested only
    against the previous point of its own series, never across a boundary. Names with fewer than `min_points`
    measurements are left out. `ratio` is this point's mean over its series' previous point's; `run_id` the point's
    first run, `runs` every run it spans (a resumed run is one point); `undecided` why a point could not be tested
    against the previous one (never a silent "no step"); `unit` the one the point's ok repeats measured the metric in
    (runner.analysis.comparable.unit_of: tok/s for a transformer, never img/s by default)."""
    m = METRICS[metric]
    measured_rows = frame[~frame["status"].isin(NOT_OUTCOMES)] if len(frame) else frame
    if measured_rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    work = measured_rows.assign(_series=definition_ids(measured_rows), _machine=origins(measured_rows))
    rows: list[dict[str, object]] = []
    for _, frame_of_name in work.groupby([*CELL_KEYS, "_machine"], sort=False, dropna=False):
        if frame_of_name["run_id"].nunique() < min_points:  # each point takes a run of its own
            continue
        name = Name.of(frame_of_name, metric, frame_of_name["_series"])
        timeline = sorted((p for s in dict.fromkeys(name.series) for p in points(name, str(s))), key=lambda p: p.first)
        if len(timeline) < min_points:
            continue
        rows += _name_rows(timeline, m, metric, min_effect, alpha, test)
    return pd.DataFrame(rows, columns=COLUMNS)


def _name_rows(timeline: list[Point], m: Metric, metric: str, min_effect: float, alpha: float,
               test: significance.PValue) -> list[dict[str, object]]:
    """The points of one name on one machine, oldest first, each tested against its own series' previous point."""
    rows: list[dict[str, object]] = []
    last: dict[str, Point] = {}
    count: dict[str, int] = {}
    before: Point | None = None
    for p in timeline:
        prev = last.get(p.series)
        st = describe(p.values, metric=metric)
        ratio, pv, step, change, why = (math.nan, math.nan, False, "", "") if prev is None else \
            versus(prev, p, m, min_effect, alpha, test)
        low, high = interval(prev, p) if prev is not None else (math.nan, math.nan)
        boundary = what_changed(before.frame(), p.frame()) if before is not None and before.series != p.series else ""
        head = p.name.head
        rows.append({"cell_key": p.cell_key, "series": p.series, "machine": head["_machine"],
                     **{k: head[k] for k in CELL_KEYS}, "point": count.get(p.series, 0), "run_id": p.runs[0],
                     "runs": ", ".join(p.runs), "date": p.date, "n": st.n,
                     "outcomes": p.outcomes.words, "mean": st.mean, "std": st.std,
                     "ci_low": st.ci_low, "ci_high": st.ci_high, "unit": p.unit(m.unit), "ratio": ratio, "ratio_low": low,
                     "ratio_high": high, "p_value": pv, "step": step,
                     "direction": direction(prev, p, m, ratio) if step and prev is not None else "", "change": change,
                     "undecided": why, "boundary": boundary})
        last[p.series], count[p.series], before = p, count.get(p.series, 0) + 1, p
    return rows


def versus(before: Point, here: Point, m: Metric, min_effect: float, alpha: float,
           test: significance.PValue) -> tuple[float, float, bool, str, str]:
    """(ratio, p, step, change, undecided) of a point against the previous one: their outcomes as rates first
    (the decision core's rule, as compare and the gate judge a pair), then the metric over the ok repeats."""
    outcomes = outcome_change(before.outcomes, here.outcomes, alpha)
    if outcomes is not None and outcomes.verdict is not Verdict.UNDECIDED:
        if outcomes.verdict is Verdict.FAIL:  # the outcomes changed: a step, in the core's words
            p = math.nan if outcomes.p_value is None else outcomes.p_value
            return math.nan, p, True, before_here(outcomes.why), ""
        return math.nan, math.nan, False, "", ""  # e.g. unsupported both times: nothing to compare
    x, y = before.values, here.values
    apart = why_not(m, ("", ""), (before.definition, here.definition), (before.steps, here.steps))
    unsized = no_ratio(m, float(x.mean()), float(y.mean())) if len(x) and len(y) else \
        f"no ok repeat with a {m.label} {'here' if len(x) else 'before'}"
    if apart or unsized:  # apart quotes each point's definition as its results wrote it: never rewritten
        return math.nan, math.nan, False, "", before_here(outcomes.why) if outcomes is not None else \
            apart or before_here(unsized)
    ratio = float(y.mean()) / float(x.mean())
    q = resolution.pair(before.quanta, here.quanta)
    quanta = (q, q)
    diff = significance.difference(x, y, test, quanta)
    gain = ratio if m.higher_is_better else 1 / ratio
    coarse = diff.rounding / abs(float(x.mean()))
    if coarse and diff.decided:  # printed too coarsely: the core's words, as compare and the gate say them
        _, words, decision = judge_pair(ratio, diff.p_value, len(x), len(y), m, alpha, min_effect, coarse)
        if decision is Verdict.UNDECIDED:
            return ratio, diff.p_value, False, "", before_here(words.removeprefix("undecided: "))
    significant = bool(diff.decided and diff.p_value < alpha and abs(gain - 1) - coarse >= min_effect)
    # The one rule of compare and the gate: a step is a change beyond min_effect, significant and with an interval
    # that leaves no change out; the same only where the interval lies inside ±min_effect; else undecided, said so.
    judged = change.judge(change.of_samples(x, y, quanta), min_effect, None, diff.p_value, alpha, m, coarse) \
        if diff.decided else None
    significant = significant and (judged is None or judged.verdict is Verdict.FAIL)
    verdict, why = with_outcomes(Verdict.FAIL if significant else Verdict.PASS, diff.why, outcomes)
    if verdict is Verdict.UNDECIDED:  # a failure on one side that these repeats cannot tell from chance
        return ratio, diff.p_value, False, "", before_here(why)
    if not significant and judged is not None and judged.verdict is Verdict.UNDECIDED:
        return ratio, diff.p_value, False, "", before_here(judged.reason)
    words = change_words(ratio, m) if significant else ""
    if significant and outcomes is not None:
        words += f"; {before_here(outcomes.why)}"
    return ratio, diff.p_value, significant, words, before_here(diff.why) if not significant else ""


def direction(before: Point, here: Point, m: Metric, ratio: float) -> str:
    """Which way a step went, as a typed field for every view's colour and sign: 'better' or 'worse' by the ratio
    and the metric's direction; for a change of outcomes (no ratio), the core's direction (comparable.outcome_change);
    '' when neither says (one failure mode for another)."""
    if ratio == ratio and ratio > 0:
        return "better" if (ratio > 1) == m.higher_is_better else "worse"
    oc = outcome_change(before.outcomes, here.outcomes)
    return oc.direction if oc is not None else ""


def interval(before: Point, here: Point) -> tuple[float, float]:
    """The 95% interval of a point's ratio over the previous one (significance.ratio_interval, the core's), over the
    ok repeats with a figure of each; NaN where a side has fewer than two."""
    x, y = before.values, here.values
    if len(x) < 2 or len(y) < 2:
        return math.nan, math.nan
    q = resolution.pair(before.quanta, here.quanta)
    return significance.ratio_interval(x, y, quanta=(q, q))


def before_here(why: str) -> str:
    """The core's words for a pair (A, B) said of two points in time: the previous one and this one."""
    why = why.replace(" on A", " before").replace(" on B", " here")
    why = re.sub(r"\bB is\b", "this run is", re.sub(r"\bB's\b", "this run's", why))
    return re.sub(r"\bB\b", "here", re.sub(r"\bA\b", "before", why))


def steps(hist: pd.DataFrame) -> pd.DataFrame:
    """Only the points marked as a step."""
    return hist[hist["step"]].reset_index(drop=True) if len(hist) else hist
