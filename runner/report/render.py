"""Turning views into files: Jinja2 for Markdown and HTML, pandas for CSV and JSON, rich for the terminal."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import pandas as pd

from runner import analysis as an
from runner.analysis.change import threshold_text
from runner.report import fmt, labels, views
from runner.report import pairs as pair_views
from runner.report.fmt import MdSafe, Table, TableCell, records
from runner.report.pairs import comparison_doc

if TYPE_CHECKING:  # vl-convert loads only when a format draws charts
    from runner.base.aside import Aside
    from runner.report.charts import Chart
    from runner.report.painter import Painter

JSON_SCHEMA = 3  # of report.json and `compare --format json`; bump when a field changes meaning
# 2: cells carry their definition (cell_key, run settings); names with more than one definition are listed;
# pairs carry a decision (pass/fail/undecided) and p adjusted for the false discovery rate.
# 3: times in ISO 8601 (runs, history); pairs carry their tone; report.json opens with the answer (its findings).


# --- Jinja ------------------------------------------------------------------------------------

def _md_finalize(value: Any) -> Any:
    """Autoescape for Markdown: everything a template prints is escaped unless it is MdSafe."""
    return value if isinstance(value, MdSafe) else fmt.md_escape(value)


@cache
def jinja(kind: str) -> jinja2.Environment:
    """The template environment: HTML autoescaped, Markdown escaped by finalize, undefined names fail."""
    loader = jinja2.PackageLoader("runner.report", "templates")
    common: dict[str, Any] = {"loader": loader, "undefined": jinja2.StrictUndefined, "trim_blocks": True,
                              "lstrip_blocks": True, "keep_trailing_newline": True}
    if kind == "md":
        env = jinja2.Environment(autoescape=False, finalize=_md_finalize, **common)  # noqa: S701 (Markdown)
        env.filters["md_table"] = fmt.md_table
        env.filters["code"] = fmt.md_code_block
        env.filters["md_link"] = lambda text, anchor: MdSafe(f"[{fmt.md_escape(text)}](#{anchor})")
    else:
        env = jinja2.Environment(autoescape=True, **common)
    return env


def render_template(name: str, **context: Any) -> str:
    kind = "md" if name.endswith(".md.j2") else "html"
    return jinja(kind).get_template(name).render(**context)


# --- pandas -----------------------------------------------------------------------------------

def dumps(obj: Any) -> str:
    return fmt.json_text(obj) + "\n"


def repeats_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The long frame as a flat table: tags joined, the multi-line log tail left out, admission's checks as the
    failed ones' words (`admission` beside them) and the printed resolution as JSON, never a Python repr."""
    out = df.drop(columns=[c for c in ("log_tail", "loss_at", "checks") if c in df]).copy()
    out["tags"] = out["tags"].map(lambda t: " ".join(t))
    out["repeat"] = out["repeat"].astype(int) + 1  # numbered from 1, as `matrix show` and every page number them
    for c in ("started_at", "finished_at"):
        if c in out:
            out[c] = out[c].map(fmt.iso8601)
    if "resolution" in out:
        out["resolution"] = out["resolution"].map(lambda d: json.dumps(d, sort_keys=True) if d else "")
    return out


def report_json(model: views.ReportModel) -> str:
    counts = model.frame["status"].value_counts().to_dict()
    doc = {
        "schema": JSON_SCHEMA,
        "kind": "matrix-report",
        "name": model.name,
        "units": {m.name: m.stored_unit for m in an.METRICS.values() if m.stored_unit},
        "statuses": {k: int(v) for k, v in sorted(counts.items())},
        "runs": [run_doc(r) for r in model.run_records],
        "answer": {"headline": model.answer.headline if model.answer else "",
                   "findings": records(model.answer.findings) if model.answer else []},
        "environments": records(model.environments_df.drop(columns="side")),
        "cells": records(model.summary),
        "recipes": records(model.recipes_df.drop(columns="side")),
        "measurement": records(model.measurement_df),
        **{k: v for b in model.views for k, v in b.json().items()},
        "flags": records(model.flags_df),
        "definitions": records(model.definitions_df),
    }
    return dumps(doc)


def run_doc(r: dict[str, Any]) -> dict[str, Any]:
    """A run as report.json writes it: its times in ISO 8601, its status as its repeats hold it (and as stored)."""
    from runner.report.head import run_status

    counts = dict(r.get("counts") or {})
    return {"run_id": r["run_id"], "matrix_name": r.get("matrix_name"), "started_at": fmt.iso8601(r.get("started_at")),
            "finished_at": fmt.iso8601(r.get("finished_at")), "host": r.get("host"),
            "status": run_status(str(r.get("status") or ""), counts), "stored_status": r.get("status"), "counts": counts}


