"""The decisions as report tables (runner/report/fmt.Table): the CLI prints them, reports embed them."""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from runner.analysis import gate, references, shown_unit
from runner.analysis.adaptive import CellState, Stop
from runner.analysis.verdict import Verdict
from runner.report.fmt import Table, TableCell, mean_std, p_value
from runner.report.tone import interval, of_point

VERDICT_CLS = {Verdict.PASS.value: "good", Verdict.FAIL.value: "bad", Verdict.UNDECIDED.value: "status"}


def verdict_table(judgements: Sequence[references.Judgement]) -> Table:
    rows = references.rows(judgements)
    why = any(r["why"] for r in rows)
    t = Table(["verdict", "cell", "metric", "reference", "measured", "margin", "repeats", *(["why"] if why else [])],
              align=["l", "l", "l", "l", "r", "r", "l", *(["l"] if why else [])])
    for row in rows:
        t.add(TableCell(row["verdict"], VERDICT_CLS[row["verdict"]]), row["cell"], row["metric"], row["reference"],
              TableCell(row["measured"], "num"), TableCell(row["margin"], "num"), row["repeats"],
              *([TableCell(row["why"], "muted")] if why else []))
    return t


def gate_table(checks: Sequence[gate.GateCheck]) -> Table:
    """The checks that failed or could not be decided (the passed ones are counted in the summary line)."""
    t = Table(["verdict", "rule", "cell", "A", "B", "change", "p", "why"],
              align=["l", "l", "l", "r", "r", "r", "r", "l"])
    for row in gate.rows(checks):
        t.add(TableCell(row["verdict"], VERDICT_CLS[row["verdict"]]), row["rule"], row["cell"], TableCell(row["A"], "num"),
              TableCell(row["B"], "num"), TableCell(row["change"], "bad" if row["verdict"] == "fail" else "num"),
              TableCell(row["p"], "num"), row["why"])
    return t


_STOP_CLS = {Stop.TARGET: "good", Stop.MAX: "status", Stop.NOT_OK: "muted", Stop.MORE: "status"}


def adaptive_table(states: Sequence[CellState]) -> Table:
    t = Table(["cell", "repeats", "95% CI of the mean", "target", "stopped"], align=["l", "r", "r", "r", "l"])
    keys = references.varying_keys([s.cell for s in states])
    for s in states:
        rule = s.cell.run.adaptive
        ci = "—" if math.isnan(s.assessment.ci) else f"±{s.assessment.ci:.1%}"
        words = {Stop.TARGET: "target reached", Stop.MAX: f"max ({rule.max if rule else '?'}) reached",
                 Stop.NOT_OK: "a repeat did not end ok", Stop.MORE: "stopped early (interrupted)"}
        t.add(references.cell_words(s.cell, keys), str(s.assessment.n), ci, f"±{rule.target_ci:.1%}" if rule else "",
              TableCell(words[s.assessment.stop], _STOP_CLS[s.assessment.stop]))
    return t


def _date(ts: Any) -> str:
    """A stored epoch time in UTC; a dash for none, NaN or one past a date (a result stored without its start)."""
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"


def history_table(hist: pd.DataFrame, unit: str | None = None) -> Table:
    """One row per point (a measurement: a run, with the runs that resumed it); the cell in words where its series
    begins, with its key when another definition of the same name has a history too and its machine when several
    have; a boundary row where a name's definition changed from its previous point (what changed: never tested as a
    step); a step in bold. The mean is labelled with the points' own unit (their `unit` column: tok/s for a
    transformer) unless `unit` is given."""
    unit = unit or shown_unit(hist.get("unit", ()), "throughput")
    t = Table(["cell", "date (UTC)", "runs", "repeats", f"mean ± std ({unit})", "vs previous", "p", "step"],
              align=["l", "l", "l", "r", "r", "r", "r", "l"])
    name_cols = [c for c in ("environment", "model", "precision", "batch_size", "dataset", "gpus", "nodes", "options",
                             "machine") if c in hist]
    series = hist["series"] if "series" in hist else hist.get("cell_key", pd.Series(dtype=object))
    names = series.groupby([hist[c] for c in name_cols], sort=False, dropna=False).transform("nunique") \
        if len(hist) else pd.Series(dtype=int)
    machines = hist["machine"].nunique() > 1 if "machine" in hist and len(hist) else False
    last = None
    for r, s, n_defs in zip(hist.itertuples(index=False), series, names, strict=True):
        why = r.undecided if isinstance(getattr(r, "undecided", ""), str) else ""
        label = " ".join(str(getattr(r, k)) for k in ("environment", "model", "precision", "batch_size"))
        if getattr(r, "options", ""):
            label += f" {r.options}"
        if n_defs > 1:
            label += f" (definition {r.cell_key})"
        if machines:
            label += f" on {'machine ' + str(r.machine) if r.machine else 'this store'}"
        boundary = getattr(r, "boundary", "")
        if isinstance(boundary, str) and boundary:
            t.add("", "", "", "", "", "", "", TableCell(f"definition changed: {boundary}; not compared across", "status"),
                  row_class="group")
        first = s != last
        last = s
        ratio = "—" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
        mean = mean_std(r.mean, r.std, int(r.n)) if r.n else "—"  # the one format of a figure and its spread
        outcomes = getattr(r, "outcomes", "")
        repeats = str(r.n) if not isinstance(outcomes, str) or outcomes in ("", f"{r.n} ok") else outcomes
        t.add(label if first else "", _date(r.date), r.runs, repeats, TableCell(mean, "num"), TableCell(ratio, "num"),
              TableCell(p_value(r.p_value), "num"),
              TableCell(f"step: {r.change}{_interval(r)}" if r.step else f"undecided: {why}" if why else "",
                        of_point(r._asdict()).value if r.step or why else ""),  # the step's direction, not its words
              row_class="group" if first and not boundary else "")
    return t


def _interval(r: Any) -> str:
    """' (1.05–1.18)': a step's 95% interval, in the orientation of its words; '' without one."""
    from runner import analysis as an

    iv = interval(r.ratio, getattr(r, "ratio_low", math.nan), getattr(r, "ratio_high", math.nan),
                  an.METRICS["throughput"])
    return f" ({iv})" if iv else ""


def terminal(*parts: Table | str, titles: Sequence[str] = ()) -> str:
    """Tables and lines as text through the one console factory: colour only on a terminal (never with
    NO_COLOR), unwrapped when piped."""
    from rich.text import Text

    from runner.base import console as consoles

    buf = io.StringIO()
    tty = sys.stdout.isatty()
    out = consoles.console(buf, tty=tty, width=None if tty else consoles.PIPED_WIDTH)
    titles = list(titles)
    for part in parts:
        if isinstance(part, Table):
            consoles.print_table(out, part, titles.pop(0) if titles else "")
        else:
            out.print(Text(part))
    return buf.getvalue()
