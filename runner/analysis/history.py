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
from collections.abc import Iterator

import pandas as pd

from runner.analysis import (
    CELL_KEYS,
    METRICS,
    MIN_EFFECT,
    change_words,
    describe,
    judge_pair,
    resolution,
    significance,
)
from runner.analysis.comparable import (
    NOT_OUTCOMES,
    Outcomes,
    definition_text,
    no_ratio,
    outcome_change,
    unit_of,
    why_not,
    with_outcomes,
)
from runner.analysis.identity import definition_ids, origins, what_changed
from runner.analysis.verdict import Verdict
from runner.record.metrics import HEADLINE, Metric

# `series`: the definition on its machine a point belongs to (runner/analysis/identity.py); `machine`: the store that
# measured it ("" for this store); `boundary`: what changed from the name's previous point, when its definition did.
COLUMNS = ["cell_key", "series", "machine", *CELL_KEYS, "point", "run_id", "runs", "date", "n", "outcomes", "mean", "std",
           "ci_low", "ci_high", "unit", "ratio", "p_value", "step", "change", "undecided", "boundary"]


def points(cell: pd.DataFrame) -> Iterator[tuple[list[str], pd.DataFrame]]:
    """One cell's rows split into measurements: (the runs in it, each repeat's newest row), oldest first. Runs in
    the order of their first stored row; a run continues the current point unless it stores a repeat whose
    number the point already has ok (a re-measurement, as `--force` does), or the point has no ok repeat at all
    and the run stores one of its numbers again (a night that failed whole is a measurement too); otherwise a
    repeat that did not end ok is filled in (`--rerun-failed`, a resume), its newest row standing for it."""
    first_id = cell.groupby("run_id", sort=False)["seq"].min().sort_values(kind="stable")
    runs: list[str] = []
    have_ok: set[int] = set()
    have: set[int] = set()
    parts: list[pd.DataFrame] = []

    def newest(parts: list[pd.DataFrame]) -> pd.DataFrame:
        rows = pd.concat(parts)
        return rows.sort_values(["seq", "id"], kind="stable").drop_duplicates("repeat", keep="last")

    for run_id in first_id.index:
        g = cell[cell["run_id"] == run_id]
        repeats = set(g["repeat"].astype(int))
        if parts and (repeats & have_ok or (not have_ok and repeats & have)):
            yield runs, newest(parts)
            runs, have_ok, have, parts = [], set(), set(), []
        runs.append(str(run_id))
        have |= repeats
        have_ok |= set(g.loc[g["status"] == "ok", "repeat"].astype(int))
        parts.append(g)
    if parts:
        yield runs, newest(parts)


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
    for _, name in work.groupby([*CELL_KEYS, "_machine"], sort=False, dropna=False):
        if name["run_id"].nunique() < min_points:  # each point takes a run of its own
            continue
        timeline = sorted(((int(g["id"].min()), series, runs, g) for series, cell in name.groupby("_series", sort=False)
                           for runs, g in points(cell)), key=lambda t: t[0])
        if len(timeline) < min_points:
            continue
        rows += _name_rows(timeline, m, metric, min_effect, alpha, test)
    return pd.DataFrame(rows, columns=COLUMNS)


def _name_rows(timeline: list[tuple[int, str, list[str], pd.DataFrame]], m: Metric, metric: str, min_effect: float,
               alpha: float, test: significance.PValue) -> list[dict[str, object]]:
    """The points of one name on one machine, oldest first, each tested against its own series' previous point."""
    rows: list[dict[str, object]] = []
    last: dict[str, pd.DataFrame] = {}
    count: dict[str, int] = {}
    before: tuple[str, pd.DataFrame] | None = None
    for _, series, runs, g in timeline:
        prev = last.get(series)
        ok = g[(g["status"] == "ok") & g[metric].notna()]
        st = describe(ok[metric].to_numpy(dtype=float))
        ratio, p, step, change, why = (math.nan, math.nan, False, "", "") if prev is None else \
            versus(prev, g, m, metric, min_effect, alpha, test)
        boundary = what_changed(before[1], g) if before is not None and before[0] != series else ""
        first = g.iloc[0]
        rows.append({"cell_key": first["cell_key"], "series": series, "machine": first["_machine"],
                     **{k: first[k] for k in CELL_KEYS}, "point": count.get(series, 0), "run_id": runs[0],
                     "runs": ", ".join(runs), "date": float(g["started_at"].min()), "n": st.n,
                     "outcomes": Outcomes.of(g["status"]).words, "mean": st.mean, "std": st.std,
                     "ci_low": st.ci_low, "ci_high": st.ci_high, "unit": unit_of(g, m), "ratio": ratio, "p_value": p,
                     "step": step, "change": change, "undecided": why, "boundary": boundary})
        last[series], count[series], before = g, count.get(series, 0) + 1, (series, g)
    return rows