# --- report -----------------------------------------------------------------------------------

def slug(name: str) -> str:
    """A directory name from a matrix name: letters, digits, dot, dash and underscore only."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return s or "matrix"


def write_report(model: views.ReportModel, formats: Sequence[str], out: Path, painter: Painter | None = None,
                 early: dict[str, list[Chart]] | None = None, texts: Aside | None = None) -> list[Path]:
    """Write the report in each format (runner/report/formats/: one module each) into `out`; returns the files
    written (plots included), in the formats' order. Each file through runner/base/safewrite.py: a link or a FIFO planted
    at a report's name (or at plots/) is refused, never followed. With a `painter` (runner/report/painter.py) the PNG
    charts are drawn in its process while the other formats are written; the formats that show PNGs come last, or
    first where children make the other formats' texts (`Format.from_model`, runner/base/aside.py).
    `early`: charts already made (and sent to the painter) before the views were built (`summary_charts`). `texts`:
    the formats' texts made aside from the frame alone (`start_ahead`), taken by `Format.write_ahead`."""
    from runner.report.formats import FORMATS

    out.mkdir(parents=True, exist_ok=True)
    chosen = [FORMATS.get(name) for name in formats]
    made = report_charts(model, early) if any(f.plots for f in chosen) else {}
    if painter is not None and any("png" in f.plots for f in chosen):
        made = painted(made, painter)
    order = sorted(chosen, key=lambda f: "png" in f.plots)  # stable: the others first, in their order
    if texts is not None:
        # What the built report alone makes is made in children while this process writes the rest: every such text
        # where a format that waits on the painter comes last, else all but the last (this process makes it). With
        # children at work, the formats that wait on the painter are written first, and the children's texts taken.
        later = [item for f in order for item in f.from_model(model, made).items()]
        forked = [texts.start(name, make) for name, make in (later if "png" in order[-1].plots else later[:-1])]
        if any(forked):
            order = sorted(chosen, key=lambda f: "png" not in f.plots)
    written = {f.name: f.write_ahead(model, out, made, texts) if texts is not None else f.write(model, out, made)
               for f in order}
    return [path for f in chosen for path in written[f.name]]


def start_ahead(frame: pd.DataFrame, formats: Sequence[str], texts: Aside) -> None:
    """Start making, in children, the texts the chosen formats can make from the frame alone (repeats.csv): the report
    builds its views meanwhile (runner/base/aside.py)."""
    from runner.report.formats import FORMATS

    for name in formats:
        for file, make in FORMATS.get(name).ahead(frame).items():
            texts.start(file, make)


def painted(made: dict[str, list[Chart]], painter: Painter) -> dict[str, list[Chart]]:
    """The same charts, each with its PNG on its way from the painter's process (a chart already sent keeps its
    own)."""
    from dataclasses import replace

    from runner.report.charts import SCALE, vl_version

    flat = [c for cs in made.values() for c in cs if c.drawn is None]
    first = painter.submit([(c.spec, vl_version(), SCALE) for c in flat]) if flat else 0
    number = {id(c): first + i for i, c in enumerate(flat)}
    return {k: [replace(c, drawn=partial(painter.png, number[id(c)])) if id(c) in number else c for c in cs]
            for k, cs in made.items()}


CHART_SECTIONS = ("answer", "grid", "scaling", "history")  # the order a report shows its charts in


def summary_charts(summary: pd.DataFrame, hist: pd.DataFrame) -> dict[str, list[Chart]]:
    """The charts made from the summary and the history alone ('grid', 'scaling', 'history'): a report makes them
    (and sends them to its painter) before it builds the comparisons, which take most of its time."""
    from runner.report import chartdata, charts

    m = an.METRICS["throughput"]
    made: dict[str, list[Any]] = {
        "grid": [charts.by_batch(summary, x, an.shown_unit(summary.get(f"unit_{x.name}", pd.Series(dtype=object))
                                                           .unique(), x.name))
                 for x in an.METRICS.shown("plot")],
        "scaling": [charts.speedup(an.scaling(summary))]}
    if not hist.empty:
        unit = an.shown_unit(hist["unit"].unique(), m.name)
        made["history"] = [charts.history(chartdata.history_points(hist, m, unit), m, unit)]
    return {k: [c for c in v if c is not None] for k, v in made.items()}


