"""Each cell's history on the site (docs/publish.md, "Pages"): one series per definition on each machine
(runner/analysis/identity.py: the cell key, the store that measured it, its device), the changes found along each
series, a boundary with what changed where a name's definition changed from one run to the next (never tested as a
change), and what the index shows of it: the latest run's mean ± std, its change against the run before in the
decision core's words, and a sparkline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import runner.analysis as an
from runner.analysis.comparable import NOT_OUTCOMES, Outcomes, outcome_change
from runner.analysis.history import before_here, versus
from runner.analysis.identity import what_changed
from runner.analysis.verdict import Verdict
from runner.publish import svg
from runner.publish.changes import changes

NAME_KEYS = ("environment", "model", "precision", "batch_size", "dataset", "gpus", "nodes", "options")
_RUN_KEYS = ["cell_slug", "origin", "series", "run_slug"]


@dataclass(frozen=True)
class Rows:
    """The site's repeats with fast lookups: each (cell, run)'s rows and each series' rows, by position."""

    df: pd.DataFrame
    by_run: dict[tuple[str, str], np.ndarray]
    by_series: dict[str, np.ndarray]

    def run(self, cell_slug: str, run_slug: str) -> pd.DataFrame:
        return self.df.iloc[self.by_run[(cell_slug, run_slug)]]

    def series(self, series: str) -> pd.DataFrame:
        return self.df.iloc[self.by_series[series]]


