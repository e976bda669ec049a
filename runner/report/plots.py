"""Plots with matplotlib's Agg backend: metric against batch size per precision, and speedup against GPUs.

SVG goes inline into the HTML report (text kept as text, ids salted per figure so several figures can
share one page), PNG beside the Markdown report.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports are built on servers and in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from runner import analysis as an  # noqa: E402

MAX_FACETS = 9
MAX_SCALING_LINES = 12
LEGEND_COLUMNS = 4
PALETTE = {"fp32": "#1f77b4", "tf32": "#17becf", "fp16": "#d62728", "amp": "#ff7f0e",
           "amp-bf16": "#2ca02c", "bf16": "#9467bd"}
EXTRA_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
STYLE: dict[str, Any] = {"font.size": 9, "axes.titlesize": 10, "axes.spines.top": False, "axes.spines.right": False,
         "axes.grid": True, "grid.alpha": 0.3, "svg.fonttype": "none", "figure.dpi": 100}


@dataclass
class Plot:
    """One figure, in the formats asked for."""

    name: str
    title: str
    svg: str | None = None
    png: bytes | None = None


def _colour(precision: str) -> str:
    if precision in PALETTE:
        return PALETTE[precision]
    return EXTRA_COLOURS[sum(map(ord, precision)) % len(EXTRA_COLOURS)]  # stable across processes


def _facet_title(row: pd.Series, varying: list[str]) -> str:
    parts = [str(row["model"])]
    for k in varying:
        v = row[k]
        if k == "gpus":
            parts.append(f"{v} GPU{'s' if v != 1 else ''}")
        elif k == "nodes":
            parts.append(f"{v} node{'s' if v != 1 else ''}")
        elif v != "":
            parts.append(str(v))
    return " · ".join(parts)


class _ErrorBars:
    """All of an axes' error bars (with caps) as one line per colour instead of three artists per
    series (matplotlib's errorbar): what keeps plotting a big matrix quick."""

    def __init__(self) -> None:
        self.segments: list[list[tuple[float, float]]] = []
        self.colours: list[str] = []

    def add(self, x: Any, y: Any, err: Any, colour: str, cap: float) -> None:
        for xi, yi, ei in zip(x, y, err, strict=True):
            if not ei or ei != ei:  # no spread (or a single repeat): no bar
                continue
            lo, hi = yi - ei, yi + ei
            self.segments += [[(xi, lo), (xi, hi)], [(xi - cap, lo), (xi + cap, lo)], [(xi - cap, hi), (xi + cap, hi)]]
            self.colours += [colour] * 3

    def draw(self, ax: Any) -> None:
        # One NaN-separated line per colour: a single path each, in SVG as in PNG.
        by_colour: dict[str, tuple[list[float], list[float]]] = {}
        for seg, colour in zip(self.segments, self.colours, strict=True):
            xs, ys = by_colour.setdefault(colour, ([], []))
            xs += [seg[0][0], seg[1][0], math.nan]
            ys += [seg[0][1], seg[1][1], math.nan]
        for colour, (xs, ys) in by_colour.items():
            ax.plot(xs, ys, color=colour, linewidth=1.1, linestyle="-", marker="", scalex=False, scaley=False)


def _plain(text: str) -> str:
    """A label drawn as written: a '$' would otherwise start matplotlib's math mode."""
    return text.replace("$", r"\$")


def _layout(fig: Figure, rows: int, cols: int, legend_rows: int,
            axes_size: tuple[float, float] = (3.4, 2.3)) -> float:
    """Fixed margins in inches instead of tight_layout or bbox_inches='tight', which each cost a full
    extra draw per figure (most of a report's time on a big store). Returns the figure height."""
    ax_w, ax_h = axes_size
    gap_w, gap_h, left, right = 0.85, 0.85, 0.8, 0.25
    top = 0.75 if legend_rows else 0.45
    bottom = 0.6 + 0.24 * legend_rows
    width = left + right + cols * ax_w + (cols - 1) * gap_w
    height = top + bottom + rows * ax_h + (rows - 1) * gap_h
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                        bottom=bottom / height, wspace=gap_w / ax_w, hspace=gap_h / ax_h)
    return height


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


def _render(fig: Figure, name: str, svg: bool, png: bool) -> tuple[str | None, bytes | None]:
    svg_text = png_bytes = None
    if svg:
        with plt.rc_context({"svg.hashsalt": name}):
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
        text = buf.getvalue()
        svg_text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: it is inlined into HTML
    if png:
        out = io.BytesIO()
        fig.savefig(out, format="png", dpi=110, metadata={"Software": None})
        png_bytes = out.getvalue()
    plt.close(fig)
    return svg_text, png_bytes