def answer_charts(found: Any) -> dict[str, list[Chart]]:
    """The answer's chart (the ratios with their intervals), made as soon as the answer is known: a report sends it to
    its painter before it builds the rest of its views."""
    from runner.report import answer, charts

    if found is None:
        return {}
    shown = charts.ratios(answer.charted(found), an.METRICS["throughput"])
    return {"answer": [shown] if shown is not None else []}


def report_charts(model: views.ReportModel, early: dict[str, list[Chart]] | None = None) -> dict[str, list[Chart]]:
    """Every chart of a report, by the section it sits in: 'answer' (the ratios with their intervals), 'grid' (each
    plotted metric against batch size), 'scaling' and 'history'. A chart that would carry one point is not made.
    `early`: the charts made for this model while it was built (`summary_charts`, then `answer_charts`); what it
    does not hold is made now."""
    made = dict(early) if early is not None else {}
    if not made.keys() - {"answer"}:  # summary_charts always names its sections, charted or not
        made.update(summary_charts(model.summary, model.history_df))
    if "answer" not in made:
        made.update(answer_charts(model.answer))
    return {k: made[k] for k in CHART_SECTIONS if made.get(k)}


def chart_script(c: Chart) -> Any:
    """A chart's spec, escaped for a <script type="application/json"> element (runner/report/charts.py)."""
    from markupsafe import Markup

    return Markup(c.script())


def page_scripts() -> tuple[Any, Any]:
    """The Vega bundle and the script that draws a page's charts, for inline <script> elements: a report is one file
    that opens offline. (The bundle holds no '</script'; one is broken in two if a later one does.)"""
    from markupsafe import Markup

    from runner.report import charts

    return Markup(re.sub(r"</(script)", r"<\\/\1", charts.bundle(), flags=re.I)), Markup(charts.EMBED)


# --- compare ----------------------------------------------------------------------------------

@dataclass
class CompareView:
    """A comparison as formatted tables and sentences, shared by Markdown and the terminal."""

    title: str
    method: str
    environments: Table
    pairs: Table
    summary: str
    precision: Table | None
    unpaired: Table | None
    recipes: Table | None = None
    definitions: Table | None = None
    definitions_note: str = ""
    notes: list[str] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)  # where each side ran, when a side holds another machine's
    headline: str = ""                                  # the answer, first: the report's own (runner/report/answer.py)
    said: list[tuple[str, str]] = field(default_factory=list)  # its sentences, (sentence, tone), changes first


def compare_view(c: an.Comparison) -> CompareView:
    a, b, m = c.a.ref, c.b.ref, c.metric
    info = c.environments
    headers = [f"{side}: {env}" for side, env in zip(info["side"], info["environment"], strict=True)]
    env_table = views.environments_table(info.assign(environment=headers))
    units = [*c.a.frame.get(f"unit_{m.name}", ()), *c.b.frame.get(f"unit_{m.name}", ())]
    method = (f"Metric: {an.metric_heading(m.name, units)}, mean ± std over the repeats that ended ok; the ratio is {b}/{a}, "
              f"with its 95% interval. A pair changed ({m.better}, {m.worse}) when the change is at least {threshold_text(c.min_effect)} "
              f"and significant (Welch's t-test on the log scale, p < {c.alpha:g} adjusted for the false discovery "
              f"rate over the pairs tested, {c.correction.replace('-', '–').title()}); it is the same only when the "
              f"whole interval lies within ±{threshold_text(c.min_effect)}; otherwise it is undecided, with the repeats a side "
              "that would decide it. Fewer than two ok repeats on a side, or run settings that differ: undecided.")
    a_kind, b_kind = c.a.kind, c.b.kind
    title = f"{a} ({a_kind}) vs {b} ({b_kind})"
    pairs = pair_views.pairs_table(c, a, b)
    if c.pairs.empty:
        summary = f"No cell of {b} has a partner in {a}: nothing to compare."
    else:
        summary = f"{pair_views.geomean_sentence(c, a, b)}. {pair_views.decisions_sentence(c)}"
    precision = None
    if not c.precision_ratios.empty:
        side_names = {"A": a, "B": b}
        r = c.precision_ratios
        # A side of several environments has each one's ratios (its `environment`): a column each, never pooled.
        envs = r["environment"].tolist() if "environment" in r else [None] * len(r)
        named = [side_names[s] + (f" ({e})" if isinstance(e, str) and e else "") for s, e in zip(r["side"], envs,
                                                                                                 strict=True)]
        precision = pair_views.precision_ratio_table(r.assign(side=named), list(dict.fromkeys(named)))
    unpaired = None
    if not c.unpaired.empty:
        u = c.unpaired
        keys = labels.varying(u, an.PARAM_KEYS, always=("model", "precision", "batch_size"))
        names = {"A": a, "B": b}
        # The environment column only says something when a side is not itself one environment.
        show_env = any(r["environments"] != names[r["side"]] for r in u.to_dict("records"))
        unpaired = Table(["side", *(["environment"] if show_env else []), *(labels.KEY_LABELS[k] for k in keys),
                          "statuses"])
        for r in u.to_dict("records"):
            unpaired.add(names[r["side"]], *([r["environments"]] if show_env else []),
                         *(labels.key_text(k, r[k]) for k in keys), TableCell(r["statuses"], "status"))
    recipes = None
    if not c.recipes.empty:
        recipes = Table(["precision", a, b])
        for r in c.recipes.to_dict("records"):
            recipes.add(TableCell(r["precision"], "key"), r["a"], r["b"])
    definitions, note = None, ""
    several = [d.several.assign(side=side) for side, d in (("A", c.a.definitions), ("B", c.b.definitions))
               if not d.several.empty]
    if several:
        both = pd.concat(several, ignore_index=True)
        pooled = c.a.pool or c.b.pool
        n_names = sum(d.n_names for d in (c.a.definitions, c.b.definitions))
        definitions = views.definitions_table(both, ["side", *an.PARAM_KEYS], pooled, {"A": a, "B": b})
        note = labels.definitions_sentence(n_names, pooled, "the pairs").replace(
            "the tables show each one's newest definition", "the pairs use each one's newest definition (--pool "
            "to pool them)")
    from runner.report import answer

    found = answer.build([answer.Compared("environment", a, b, c.pairs, "pairs")], pd.DataFrame(), m,
                         f"No cell of {b} has a partner in {a}: nothing to compare.", c.min_effect)
    said = [*found.decided, *found.undecided, *((line, "none") for line in found.more)]
    return CompareView(title, method, env_table, pairs, summary, precision, unpaired, recipes, definitions, note,
                       list(c.notes), pair_views.machine_lines(c), found.headline, said)


