"""Every chart of the report and the site, each one Vega-Lite spec (VEGA_LITE's schema) written as the plain dicts it
is: Vega-Altair wrote the same specs at a tenth of a second each, most of a small report's charts. An HTML page draws
it in the browser with the Vega bundle shipped inside the page or the site (hover for the figure, zoom, a legend that
shows or hides a series; nothing fetched); the Markdown report gets the same spec as a PNG from vl-convert, without a
browser. Numbers in, specs out: the values are computed in runner/analysis, the colours of a verdict come from
runner/report/tone.py, and every error bar is the 95% interval of the analysis (`ci_low`, `ci_high`), labelled.

A chart that would carry one point is not made: one dot says nothing a sentence does not."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.report.tone import COLOURS, ORDER, Tone, legend, word

WIDTH, HEIGHT = 640, 300   # the PNG's size; an HTML page stretches a chart to its column
SCALE = 1.5                # a PNG's pixels per point: sharp on a high-density screen
BAR = "95% interval"       # what every error bar is, said on every chart that has one
DATA = "points"     # the name of a chart's main dataset (its points), in the spec's `datasets`
VEGA_LITE = "v6.4.1"  # the Vega-Lite schema the specs are written for: the tests check them against it
MARKS = {"points": "points", "bars": "bars", "rings": "rings"}  # Vega's mark names: tests find the points by them


@dataclass(frozen=True)
class Chart:
    """One chart: its name (an anchor, a PNG's file name), its title, its Vega-Lite spec with the data inline, how
    many points it carries, and a caption that says what its bars and colours are."""

    name: str
    title: str
    spec: dict[str, Any]
    points: int
    caption: str = ""
    drawn: Callable[[], bytes | None] | None = field(default=None, compare=False, repr=False)  # its PNG, drawn aside

    def script(self) -> str:
        """The spec as JSON that may sit inside an HTML <script type="application/json"> element: '<', '>' and '&'
        escaped, so no value written into it can end the element. In a page a chart takes its column's width (a PNG
        keeps WIDTH); a faceted chart keeps its panels' own."""
        spec = dict(self.spec)
        if isinstance(spec.get("width"), int):
            spec.update(width="container", autosize={"type": "fit-x", "contains": "padding"})
        text = json.dumps(spec, sort_keys=True, ensure_ascii=False, allow_nan=False)
        return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")

    def png(self) -> bytes:
        """The chart as a PNG: the one runner/report/painter.py drew in its helper, else drawn here."""
        if self.drawn is not None:
            made = self.drawn()
            if made is not None:
                return made
        import vl_convert

        return bytes(vl_convert.vegalite_to_png(self.spec, vl_version=vl_version(), scale=SCALE))


@cache
def vl_version() -> str:
    """The Vega-Lite version the specs are written for, as vl-convert names it (else vl-convert's newest)."""
    import vl_convert

    wanted = ".".join(VEGA_LITE.lstrip("v").split(".")[:2])
    known = vl_convert.get_vegalite_versions()
    return wanted if wanted in known else known[-1]


