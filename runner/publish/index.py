"""What the site shows first (docs/publish.md, "Pages"): one sentence of what changed against the run before, each
change as a sentence in its verdict's colour, and the charts: each machine's cells with their latest figure and its
interval, and the history of the cells that changed (and on each cell's page, its history). The verdicts are the
history's (runner/analysis/history.py), the same ones the tables below them say."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from runner.publish.cell_pages import NAME_KEYS
from runner.report import charts
from runner.report.head import plural
from runner.report.labels import cell_label
from runner.report.tone import Tone, of_point, same_words, say, word

SAID = 8  # changes said as sentences; the table below has them all


def fill(site: Any, hist: pd.DataFrame, label: dict[str, str]) -> None:
    """The index's headline, sentences and charts, and each cell's history chart, into `site`."""
    metric, unit = site.metric, site.unit
    latest = [dict(x, label=cell_label(c["name"]), slug=c["slug"]) for c in site.cells for x in c["latest"]]
    # Each cell counted once: a step its failures decided by its own word (below), every other by its tone; a cell
    # with one run is "measured once", one with more whose runs had nothing to compare is "nothing measured".
    directed = (Tone.BETTER, Tone.WORSE)
    counts = {t: sum(1 for x in latest if x["tone"] == t.value and x.get("runs", 2) > 1
                     and not (x.get("failures") and t in directed)) for t in Tone}
    once = sum(1 for x in latest if x.get("runs", 2) <= 1)
    parts = [f"{counts[Tone.BETTER]} {metric.better}", f"{counts[Tone.WORSE]} {metric.worse}",
             f"{counts[Tone.SAME]} {same_words()}", f"{counts[Tone.UNDECIDED]} undecided"]
    # A step its failures decided is counted by its own word (more or fewer failures), never as faster or slower.
    for t in (Tone.WORSE, Tone.BETTER):
        n = sum(1 for x in latest if x["tone"] == t.value and x.get("failures"))
        if n:
            parts.insert(2, f"{n} with {word(t, metric, True)}")
    if counts[Tone.CHANGED]:
        parts.insert(2, f"{counts[Tone.CHANGED]} with other outcomes")
    if counts[Tone.NONE]:
        parts.append(f"{counts[Tone.NONE]} with nothing measured to compare")
    site.headline = (f"Against the run before, of {plural(len(latest) - once, 'cell')} measured more than once on a "
                     f"machine: {', '.join(parts)}" + (f"; {plural(once, 'cell')} measured once." if once else ".")) \
        if len(latest) > once else (f"Every cell was measured by one run on each machine ({plural(once, 'cell')}): "
                                    "there is nothing to compare it with until the next run.") if latest else ""
    stepped = (Tone.BETTER.value, Tone.WORSE.value, Tone.CHANGED.value)  # the tones of a step (tone.of_point)
    earlier = sum(1 for c in site.cells for t, x in zip(c["tables"], c["latest"], strict=True)
                  if t["steps"] > (x["tone"] in stepped))
    if earlier:
        site.headline += (f" {plural(earlier, 'cell')} changed earlier along {'its' if earlier == 1 else 'their'} "
                          "history (the chart of the cells that changed).")
    site.said = _sentences(hist, label, metric)
    rows = pd.DataFrame([{"label": x["label"], "machine": x["machine"], "mean": x["mean"], "ci_low": x["ci_low"],
                          "ci_high": x["ci_high"], "tone": x["tone"], "failures": bool(x.get("failures")),
                          "tip": f"{x['label']} on {x['machine']}, run {x['run']}: {x['value']}; {x['change']}"}
                         for x in latest], columns=["label", "machine", "mean", "ci_low", "ci_high", "tone", "failures",
                                                    "tip"])
    site.charts = {"latest": charts.latest(rows, metric, unit) if len(rows) else None,
                   "changed": _changed(site.cells, metric, unit)}
    for c in site.cells:
        c["chart"] = charts.history(c["points"], metric, c["unit"], name="history",
                                    title=f"History of {metric.label}: {cell_label(c['name'])}")


def _changed(cells: list[dict[str, Any]], metric: Any, unit: str) -> Any:
    """The history of every cell that changed somewhere along it (a step), one series per cell and machine."""
    parts = [c["points"].assign(series=cell_label(c["name"]) + " · " + c["points"]["series"])
             for c in cells if c["changes"] and len(c["points"])]
    if not parts:
        return None
    points = pd.concat(parts, ignore_index=True).assign(seq=lambda d: range(len(d)))
    return charts.history(points, metric, unit, name="changed", title=f"History of the cells that changed ({unit})")


def _sentences(hist: pd.DataFrame, label: dict[str, str], metric: Any) -> list[tuple[str, str]]:
    """Each cell's last point that changed against the point before, as a sentence in the history's verdict, the
    largest changes first."""
    if hist.empty:
        return []
    found = []
    for _, g in hist.groupby([*NAME_KEYS, "machine"], sort=False, dropna=False):
        r = g.iloc[-1].to_dict()
        tone = of_point(r)
        if int(r["point"]) < 1 or tone not in (Tone.BETTER, Tone.WORSE, Tone.CHANGED):
            continue
        said = say(tone, r["ratio"], r.get("ratio_low"), r.get("ratio_high"), r["p_value"], metric, "the latest run",
                   "the run before", "", str(r.get("change") or ""))
        where = f"{cell_label(r)} on {label[str(r['machine'])]}"
        size = abs(float(r["ratio"]) - 1) if r["ratio"] == r["ratio"] else float("inf")
        found.append((size, replace(said, sentence=f"{where}: {said.sentence}")))
    found.sort(key=lambda t: -t[0])
    return [(s.sentence, s.tone.value) for _, s in found[:SAID]]