def batch_plot(summary: pd.DataFrame, metric: str, svg: bool, png: bool) -> Plot | None:
    """Metric mean against batch size with std error bars: one line per environment and precision."""
    m = an.METRICS[metric]
    data = summary[summary[f"{metric}_n"] > 0]
    if data.empty:
        return None
    # Against batch size at each configuration's smallest layout; more GPUs are the scaling plot's business.
    facet_keys = ["model", "dataset", "options"]
    procs = data["gpus"] * data["nodes"]
    data = data[procs == procs.groupby([data[k] for k in facet_keys], dropna=False).transform("min")]
    varying = [k for k in [*facet_keys[1:], "gpus", "nodes"] if data[k].nunique() > 1]
    facets = list(data.groupby(facet_keys, sort=False, dropna=False))[:MAX_FACETS]
    envs = list(dict.fromkeys(data["environment"]))
    rows, cols = _grid(len(facets))
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, axes = plt.subplots(rows, cols, squeeze=False)
        handles: dict[str, Any] = {}
        for ax, (_, g) in zip(axes.flat, facets, strict=False):
            batches = sorted(set(g["batch_size"]))
            pos = {b: i for i, b in enumerate(batches)}
            series = list(g.groupby(["environment", "precision"], sort=False))
            series.sort(key=lambda s: (envs.index(s[0][0]), an.precision_index(s[0][1])))
            width = 0.5 / max(1, len(series))
            top = 0.0
            bars = _ErrorBars()
            for i, ((env, precision), s) in enumerate(series):
                s = s.sort_values("batch_size")
                ei = envs.index(env)
                dodge = (i - (len(series) - 1) / 2) * width if len(batches) == 1 else 0.0
                x = [pos[b] + dodge for b in s["batch_size"]]
                y = s[f"{metric}_mean"] * m.scale
                err = s[f"{metric}_std"].fillna(0) * m.scale
                label = _plain(f"{env} · {precision}" if len(envs) > 1 else str(precision))
                colour = _colour(str(precision))
                (h,) = ax.plot(x, y, color=colour, marker=MARKERS[ei % len(MARKERS)],
                               linestyle=LINESTYLES[ei % len(LINESTYLES)], markersize=5, linewidth=1.4, label=label)
                bars.add(x, y, err, colour, cap=0.06)
                handles.setdefault(label, h)
                top = max(top, float((y + err).max()))
            bars.draw(ax)
            ax.set_xticks(range(len(batches)), [str(b) for b in batches])
            ax.set_xlim(-0.5, len(batches) - 0.5)
            ax.set_xlabel("batch size")
            ax.set_ylabel(an.metric_heading(m.name, g.get(f"unit_{m.name}", ())))
            ax.set_title(_plain(_facet_title(g.iloc[0], varying)))
            ax.set_ylim(0, top * 1.1 if top > 0 else 1)
        for ax in list(axes.flat)[len(facets):]:
            ax.set_visible(False)
        height = _layout(fig, rows, cols, legend_rows=math.ceil(len(handles) / LEGEND_COLUMNS))
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(LEGEND_COLUMNS, len(handles)),
                   frameon=False, bbox_to_anchor=(0.5, 0.08 / height))
        fig.suptitle(f"{m.label.capitalize()} against batch size (mean ± std)", fontsize=11,
                     y=1 - 0.12 / height, va="top")
        title = f"{m.label.capitalize()} against batch size"
        svg_text, png_bytes = _render(fig, metric, svg, png)
    return Plot(metric, title, svg_text, png_bytes)