@cache
def bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one script (vl-convert's, no network). Bundling takes seconds, so the script
    is kept in the user's cache (`$XDG_CACHE_HOME/matrix`, by vl-convert's and Vega-Lite's versions) and made once
    per process where that cache cannot be read or written."""
    import vl_convert

    from runner.base import safewrite

    cached = cache_dir() / f"vega-{getattr(vl_convert, '__version__', 'x')}-{vl_version()}.js"
    try:
        st = os.lstat(cached)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_size > 100_000:
            return cached.read_text(encoding="utf-8")
    except OSError:
        pass
    text = str(vl_convert.javascript_bundle(vl_version=vl_version()))  # type: ignore[call-arg]  # (its stub)
    with contextlib.suppress(OSError, safewrite.UnsafePath):
        safewrite.write_text(safewrite.folder(cached.parent, 0o700) / cached.name, text)
    return text


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matrix"


# The script that draws every chart of a page: each <div class="vega" data-spec=ID> from its JSON; a chart that
# cannot be drawn says so in the page and on the console (a test reads both).
EMBED = """(function () {
  function draw() {
    document.querySelectorAll("div.vega[data-spec]").forEach(function (el) {
      var spec = JSON.parse(document.getElementById(el.getAttribute("data-spec")).textContent);
      vegaEmbed(el, spec, {actions: false, renderer: "svg", tooltip: {theme: "light"}})
        .then(function () { el.setAttribute("data-drawn", "yes"); })
        .catch(function (e) { el.textContent = "This chart could not be drawn: " + e; console.error(e); });
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
"""


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


def values(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame as Vega-Lite's inline values: plain numbers, no NaN (a missing value is null)."""
    return [{k: _clean(v) for k, v in r.items()} for r in df.to_dict("records")]


# --- Vega-Lite, written as the dicts it is (Altair wrote the same specs at a tenth of a second each) ---------------

TYPES = {"Q": "quantitative", "N": "nominal", "O": "ordinal", "T": "temporal"}
CONFIG = {"view": {"continuousWidth": 300, "continuousHeight": 300, "stroke": "#dde"},
          "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#eef0f4"},
          "legend": {"labelFontSize": 11, "titleFontSize": 11, "orient": "bottom"}}
SOURCE = {"name": DATA}  # a layer's data: the chart's points, the named dataset


def enc(short: str, **props: Any) -> dict[str, Any]:
    """An encoding channel from Vega-Lite's shorthand ('mean:Q') and its properties."""
    name, kind = short.rsplit(":", 1)
    return {"field": name, "type": TYPES[kind], **props}


def mark(kind: str, **props: Any) -> dict[str, Any]:
    return {"type": kind, **props}


def legend_pick(field: str, name: str) -> dict[str, Any]:
    """A point selection of one series, bound to the legend (click an entry to show it alone)."""
    return {"name": name, "select": {"type": "point", "fields": [field]}, "bind": "legend"}


def seen(pick: dict[str, Any]) -> dict[str, Any]:
    """Full opacity for the picked series (or all when none is), faint for the others."""
    return {"condition": {"param": pick["name"], "value": 1.0}, "value": 0.12}


def zoom(**select: Any) -> dict[str, Any]:
    return {"name": "zoom", "select": {"type": "interval", **select}, "bind": "scales"}


def layered(layers: list[dict[str, Any]], params: Sequence[dict[str, Any]] = (), **props: Any) -> dict[str, Any]:
    """Layers over one chart; the data moves up when every layer has the same, and a layer's selections become the
    chart's, naming the layer (its `name`) they sit in."""
    out: dict[str, Any] = {}
    if layers and all(layer.get("data") == layers[0].get("data") and "data" in layer for layer in layers):
        out["data"] = layers[0]["data"]
        layers = [{k: v for k, v in layer.items() if k != "data"} for layer in layers]
    out["layer"] = layers
    if params:
        out["params"] = [{**p, "views": [MARKS["points"]]} for p in params]
    return {**out, **props}


def tone_scale(tones: Sequence[str], metric: an.Metric, failures: Sequence[bool] = ()) -> dict[str, Any]:
    """The verdict colours for the tones present, in the one order, each named in the metric's words (a step its
    failures decided, flagged in `failures`, by its own: 'more failures', never 'slower')."""
    seen = set(zip(tones, failures, strict=True)) if len(failures) else {(t, False) for t in tones}
    present = [(t, f) for t in ORDER for f in (False, True) if (t.value, f) in seen]
    words = list(dict.fromkeys(word(t, metric, f) for t, f in present))
    colours = {word(t, metric, f): COLOURS[t] for t, f in present}
    return {"domain": words, "range": [colours[w] for w in words]}


def _flags(data: pd.DataFrame) -> list[bool]:
    return [bool(f) for f in data["failures"]] if "failures" in data else [False] * len(data)


def verdicts(data: pd.DataFrame, metric: an.Metric) -> list[str]:
    """Each row's verdict word: its tone's, or for a step its failures decided, 'more failures' / 'fewer failures'."""
    return [word(Tone(t), metric, f) for t, f in zip(data["tone"], _flags(data), strict=True)]


def _finish(chart: dict[str, Any], name: str, title: str, drawn: list[dict[str, Any]], caption: str,
            width: bool = True) -> Chart:
    """The chart's spec: its title, width, the look every chart shares, the schema, and its points as the named
    dataset DATA. No part of it is shared with another chart's or layer's: changing one changes nothing else."""
    spec: dict[str, Any] = {**chart, "title": title}
    if width:
        spec["width"] = WIDTH
    spec.update({"config": CONFIG, "$schema": f"https://vega.github.io/schema/vega-lite/{VEGA_LITE}.json"})
    spec = json.loads(json.dumps(spec))  # a tree of its own: the layers' channels and the look are shared when built
    spec["datasets"] = {DATA: drawn}
    return Chart(name, title, spec, len(drawn), caption)


def ratios(rows: pd.DataFrame, metric: an.Metric, name: str = "answer", title: str = "") -> Chart | None:
    """The answer: each comparison's ratio B/A with its 95% interval, on a log scale around 1, coloured by its
    verdict. `rows`: label, ratio, ratio_low, ratio_high, tone (runner/report/tone.py), sentence."""
    data = rows[rows["ratio"].map(lambda r: r is not None and r == r and r > 0)].copy()
    if len(data) < 2:
        return None
    data["verdict"] = data["tone"].map(legend(metric))
    rows = values(data[["label", "ratio", "ratio_low", "ratio_high", "tone", "verdict", "sentence"]])
    # The largest changes first, as the rows come: a layer that leaves some out (no interval) must not reorder them.
    y = enc("label:N", sort=list(dict.fromkeys(data["label"])), title=None, axis={"labelLimit": 420})
    scale = {"type": "log", "nice": False, "padding": 12}
    x = enc("ratio:Q", scale=scale, title=f"B/A of {metric.label}, log scale, with {BAR} bars")
    colour = enc("verdict:N", scale=tone_scale(data["tone"], metric), title="verdict")
    bars = {"data": SOURCE, "mark": mark("rule", strokeWidth=2), "name": MARKS["bars"],
            "encoding": {"y": y, "x": enc("ratio_low:Q", scale=scale), "x2": {"field": "ratio_high"}, "color": colour}}
    one = {"data": {"values": [{"one": 1}]}, "mark": mark("rule", strokeDash=[4, 3], color="#98a2b3"),
           "encoding": {"x": enc("one:Q")}}
    dots = {"data": SOURCE, "mark": mark("point", filled=True, size=90, opacity=1), "name": MARKS["points"],
            "encoding": {"y": y, "x": x, "color": colour, "tooltip": [
                enc("sentence:N", title="in words"), enc("ratio:Q", format=".3f", title="B/A"),
                enc("ratio_low:Q", format=".3f", title="95% low"), enc("ratio_high:Q", format=".3f", title="95% high")]}}
    shown: list[dict[str, Any]] = [one, bars, dots] if data["ratio_low"].map(lambda v: v is not None and v == v).any() else [one, dots]
    chart = layered(shown, height=max(60, 26 * len(data)))
    return _finish(chart, name, title or f"Each comparison: B/A of {metric.label}, with its {BAR}", rows,
                   f"Each dot is a ratio B/A (>1: B has the higher {metric.label}), its bar the {BAR} of the ratio; "
                   "the colour is the verdict.")


def history(points: pd.DataFrame, metric: an.Metric, unit: str, name: str = "history", title: str = "") -> Chart | None:
    """Each series' figure per point over time (the history's mean, its 95% interval as a bar), one colour per series
    (the legend shows or hides one), a ring in the verdict's colour around each point the history called a step.
    `points`: series, when (ISO 8601), seq (the store's order), mean, ci_low, ci_high, tone, step, tip."""
    data = points[points["mean"].notna()].copy()
    if len(data) < 2:
        return None
    data["verdict"] = verdicts(data, metric)
    cols = ["series", "when", "seq", "mean", "ci_low", "ci_high", "tone", "verdict", "step", "tip"]
    rows = values(data[cols])
    pick = legend_pick("series", "pick_series")
    x = enc("when:T", title="run started (UTC)", scale={"padding": 16},
            axis={"format": "%Y-%m-%d %H:%M", "labelAngle": -30})
    y = enc("mean:Q", title=f"{metric.label} ({unit}), with {BAR} bars", scale={"zero": False})
    colour = enc("series:N", title=None, legend={"labelLimit": 600, "columns": 1, "symbolLimit": 40})
    line = {"data": SOURCE, "mark": mark("line", strokeWidth=1.5),
            "encoding": {"x": x, "y": y, "color": colour, "order": enc("seq:Q"), "opacity": seen(pick)}}
    bars = {"data": SOURCE, "mark": mark("rule"), "name": MARKS["bars"],
            "encoding": {"x": x, "y": enc("ci_low:Q"), "y2": {"field": "ci_high"}, "color": colour,
                         "opacity": seen(pick)}}
    dots = {"data": SOURCE, "mark": mark("point", filled=True, size=45), "name": MARKS["points"],
            "encoding": {"x": x, "y": y, "color": colour, "opacity": seen(pick),
                         "tooltip": [enc("tip:N", title=metric.label)]}}
    steps = data[data["step"].astype(bool)]
    layers: list[dict[str, Any]] = [line, bars, dots]
    if len(steps):
        layers.append({"data": SOURCE, "transform": [{"filter": "datum.step"}], "name": MARKS["rings"],
                       "mark": mark("point", size=260, strokeWidth=2.5, filled=False),
                       "encoding": {"x": x, "y": y, "stroke": enc("verdict:N", scale=tone_scale(
                                                                      steps["tone"], metric, _flags(steps)),
                                                                  title="step against the run before"),
                                    "tooltip": [enc("tip:N", title="step")]}})
    chart = layered(layers, [pick, zoom()], height=HEIGHT)
    return _finish(chart, name, title or f"History of {metric.label}", rows,
                   f"Each point is one run's mean {metric.label}, its bar the {BAR} of the mean; a ring marks a step "
                   "against the run before, in its verdict's colour. Drag to pan, scroll to zoom, click a legend "
                   "entry to show one series.")


def latest(cells: pd.DataFrame, metric: an.Metric, unit: str, name: str = "latest", title: str = "") -> Chart | None:
    """Each machine's cells with their latest figure and its 95% interval, coloured by the verdict against the run
    before, one shape per machine (the legend shows or hides a machine). `cells`: label, machine, mean, ci_low,
    ci_high, tone, tip."""
    data = cells[cells["mean"].notna()].copy()
    if len(data) < 2:
        return None
    data["verdict"] = verdicts(data, metric)
    rows = values(data[["label", "machine", "mean", "ci_low", "ci_high", "tone", "verdict", "tip"]])
    pick = legend_pick("machine", "pick_machine")
    y = enc("label:N", sort=list(dict.fromkeys(data["label"])), title=None, axis={"labelLimit": 420})
    x = enc("mean:Q", title=f"latest {metric.label} ({unit}), with {BAR} bars", scale={"zero": False})
    colour = enc("verdict:N", scale=tone_scale(data["tone"], metric, _flags(data)), title="against the run before")
    bars = {"data": SOURCE, "mark": mark("rule", strokeWidth=2), "name": MARKS["bars"],
            "encoding": {"y": y, "x": enc("ci_low:Q"), "x2": {"field": "ci_high"}, "color": colour,
                         "opacity": seen(pick)}}
    dots = {"data": SOURCE, "mark": mark("point", filled=True, size=80), "name": MARKS["points"],
            "encoding": {"y": y, "x": x, "color": colour, "shape": enc("machine:N", title="machine"),
                         "opacity": seen(pick), "tooltip": [enc("tip:N", title=metric.label)]}}
    chart = layered([bars, dots], [pick, zoom(encodings=["x"])], height=max(60, 22 * data["label"].nunique()))
    return _finish(chart, name, title or f"Latest {metric.label} of each cell", rows,
                   f"Each point is a cell's latest run on one machine, its bar the {BAR} of the mean; the colour is "
                   "its verdict against the run before. Click a machine in the legend to show it alone.")


def by_batch(summary: pd.DataFrame, metric: an.Metric, unit: str) -> Chart | None:
    """The metric against batch size (its mean, the 95% interval as a bar), one line per environment and precision,
    one panel per model; made only where a panel has two batch sizes or more."""
    m = metric.name
    data = summary[summary[f"{m}_n"] > 0].copy()
    if data.empty:
        return None
    panel = data["model"].astype(str) + data["dataset"].map(lambda d: f" · {d}" if d else "") + \
        data["options"].map(lambda o: f" · {o}" if o else "")
    procs = data["gpus"] * data["nodes"]  # at each panel's smallest layout: more processes are the scaling chart's
    data = data.assign(panel=panel)[procs == procs.groupby(panel).transform("min")]
    if data.groupby("panel")["batch_size"].nunique().max() < 2:
        return None
    several = data["environment"].nunique() > 1
    data = data.assign(series=(data["environment"].astype(str) + " · " if several else "") + data["precision"].astype(str),
                       mean=data[f"{m}_mean"] * metric.scale, ci_low=data[f"{m}_ci_low"] * metric.scale,
                       ci_high=data[f"{m}_ci_high"] * metric.scale, n=data[f"{m}_n"])
    pick = legend_pick("series", "pick_series")
    x = enc("batch_size:O", title="batch size")
    y = enc("mean:Q", title=f"{metric.label} ({unit}), with {BAR} bars")
    colour = enc("series:N", title=None)
    line = {"mark": mark("line"), "encoding": {"x": x, "y": y, "color": colour, "opacity": seen(pick)}}
    bars = {"mark": mark("rule"), "name": MARKS["bars"],
            "encoding": {"x": x, "y": enc("ci_low:Q"), "y2": {"field": "ci_high"}, "color": colour,
                         "opacity": seen(pick)}}
    dots = {"mark": mark("point", filled=True, size=45), "name": MARKS["points"],
            "encoding": {"x": x, "y": y, "color": colour, "opacity": seen(pick), "tooltip": [
                enc("series:N"), enc("batch_size:O"), enc("mean:Q", format=".4g"), enc("ci_low:Q", format=".4g"),
                enc("ci_high:Q", format=".4g"), enc("n:Q")]}}
    cols = ["panel", "series", "batch_size", "mean", "ci_low", "ci_high", "n"]
    rows = values(data[cols])
    chart = {"data": SOURCE, "facet": enc("panel:N", title=None), "columns": 2,
             "spec": layered([line, bars, dots], width=300, height=220),
             "params": [{**pick, "views": [MARKS["points"]]}], "resolve": {"scale": {"x": "independent"}}}
    title = f"{metric.label.capitalize()} against batch size"
    return _finish(chart, m, title, rows, f"Each point is a cell's mean, its bar the {BAR} of the mean.",
                   width=False)


def ideal_lines(scale: pd.DataFrame) -> list[dict[str, float]]:
    """The ideal speed-up lines' ends: a line's speed-up is over its own smallest layout, which need not be one
    process, so ideal is processes / base; one line per distinct base, up to the largest layout."""
    group = ["environment", "model", "precision", "batch_size", "dataset", "options"]
    bases = sorted({int(b) for b in scale.groupby(group, sort=False, dropna=False)["processes"].min()})
    top = int(scale["processes"].max())
    return [{"base": b, "processes": p, "speedup": p / b} for b in bases for p in (b, top)]


def speedup(scale: pd.DataFrame) -> Chart | None:
    """Speed-up against the processes (per node × nodes), with the ideal line; made only with two layouts or more."""
    if scale.empty or scale["processes"].nunique() < 2:
        return None
    data = scale.assign(series=scale["environment"].astype(str) + " · " + scale["model"].astype(str) + " · " +
                        scale["precision"].astype(str) + " · batch " + scale["batch_size"].astype(str))
    ratio = data["speedup"] / data["throughput_mean"]
    data = data.assign(low=data["throughput_ci_low"] * ratio, high=data["throughput_ci_high"] * ratio)
    rows = values(data[["series", "processes", "speedup", "low", "high", "efficiency"]])
    pick = legend_pick("series", "pick_series")
    x = enc("processes:Q", title="processes (per node × nodes)")
    colour = enc("series:N", title=None, legend={"labelLimit": 420, "columns": 1})
    ideal = {"data": {"values": ideal_lines(data)}, "mark": mark("line", strokeDash=[5, 4], color="#98a2b3"),
             "encoding": {"x": enc("processes:Q"), "y": enc("speedup:Q"), "detail": enc("base:N")}}
    line = {"data": SOURCE, "mark": mark("line"),
            "encoding": {"x": x, "y": enc("speedup:Q", title="speed-up"), "color": colour, "opacity": seen(pick)}}
    bars = {"data": SOURCE, "mark": mark("rule"), "name": MARKS["bars"],
            "encoding": {"x": x, "y": enc("low:Q"), "y2": {"field": "high"}, "color": colour, "opacity": seen(pick)}}
    dots = {"data": SOURCE, "mark": mark("point", filled=True, size=45), "name": MARKS["points"],
            "encoding": {"x": x, "y": enc("speedup:Q"), "color": colour, "opacity": seen(pick), "tooltip": [
                enc("series:N"), enc("processes:Q"), enc("speedup:Q", format=".2f"),
                enc("efficiency:Q", format=".0%")]}}
    chart = layered([ideal, line, bars, dots], [pick], height=HEIGHT)
    return _finish(chart, "scaling", "Speed-up against processes", rows,
                   f"Speed-up over each line's smallest layout, its bar the {BAR} of the throughput carried over; "
                   "dashed: ideal.")
