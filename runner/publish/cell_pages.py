"""Each cell's history on the site (docs/publish.md, "Pages"), by the one rule of runner/analysis/history.py: a
series is one definition on one machine (the cell key, the store that measured it, its device), a point one
measurement (a run, with the runs that resumed it), in the store's order; each point is tested against the previous
point of its series (outcomes as rates, then the metric), never across a change of definition. The index shows each
cell's last point on each machine and its verdict against the point before; the cell's page every point, with the
same words and colours (runner/report/tone.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd

import runner.analysis as an
from runner.analysis.history import history
from runner.report import chartdata, fmt
from runner.report.labels import iso
from runner.report.tone import Tone, by_failures, of_point

NAME_KEYS = ("environment", "model", "precision", "batch_size", "dataset", "gpus", "nodes", "options")


def when(t: Any) -> str:
    """A stored epoch time as every page writes it ('2026-11-23 18:28 UTC'); '' for none."""
    text = iso(t)
    return "" if text == fmt.DASH else text


def site_history(df: pd.DataFrame, metric: an.Metric) -> pd.DataFrame:
    """runner/analysis/history.py over the site's rows: every name on every machine, one run included (its point
    has nothing to be tested against). The store's order is each row's store and id."""
    keep = ["id", "repeat", "status", "started_at", "origin", "hardware", "settings", *NAME_KEYS,
            *(c for c in df.columns if c.startswith("env_"))]  # what the rule and a boundary's words read, only
    frame = df[keep].assign(**{metric.name: df["value"], f"unit_{metric.name}": df["unit"]}, run_id=df["run"],
                            seq=df["store"].astype("int64") * 10**9 + df["id"].astype("int64"),
                            cell_key=df["key"].astype(str) + "@" + df["origin"].astype(str))
    # Plain object columns: the rule reads small slices of them thousands of times, where pandas' string arrays
    # cost more than the comparison they make.
    frame = frame.astype({c: object for c in frame.columns if frame[c].dtype != object and not
                          pd.api.types.is_numeric_dtype(frame[c])})
    return history(frame, metric.name, min_points=1)


def _point_row(r: dict[str, Any], metric: an.Metric, unit: str, slugs: dict[str, str], number: int) -> dict[str, Any]:
    """One point as the cell page's table shows it."""
    s = metric.scale
    tone = of_point(r)
    words = chartdata.point_words(r, metric)
    iv = f"{fmt.number(r['ci_low'] * s, fmt.decimals(r['mean'] * s, r['std'] * s))}–" \
         f"{fmt.number(r['ci_high'] * s, fmt.decimals(r['mean'] * s, r['std'] * s))}" \
        if r["n"] > 1 and r["ci_low"] == r["ci_low"] else ""
    return {"runs": [{"run": run, "slug": slugs[run]} for run in str(r["runs"]).split(", ")], "when": when(r["date"]),
            "definition": number, "key": str(r["cell_key"]).rpartition("@")[0],
            "figure": fmt.mean_std(r["mean"] * s, r["std"] * s, int(r["n"])) if r["n"] else "",
            "interval": iv, "n": int(r["n"]), "outcomes": str(r["outcomes"]), "vs": words, "tone": tone.value,
            "boundary": str(r["boundary"] or "")}


def machine_history(points: pd.DataFrame, metric: an.Metric, label: str, unit: str, slugs: dict[str, str]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One machine's history of one cell: its table (every point, with its definition and boundaries) and what the
    index shows of it (its last point, the verdict against the point before)."""
    number = {s: i + 1 for i, s in enumerate(dict.fromkeys(points["series"]))}
    rows = [_point_row(r, metric, unit, slugs, number[r["series"]]) for r in points.to_dict("records")]
    last = points.iloc[-1].to_dict()
    s = metric.scale
    value = chartdata.figure_text(last["mean"] * s, last["std"] * s, last["n"], unit, last["ci_low"] * s,
                                  last["ci_high"] * s) if last["n"] else str(last["outcomes"])
    steps = int(points["step"].sum())
    table = {"machine": label, "points": rows, "definitions": len(number), "steps": steps}
    shown = {"machine": label, "value": value, "change": rows[-1]["vs"] if len(rows) > 1 else "first run",
             "tone": rows[-1]["tone"] if len(rows) > 1 else Tone.NONE.value, "runs": len(rows), "changes": steps,
             "failures": len(rows) > 1 and by_failures(last),  # its step its failures decided, not its figure
             "mean": last["mean"] * s if last["n"] else None, "ci_low": last["ci_low"] * s, "ci_high": last["ci_high"] * s,
             "run": str(last["run_id"])}
    return table, shown


def cells(df: pd.DataFrame, metric: an.Metric, label: dict[str, str]) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """Every cell (a name: environment and params) with its history on each machine that measured it, and the whole
    site's history frame (runner/analysis/history.py) for the index's charts."""
    hist = site_history(df, metric)
    slugs = dict(zip(df["run"].astype(str) + "@" + df["origin"].astype(str), df["run_slug"], strict=True))
    ok = df[(df["status"] == "ok") & df["value"].notna()]
    units = ok.groupby("cell_slug", sort=False)["unit"].unique().to_dict()
    slug_of = df.drop_duplicates(list(NAME_KEYS)).set_index(list(NAME_KEYS))["cell_slug"].to_dict()
    per_name = {k: g for k, g in hist.groupby([*NAME_KEYS], sort=False, dropna=False)} if len(hist) else {}
    out = []
    for name, g in df.groupby(list(NAME_KEYS), sort=True):
        slug = str(slug_of[name])
        unit = an.shown_unit(units.get(slug, g["unit"].unique()), metric.name)
        points = per_name.get(name, pd.DataFrame(columns=hist.columns))
        tables, shown = [], []
        for origin, mine in sorted(points.groupby("machine", sort=False), key=lambda kv: str(label[str(kv[0])])):
            runs = {r: slugs[f"{r}@{origin}"] for rs in mine["runs"] for r in str(rs).split(", ")}
            table, index = machine_history(mine, metric, label[str(origin)], unit, runs)
            tables.append(table)
            shown.append(index)
        several = points["series"].nunique() > points["machine"].nunique()
        number = {s: i + 1 for _, m in points.groupby("machine", sort=False) for i, s in enumerate(dict.fromkeys(m["series"]))}
        chart_points = chartdata.history_points(points, metric, unit, lambda r, n=number, many=several: label[
            str(r["machine"])] + (f" · definition {n[r['series']]}" if many else ""))
        out.append({"name": dict(zip(NAME_KEYS, name, strict=True)), "slug": slug, "repeats": len(g),
                    "machines": [t["machine"] for t in tables], "unit": unit, "tables": tables, "latest": shown,
                    "points": chart_points, "changes": sum(t["steps"] for t in tables),
                    "boundaries": sum(1 for t in tables for r in t["points"] if r["boundary"])})
    return out, hist