def versus(before: pd.DataFrame, here: pd.DataFrame, m: Metric, metric: str, min_effect: float, alpha: float,
            test: significance.PValue) -> tuple[float, float, bool, str, str]:
    """(ratio, p, step, change, undecided) of a point against the previous one: their outcomes as rates first
    (the decision core's rule, as compare and the gate judge a pair), then the metric over the ok repeats."""
    outcomes = outcome_change(Outcomes.of(before["status"]), Outcomes.of(here["status"]), alpha)
    if outcomes is not None and outcomes.verdict is not Verdict.UNDECIDED:
        if outcomes.verdict is Verdict.FAIL:  # the outcomes changed: a step, in the core's words
            p = math.nan if outcomes.p_value is None else outcomes.p_value
            return math.nan, p, True, before_here(outcomes.why), ""
        return math.nan, math.nan, False, "", ""  # e.g. unsupported both times: nothing to compare
    a = before[(before["status"] == "ok") & before[metric].notna()]
    b = here[(here["status"] == "ok") & here[metric].notna()]
    x, y = a[metric].to_numpy(dtype=float), b[metric].to_numpy(dtype=float)
    apart = why_not(m, ("", ""), (_definition(a, metric), _definition(b, metric)), (_steps(a), _steps(b)))
    unsized = no_ratio(m, float(x.mean()), float(y.mean())) if len(x) and len(y) else \
        f"no ok repeat with a {m.label} {'here' if len(x) else 'before'}"
    if apart or unsized:  # apart quotes each point's definition as its results wrote it: never rewritten
        return math.nan, math.nan, False, "", before_here(outcomes.why) if outcomes is not None else \
            apart or before_here(unsized)
    ratio = float(y.mean()) / float(x.mean())
    q = resolution.pair(_quanta(a, metric), _quanta(b, metric))
    quanta = (q, q)
    diff = significance.difference(x, y, test, quanta)
    gain = ratio if m.higher_is_better else 1 / ratio
    coarse = diff.rounding / abs(float(x.mean()))
    if coarse and diff.decided:  # printed too coarsely: the core's words, as compare and the gate say them
        _, words, decision = judge_pair(ratio, diff.p_value, len(x), len(y), m, alpha, min_effect, coarse)
        if decision is Verdict.UNDECIDED:
            return ratio, diff.p_value, False, "", before_here(words.removeprefix("undecided: "))
    significant = bool(diff.decided and diff.p_value < alpha and abs(gain - 1) - coarse >= min_effect)
    verdict, why = with_outcomes(Verdict.FAIL if significant else Verdict.PASS, diff.why, outcomes)
    if verdict is Verdict.UNDECIDED:  # a failure on one side that these repeats cannot tell from chance
        return ratio, diff.p_value, False, "", before_here(why)
    change = change_words(ratio, m) if significant else ""
    if significant and outcomes is not None:
        change += f"; {before_here(outcomes.why)}"
    return ratio, diff.p_value, significant, change, before_here(diff.why) if not significant else ""


def _quanta(g: pd.DataFrame, metric: str) -> resolution.Quanta:
    """A point's printed resolution of the metric (runner/analysis/resolution.py); none for a frame made by hand."""
    if "resolution" not in g or "printed" not in g:
        return resolution.Quanta()
    return resolution.of_rows(g[metric].to_numpy(dtype=float), list(g["resolution"]), list(g["printed"]), metric)


def before_here(why: str) -> str:
    """The core's words for a pair (A, B) said of two points in time: the previous one and this one."""
    why = why.replace(" on A", " before").replace(" on B", " here")
    return re.sub(r"\bB\b", "here", re.sub(r"\bA\b", "before", why))


def _steps(g: pd.DataFrame) -> str:
    """The training steps a point's repeats took before their loss (joined when they differ; '' unknown)."""
    if "steps" not in g:
        return ""
    return ", ".join(dict.fromkeys(str(int(s)) for s in g["steps"] if isinstance(s, int | float) and s == s))


def _definition(g: pd.DataFrame, metric: str) -> str:
    """How a point's repeats obtained the metric (joined when they differ): two points defined differently are
    never a step (runner/analysis/comparable.py)."""
    how, unit = f"how_{metric}", f"unit_{metric}"
    if how not in g or unit not in g:
        return ""
    return ", ".join(dict.fromkeys(definition_text(h, u) for h, u in zip(g[how], g[unit], strict=True)))


def steps(hist: pd.DataFrame) -> pd.DataFrame:
    """Only the points marked as a step."""
    return hist[hist["step"]].reset_index(drop=True) if len(hist) else hist