def per_run(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run of each series of each cell on each machine: when, the ok repeats' mean, std and count of the
    figure, how its repeats ended, torch, hardware and host. Computed once for the whole site."""
    g = df.groupby(_RUN_KEYS, sort=False)
    out = g.agg(run=("run", "first"), when=("started_at", "min"), key=("key", "first"), torch=("env_torch", "first"),
                hardware=("hardware", "first"), host=("env_hostname", "first"))
    ok = df[(df["status"] == "ok") & np.isfinite(df["value"].astype(float))]
    st = ok.groupby(_RUN_KEYS, sort=False)["value"].agg(["mean", "std", "size"])
    out = out.join(st).rename(columns={"size": "n"})
    out["n"] = out["n"].fillna(0).astype(int)
    counts: dict[tuple[Any, ...], dict[str, int]] = {}
    for (*k, status), n in df.groupby([*_RUN_KEYS, "status"], sort=False).size().items():
        counts.setdefault(tuple(k), {})[str(status)] = int(n)
    out["outcomes"] = [Outcomes({s: c for s, c in counts[k].items() if s not in NOT_OUTCOMES},
                                counts[k].get("refused", 0)) for k in out.index]
    return out.reset_index().sort_values(["cell_slug", "origin", "when", "run"], kind="stable")


def _num(v: Any) -> str:
    return f"{float(v):.4g}" if v is not None and not (isinstance(v, float) and math.isnan(v)) else ""


def when(t: Any) -> str:
    import time
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(t)))
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _std(v: Any) -> float:
    return float(v) if v is not None and np.isfinite(v) else math.nan


def machine_history(runs: pd.DataFrame, rows: Rows, metric: an.Metric, label: str, unit: str
                    ) -> tuple[dict[str, Any], list[tuple[str, list[svg.RunPoint], list[tuple[int, str]]]],
                               list[tuple[float, str]], dict[str, Any]]:
    """One machine's history of one cell: its table (changes per series, runs with their definition and boundaries),
    its plot series (one per definition), its boundaries (when, what changed) and what the index shows."""
    defs = list(dict.fromkeys(runs["series"]))
    number = {s: i + 1 for i, s in enumerate(defs)}
    found, plotted, table_runs, bounds = [], [], [], []
    for s in defs:
        mine = runs[runs["series"] == s]
        means = mine["mean"].to_numpy(dtype=float) * metric.scale
        found_here = changes(means, metric)  # along this definition only: never across a boundary
        for c in found_here:
            found.append({"run": mine["run"].iloc[c.index], "definition": number[s], "before": f"{c.before:.4g}",
                          "after": f"{c.after:.4g}", "ratio": f"{c.ratio:.3f}", "p": f"{c.p:.2g}", "words": c.words})
        found += _outcome_changes(mine, number[s])
        measured = mine[mine["n"] > 0]
        name = label + (f" · definition {number[s]}" if len(defs) > 1 else "")
        points = [svg.RunPoint(float(r.when), float(r.mean) * metric.scale, _std(r.std) * metric.scale,
                               f"{name} run {r.run} ({when(r.when)} UTC): {r.mean * metric.scale:.4g} ± "
                               f"{_std(r.std) * metric.scale:.3g} {unit} (n={r.n}); host {r.host}, {r.hardware}, "
                               f"torch {r.torch}", f"../runs/{r.run_slug}.html") for r in measured.itertuples()]
        at = np.flatnonzero(mine["n"].to_numpy() > 0)  # the plotted runs: a change's index among them
        marks = [(int(np.searchsorted(at, c.index)), f"{c.words} x{c.ratio:.3f}, p={c.p:.2g}") for c in found_here]
        if points:
            plotted.append((name, points, marks))
    previous = None
    for r in runs.itertuples():
        boundary = ""
        if previous is not None and previous.series != r.series:
            boundary = what_changed(rows.series(previous.series), rows.series(r.series))
            bounds.append((float(r.when), f"{label}: definition changed: {boundary}"))
        table_runs.append({"run": r.run, "slug": r.run_slug, "when": when(r.when), "mean": _num(r.mean * metric.scale)
                           if r.n else "", "std": _num(r.std * metric.scale) if r.n else "", "n": int(r.n),
                           "outcomes": r.outcomes.words, "torch": str(r.torch or ""), "definition": number[r.series],
                           "key": str(r.key), "boundary": boundary})
        previous = r
    table = {"machine": label, "changes": found, "runs": table_runs, "definitions": len(defs)}
    return table, plotted, bounds, {**latest(runs, rows, metric, unit, label, table_runs), "changes": len(found)}


def _outcome_changes(mine: pd.DataFrame, definition: int) -> list[dict[str, Any]]:
    """The runs of one series where how its repeats ended changed from the run before, judged as the decision core
    judges a pair's outcomes (comparable.outcome_change: ok -> oom is a change; one crash in three is not one)."""
    out: list[dict[str, Any]] = []
    prev = None
    for r in mine.itertuples():
        oc = outcome_change(prev, r.outcomes) if prev is not None else None
        if oc is not None and oc.verdict is Verdict.FAIL:
            out.append({"run": r.run, "definition": definition, "before": prev.words if prev else "",
                        "after": r.outcomes.words, "ratio": "", "p": f"{oc.p_value:.2g}" if oc.p_value is not None
                        else "", "words": before_here(oc.why)})
        prev = r.outcomes
    return out


def latest(runs: pd.DataFrame, rows: Rows, metric: an.Metric, unit: str, label: str,
           table_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the index shows of one machine's history of a cell: the latest run's mean ± std (n) in the unit, its
    change against the run before in the decision core's words (history.versus: outcomes as rates, then Welch and
    the minimum effect; none across a boundary), and a sparkline of every run's mean, broken at each boundary."""
    last = runs.iloc[-1]
    value = f"{last['mean'] * metric.scale:.4g} ± {_std(last['std']) * metric.scale:.2g} {unit} (n={int(last['n'])})" \
        if last["n"] else last["outcomes"].words
    change = ""
    if len(runs) > 1:
        prev = runs.iloc[-2]
        if prev["series"] != last["series"]:
            change = f"definition changed ({table_runs[-1]['boundary']}): not compared"
        else:
            before = rows.run(prev["cell_slug"], prev["run_slug"]).rename(columns={"value": metric.name})
            here = rows.run(last["cell_slug"], last["run_slug"]).rename(columns={"value": metric.name})
            ratio, p, step, words, why = versus(before, here, metric, metric.name, an.MIN_EFFECT, an.ALPHA,
                                                an.significance.TEST)
            if step:
                change = f"{words}" + (f" (p={p:.2g})" if p == p else "")
            elif why:
                change = f"undecided: {why}"
            elif ratio == ratio:
                change = f"{an.change_words(ratio, metric)}, not significant" + (f" (p={p:.2g})" if p == p else "")
    means = (runs["mean"].to_numpy(dtype=float) * metric.scale).tolist()
    breaks = [i for i in range(1, len(runs)) if runs["series"].iloc[i] != runs["series"].iloc[i - 1]]
    step = bool(change) and not change.startswith(("undecided", "definition")) and "not significant" not in change
    tone = ("good" if change.startswith((metric.better, "fixed")) else "bad") if step else ""
    return {"machine": label, "value": value, "change": change, "tone": tone, "spark": svg.spark(means, breaks),
            "runs": len(runs)}


def cells(df: pd.DataFrame, metric: an.Metric, label: dict[str, str]) -> list[dict[str, Any]]:
    """Every cell (a name: environment and params) with its history on each machine that measured it."""
    df = df.reset_index(drop=True)
    # What a run is compared on (its outcomes and figures) and what tells two definitions apart, and nothing else:
    # a few rows are taken from these many times.
    narrow = df[[c for c in df.columns if c in ("status", "value", "origin", "settings", "hardware")
                 or c.startswith("env_")]]
    rows = Rows(narrow, {(str(a), str(b)): v for (a, b), v in
                         df.groupby(["cell_slug", "run_slug"], sort=False).indices.items()},
                {str(k): v for k, v in df.groupby("series", sort=False).indices.items()})
    runs = dict(iter(per_run(df).groupby("cell_slug", sort=False)))
    ok = df[(df["status"] == "ok") & df["value"].notna()]
    units = ok.groupby("cell_slug", sort=False)["unit"].unique().to_dict()
    out = []
    for name, g in df.groupby(list(NAME_KEYS), sort=True):
        slug = str(g["cell_slug"].iloc[0])
        unit = an.shown_unit(units.get(slug, g["unit"].unique()), metric.name)  # this cell's own
        tables, series, bounds, shown = [], [], [], []
        for origin, mr in sorted(runs[slug].groupby("origin", sort=False), key=lambda kv: str(kv[0])):
            table, plotted, bound, index = machine_history(mr, rows, metric, label[str(origin)], unit)
            tables.append(table)
            series += plotted
            bounds += bound
            shown.append(index)
        out.append({"name": dict(zip(NAME_KEYS, name, strict=True)), "slug": slug, "repeats": len(g),
                    "machines": [t["machine"] for t in tables], "unit": unit, "tables": tables, "latest": shown,
                    "plot": svg.plot(series, unit, bounds) if series else None,
                    "changes": sum(len(t["changes"]) for t in tables),
                    "boundaries": sum(1 for t in tables for r in t["runs"] if r["boundary"])})
    return out