def ideal_lines(scale: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ideal speed-up lines: a line's speed-up is over its own smallest layout, which need not be one
    process, so ideal is processes / base; one line per distinct base, up to the largest layout."""
    if scale.empty:
        return []
    group = ["environment", "model", "precision", "batch_size", "dataset", "options"]
    bases = sorted({int(b) for b in scale.groupby(group, sort=False, dropna=False)["processes"].min()})
    top = int(scale["processes"].max())
    return [(np.arange(b, top + 1), np.arange(b, top + 1) / b) for b in bases]


def scaling_plot(scale: pd.DataFrame, svg: bool, png: bool) -> Plot | None:
    """Speedup against the number of processes (GPUs × nodes), with the ideal line."""
    if scale.empty:
        return None
    groups = list(scale.groupby(["environment", "model", "precision", "batch_size", "dataset", "options"],
                                sort=False, dropna=False))[:MAX_SCALING_LINES]
    # Across nodes, one line per processes-per-node (the write-ups' one table per layout): two layouts
    # with the same process count (1 node x 2, 2 nodes x 1) are different points, not one line's zig-zag.
    lines = [(key, f" · {per} per node" if g["nodes"].nunique() > 1 and g["gpus"].nunique() > 1 else "", sub)
             for key, g in groups
             for per, sub in (g.groupby("gpus", sort=True) if g["nodes"].nunique() > 1 else [(None, g)])]
    envs = list(dict.fromkeys(scale["environment"]))
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots()
        _layout(fig, 1, 1, legend_rows=0, axes_size=(4.6, 3.0))
        bars = _ErrorBars()
        for i, ((env, model, precision, batch, _ds, _opt), per_node, g) in enumerate(lines):
            g = g.sort_values("processes")
            x = g["processes"].to_numpy()
            ei = envs.index(env)
            # std in speed-up units: each point's std over the same base as its speed-up.
            err = (g["throughput_std"].fillna(0) * g["speedup"] / g["throughput_mean"]).to_numpy()
            (line,) = ax.plot(x, g["speedup"], marker=MARKERS[(ei + i) % len(MARKERS)],
                              color=_colour(str(precision)) if len(groups) <= 6 and len(lines) == len(groups)
                              else None,
                              linestyle=LINESTYLES[ei % len(LINESTYLES)], markersize=5,
                              label=_plain(f"{env} · {model} · {precision} · batch {batch}{per_node}"))
            bars.add(x, g["speedup"], err, to_hex(line.get_color()), cap=0.04 * max(1, int(x.max())))
        bars.draw(ax)
        for j, (xs, ys) in enumerate(ideal_lines(pd.concat([g for _, g in groups]))):
            ax.plot(xs, ys, color="#999999", linestyle="--", linewidth=1, label="ideal" if j == 0 else None)
        ax.set_xlabel("processes (per node × nodes)")
        ax.set_ylabel("speedup")
        ax.set_xticks(sorted(set(scale["processes"])))
        ax.set_title("Speedup against processes (mean, std error bars)")
        ax.legend(frameon=False, fontsize=8, loc="upper left")
        svg_text, png_bytes = _render(fig, "scaling", svg, png)
    return Plot("scaling", "Speedup against processes", svg_text, png_bytes)


def _mark_unmeasured(ax: Any, groups: list[tuple[Any, pd.DataFrame]]) -> None:
    """A point without an ok repeat (every repeat ran out of memory, failed, timed out) has no mean: an x on the
    axis' floor at its date, never a silent gap in the line."""
    bottom = ax.get_ylim()[0]
    labelled = False
    for _, g in groups:
        none = g["mean"].isna().to_numpy(dtype=bool)
        if none.any():
            dates = pd.to_datetime(g["date"], unit="s")[none]
            ax.scatter(dates, [bottom] * int(none.sum()), marker="x", s=60, color="#d62728", zorder=3, clip_on=False,
                       label=None if labelled else "no ok repeat (see the table)")
            labelled = True


def history_plot(hist: pd.DataFrame | None, svg: bool, png: bool) -> Plot | None:
    """Each cell's mean throughput per run over time (95% CI bars), a ring around each significant step."""
    if hist is not None and not hist.empty:  # a point stored without a start (or past a date) is in the table only
        hist = hist[pd.to_datetime(hist["date"], unit="s", errors="coerce").notna()]
    if hist is None or hist.empty:
        return None
    groups = list(hist.groupby("series" if "series" in hist else "cell_key", sort=False))[:MAX_SCALING_LINES]
    names = [f"{g.iloc[0]['environment']} · {g.iloc[0]['model']} · {g.iloc[0]['precision']} · "
             f"batch {g.iloc[0]['batch_size']}" for _, g in groups]
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots()
        _layout(fig, 1, 1, legend_rows=0, axes_size=(4.6, 3.0))
        ringed = False
        for i, (key, g) in enumerate(groups):
            dates = pd.to_datetime(g["date"], unit="s")
            half = (g["ci_high"] - g["mean"]).fillna(0).to_numpy()
            # Two definitions of one name are two lines: the key tells them apart.
            name = names[i] + (f" · {key}" if names.count(names[i]) > 1 else "")
            (line,) = ax.plot(dates, g["mean"], marker=MARKERS[i % len(MARKERS)], markersize=5,
                              label=_plain(name))
            ax.errorbar(dates, g["mean"], yerr=half, fmt="none", ecolor=line.get_color(), capsize=3,
                        linewidth=1)
            step = g["step"].to_numpy(dtype=bool)
            if step.any():
                ax.scatter(dates[step], g["mean"][step], s=140, facecolors="none", edgecolors="#d62728",
                           linewidths=1.5, label=None if ringed else "significant step", zorder=3)
                ringed = True  # the legend names the rings once, whichever line has the first
        _mark_unmeasured(ax, groups)
        ax.set_xlabel("run started (UTC)")
        ax.set_ylabel(an.metric_heading("throughput", hist.get("unit", ())))
        ax.set_title("History: throughput per run (mean, 95% CI)")
        fig.autofmt_xdate()
        ax.legend(frameon=False, fontsize=8, loc="best")
        svg_text, png_bytes = _render(fig, "history", svg, png)
    return Plot("history", "History: throughput per run", svg_text, png_bytes)


def make_plots(summary: pd.DataFrame, scale: pd.DataFrame, svg: bool, png: bool,
               history: pd.DataFrame | None = None) -> list[Plot]:
    """Every plot the data supports, each rendered once per requested format."""
    if not (svg or png) or summary.empty:
        return []
    plots = [batch_plot(summary, m.name, svg, png) for m in an.METRICS.shown("plot")]
    plots.append(scaling_plot(scale, svg, png))
    plots.append(history_plot(history, svg, png))
    return [p for p in plots if p is not None]