def compare_markdown(c: an.Comparison) -> str:
    return render_template("compare.md.j2", v=compare_view(c))


def compare_csv(c: an.Comparison) -> str:
    return fmt.csv_text(pair_views.with_tone(c.pairs, c.metric).assign(a=c.a.ref, b=c.b.ref, metric=c.metric.name))


def compare_json(c: an.Comparison) -> str:
    return dumps({"schema": JSON_SCHEMA, "kind": "matrix-compare", **comparison_doc(c)})


def compare_terminal(c: an.Comparison, color: bool | None = None, width: int | None = None) -> str:
    """The comparison as rich tables, rendered to text (ANSI colours only when stdout is a terminal)."""
    from rich.text import Text

    from runner.base.console import console as make_console
    from runner.base.console import rich_table

    v = compare_view(c)
    buf = io.StringIO()
    console = make_console(buf, tty=sys.stdout.isatty(), color=color, width=width)
    from runner.report.tone import COLOURS, Tone

    console.print(Text(v.title, style="bold"))
    for line in v.machines:
        console.print(Text(line, style="bold yellow" if line.startswith("The sides") else ""))
    # The answer first: the headline and its sentences, each in its tone's colour; then how it was reached.
    console.print(Text(v.headline, style="bold"))
    for sentence, tone in v.said:
        console.print(Text(f"- {sentence}", style=COLOURS[Tone(tone)] if tone in Tone.__members__.values() else ""))
    console.print(Text(""))  # the answer stands apart from how it was reached
    console.print(Text(v.method, style="dim"))
    console.print(rich_table(v.environments, "Environments"))
    if v.definitions is not None:
        console.print(Text(v.definitions_note, style="bold"))
        console.print(rich_table(v.definitions, "Cells measured under more than one definition"))
    if v.pairs.rows:
        console.print(rich_table(v.pairs, "Pairs"))
    console.print(Text(v.summary, style="bold"))
    for line in v.notes:
        console.print(Text(line, style="yellow"))
    if v.recipes is not None:
        console.print(rich_table(v.recipes, "Precisions that ran differently on the two sides"))
    if v.precision is not None:
        console.print(rich_table(v.precision, "Precision speed-up (throughput ÷ fp32)"))
    if v.unpaired is not None:
        console.print(rich_table(v.unpaired, "Unpaired cells"))
    return buf.getvalue()


__all__ = ["write_report", "report_json", "compare_markdown", "compare_csv", "compare_json", "compare_terminal",
           "slug"]
