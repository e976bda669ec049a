"""The rows each chart draws, made from the analysis frames: a history's points with their 95% intervals and the
history's verdict, the answer's ratios, and the tip a reader hovers over (the figure, the run, the verdict), in the
one number format (runner/report/fmt.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from runner import analysis as an
from runner.report import fmt
from runner.report.labels import cell_label
from runner.report.tone import by_failures, interval, of_point, p_text, same_words

HISTORY_COLUMNS = ["series", "when", "seq", "mean", "ci_low", "ci_high", "tone", "step", "failures", "tip"]


def figure_text(mean: Any, std: Any, n: Any, unit: str, low: Any = None, high: Any = None) -> str:
    """'538 ± 486 img/s (n=3; 95% interval 418–658)': a figure, its spread and its interval, as every page and tip
    writes them."""
    n = int(n) if _f(n) == _f(n) else 0
    if n == 0 or _f(mean) != _f(mean):
        return fmt.DASH
    if n == 1 or _f(std) != _f(std):
        return f"{fmt.number(mean)} {unit} (n={n})"
    places = fmt.decimals(float(mean), float(std))
    iv = f"; 95% interval {float(low):.{places}f}–{float(high):.{places}f}" \
        if _f(low) == _f(low) and _f(high) == _f(high) else ""
    return f"{fmt.mean_std(mean, std, n)} {unit} (n={n}{iv})"


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def point_words(r: dict[str, Any], metric: an.Metric) -> str:
    """A point against the run before, in the history's words: its step, why it is undecided, or no change."""
    tone = of_point(r)
    if r.get("step"):
        said = [x for x in (interval(r.get("ratio"), r.get("ratio_low"), r.get("ratio_high"), metric),
                            "" if by_failures(r) else p_text(r.get("p_value"))) if x]  # failures: p in their words
        return f"step: {r.get('change') or tone.value}" + (f" ({', '.join(said)})" if said else "")
    if r.get("undecided"):
        return f"undecided: {r['undecided']}"
    if tone.value == "same":
        said = [x for x in (interval(r.get("ratio"), r.get("ratio_low"), r.get("ratio_high"), metric, as_ratio=True),
                            p_text(r.get("p_value"))) if x]
        return f"{same_words()} (B/A {float(r['ratio']):.2f}{''.join(', ' + x for x in said)})" \
            if _f(r.get("ratio")) == _f(r.get("ratio")) else same_words()
    return "first run" if int(r.get("point", 0) or 0) == 0 else ""


def history_points(hist: pd.DataFrame, metric: an.Metric, unit: str, label: Any = None) -> pd.DataFrame:
    """One row per point of runner/analysis/history.py's frame, as the history chart draws it: the series' name
    (`label(row)`, default the cell and its machine), the point's start in ISO 8601, its place in the store's
    order, mean and 95% interval in the metric's unit, the history's tone and a tip."""
    if hist.empty:
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    rows = []
    for i, r in enumerate(hist.to_dict("records")):
        name = label(r) if label else cell_label(r) + (f" · {r['machine']}" if r.get("machine") else "")
        s = metric.scale
        when = fmt.iso8601(r["date"])
        tip = (f"{name}, run {r['run_id']} ({(when or '?').replace('T', ' ').replace('Z', ' UTC')}): "
               f"{figure_text(r['mean'] * s, r['std'] * s, r['n'], unit, r['ci_low'] * s, r['ci_high'] * s)}"
               if r["n"] else f"{name}, run {r['run_id']}: {r['outcomes']}")
        words = point_words(r, metric)
        rows.append({"series": name, "when": when, "seq": i, "mean": r["mean"] * s if r["n"] else None,
                     "ci_low": r["ci_low"] * s, "ci_high": r["ci_high"] * s, "tone": of_point(r).value,
                     "step": bool(r["step"]), "failures": by_failures(r), "tip": f"{tip}; {words}" if words else tip})
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)
