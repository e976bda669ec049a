"""A cell's throughput across measurements over time, with a marker where a significant step happened.

A cell is its key (environment definition, params, iterations, warmup, seed): the same measurement on
different dates, e.g. a `latest` image measured every night with `matrix run --force`. A point is one
measurement of the cell: the runs that stored its repeats until a run measured a repeat again. A run that
only adds repeats the cell did not have yet (a resume after Ctrl-C or a crash, `--rerun-failed` filling a
repeat that did not end ok, adaptive repeats or a larger `repeats:` in a later run) continues the point;
a run that stores an ok repeat whose number already has one (`--force`) starts the next point. A point
is a step when it differs from the previous point by at least `min_effect` and the chosen test
(runner/analysis/significance.py) says the difference is significant.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pandas as pd

from runner.analysis import CELL_KEYS, METRICS, MIN_EFFECT, change_words, describe, significance
from runner.analysis.comparable import definition_text, no_ratio, why_not

COLUMNS = ["cell_key", *CELL_KEYS, "point", "run_id", "runs", "date", "n", "mean", "std", "ci_low", "ci_high",
           "ratio", "p_value", "step", "change", "undecided"]


def points(cell: pd.DataFrame) -> Iterator[tuple[list[str], pd.DataFrame]]:
    """One cell's ok rows split into measurements: (the runs in it, its rows), oldest first. Runs in the order
    of their first stored row; a run continues the current point unless it stores an ok repeat whose number
    the point already has (a re-measurement, as `--force` does)."""
    first_id = cell.groupby("run_id", sort=False)["id"].min().sort_values(kind="stable")
    runs: list[str] = []
    have: set[int] = set()
    parts: list[pd.DataFrame] = []
    for run_id in first_id.index:
        g = cell[cell["run_id"] == run_id]
        repeats = set(g["repeat"].astype(int))
        if parts and repeats & have:
            yield runs, pd.concat(parts)
            runs, have, parts = [], set(), []
        runs.append(str(run_id))
        have |= repeats
        parts.append(g)
    if parts:
        yield runs, pd.concat(parts)


def history(frame: pd.DataFrame, metric: str = "throughput", min_effect: float = MIN_EFFECT,
            alpha: float = significance.ALPHA, test: significance.PValue = significance.TEST,
            min_points: int = 2) -> pd.DataFrame:
    """One row per (cell, measurement) over every stored row (not only each repeat's newest: a re-run with
    --force supersedes older repeats in the other views, here it is the next point). Cells with fewer than
    `min_points` measurements are left out. `ratio` is this point's mean over the previous point's; `run_id`
    the point's first run, `runs` every run it spans (a resumed run is one point); `undecided` why a point
    could not be tested against the previous one (never a silent "no step")."""
    m = METRICS[metric]
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()] if len(frame) else frame
    rows = []
    for key, cell in ok.groupby("cell_key", sort=False):
        measured = list(points(cell))
        if len(measured) < min_points:
            continue
        prev: np.ndarray | None = None
        prev_definition = prev_steps = ""
        first = cell.iloc[0]
        for i, (runs, g) in enumerate(measured):
            values = g[metric].to_numpy(dtype=float)
            st = describe(values)
            ratio = p = math.nan
            step = False
            why = ""
            definition, trained = _definition(g, metric), _steps(g)
            apart = why_not(m, ("", ""), (prev_definition, definition), (prev_steps, trained)) \
                if prev is not None else ""
            unsized = no_ratio(m, float(prev.mean()), st.mean) if prev is not None else ""
            if prev is not None and (apart or unsized):
                why = apart or _here(unsized)
            elif prev is not None:
                ratio = st.mean / float(prev.mean())
                diff = significance.difference(prev, values, test)
                p = diff.p_value
                gain = ratio if m.higher_is_better else 1 / ratio
                step = bool(diff.decided and p < alpha and abs(gain - 1) >= min_effect)
                why = _here(diff.why)
            rows.append({"cell_key": key, **{k: first[k] for k in CELL_KEYS}, "point": i, "run_id": runs[0],
                         "runs": ", ".join(runs), "date": float(g["started_at"].min()), "n": st.n,
                         "mean": st.mean, "std": st.std, "ci_low": st.ci_low, "ci_high": st.ci_high,
                         "ratio": ratio, "p_value": p, "step": step,
                         "change": change_words(ratio, m) if step else "", "undecided": why})
            prev, prev_definition, prev_steps = values, definition, trained
    return pd.DataFrame(rows, columns=COLUMNS)


def _here(why: str) -> str:
    """The core's words for a pair (A, B) said of two points: the previous one and this one."""
    return why.replace(" on A", " before").replace(" on B", " here")


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
