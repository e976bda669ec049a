"""A cell's throughput across runs over time, with a marker where a significant step happened.

A cell is its key (environment identity, params, iterations): the same measurement on different dates,
e.g. a `latest` image measured every night with `matrix run --force`. Each run that stored ok repeats of
the cell is one point; a point is a step when it differs from the previous point by at least
`min_effect` and the chosen test (runner/decide/significance.py) says the difference is significant.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from runner.analysis import CELL_KEYS, METRICS, MIN_EFFECT, change_words, describe
from runner.decide import significance

COLUMNS = ["cell_key", *CELL_KEYS, "point", "run_id", "date", "n", "mean", "std", "ci_low", "ci_high",
           "ratio", "p_value", "step", "change"]


def history(frame: pd.DataFrame, metric: str = "throughput", min_effect: float = MIN_EFFECT,
            alpha: float = significance.ALPHA, test: significance.PValue = significance.TEST,
            min_points: int = 2) -> pd.DataFrame:
    """One row per (cell, run) over every stored row (not only each repeat's newest: a re-run with --force
    supersedes older repeats in the other views, here it is the next point). Cells with fewer than
    `min_points` runs are left out. `ratio` is this point's mean over the previous point's."""
    m = METRICS[metric]
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()] if len(frame) else frame
    rows = []
    for key, cell in ok.groupby("cell_key", sort=False):
        runs = cell.groupby("run_id", sort=False)
        if runs.ngroups < min_points:
            continue
        points = sorted(runs, key=lambda kv: float(kv[1]["started_at"].min()))
        prev: np.ndarray | None = None
        first = cell.iloc[0]
        for i, (run_id, g) in enumerate(points):
            values = g[metric].to_numpy(dtype=float)
            st = describe(values)
            ratio = p = math.nan
            step = False
            if prev is not None:
                ratio = st.mean / float(prev.mean()) if prev.mean() else math.nan
                p = test(prev, values)
                gain = ratio if m.higher_is_better else 1 / ratio
                step = bool(p < alpha and abs(gain - 1) >= min_effect) if not math.isnan(p) else False
            rows.append({"cell_key": key, **{k: first[k] for k in CELL_KEYS}, "point": i, "run_id": run_id,
                         "date": float(g["started_at"].min()), "n": st.n, "mean": st.mean, "std": st.std,
                         "ci_low": st.ci_low, "ci_high": st.ci_high, "ratio": ratio, "p_value": p,
                         "step": step, "change": change_words(ratio, m) if step else ""})
            prev = values
    return pd.DataFrame(rows, columns=COLUMNS)


def steps(hist: pd.DataFrame) -> pd.DataFrame:
    """Only the points marked as a step."""
    return hist[hist["step"]].reset_index(drop=True) if len(hist) else hist
