"""A history as inline SVG: each run's mean with a bar of ± one standard deviation, one colour per machine, and
a dashed line where a change was found. Numbers in, geometry out: the template writes it (autoescaped)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 44, 14, 30
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    low: float
    high: float
    title: str
    href: str


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    points: tuple[Point, ...]
    path: str
    changes: tuple[tuple[float, str], ...]   # x of each change, its label


@dataclass(frozen=True)
class Plot:
    width: int
    height: int
    series: tuple[Series, ...]
    yticks: tuple[tuple[float, str], ...]
    xticks: tuple[tuple[float, str], ...]
    unit: str
    bounds: tuple[tuple[float, str], ...] = ()   # x of each boundary (a definition changed), what changed
    left: int = LEFT
    right: int = RIGHT
    bottom: int = HEIGHT - BOTTOM


@dataclass(frozen=True)
class RunPoint:
    """One run of a series: when, its mean and standard deviation, a tooltip and a link."""

    when: float
    mean: float
    std: float
    title: str
    href: str


def plot(series: Sequence[tuple[str, Sequence[RunPoint], Sequence[tuple[int, str]]]], unit: str,
         boundaries: Sequence[tuple[float, str]] = ()) -> Plot:
    """series: (label, its runs in order, its changes as (index of the first run after, label)). The x axis
    is the runs of every series in time order (labelled with their UTC dates), so that runs align in time.
    `boundaries`: (when the first run of a new definition started, what changed), drawn just before that run."""
    times = sorted({p.when for _, pts, _ in series for p in pts})
    dates = [time.strftime("%Y-%m-%d", time.gmtime(t)) for t in times]
    if len(set(dates)) < len(dates):     # several runs a day: the time tells them apart
        dates = [time.strftime("%m-%d %H:%M", time.gmtime(t)) for t in times]
    slot = {t: i for i, t in enumerate(times)}
    lows = [p.mean - (p.std if math.isfinite(p.std) else 0) for _, pts, _ in series for p in pts]
    highs = [p.mean + (p.std if math.isfinite(p.std) else 0) for _, pts, _ in series for p in pts]
    lo, hi = (min(lows), max(highs)) if lows else (0.0, 1.0)
    lo, hi = _nice_range(lo, hi)
    span_x = max(len(times) - 1, 1)

    def xs(i: int) -> float:
        return round(LEFT + (WIDTH - LEFT - RIGHT) * (i / span_x if len(times) > 1 else 0.5), 1)

    def ys(v: float) -> float:
        return round(TOP + (HEIGHT - TOP - BOTTOM) * (1 - (v - lo) / (hi - lo)), 1)

    out = []
    for n, (label, pts, found) in enumerate(series):
        points = tuple(Point(xs(slot[p.when]), ys(p.mean), ys(p.mean - _s(p.std)), ys(p.mean + _s(p.std)),
                             p.title, p.href) for p in pts)
        path = " ".join(f"{'M' if i == 0 else 'L'}{q.x},{q.y}" for i, q in enumerate(points))
        marks = tuple((round((points[i - 1].x + points[i].x) / 2, 1), text) for i, text in found
                      if 0 < i < len(points))
        out.append(Series(label, COLOURS[n % len(COLOURS)], points, path, marks))
    yticks = tuple((ys(v), _fmt(v)) for v in _ticks(lo, hi))
    step = max(1, math.ceil(len(times) / 8))
    xticks = tuple((xs(i), dates[i] if i < len(dates) else "") for i in range(0, len(times), step))
    bounds = []
    for t, text in boundaries:
        i = int(np.searchsorted(np.asarray(times), t)) if times else 0
        bounds.append((round((xs(max(i - 1, 0)) + xs(i)) / 2, 1) if i > 0 else xs(0), text))
    return Plot(WIDTH, HEIGHT, tuple(out), yticks, xticks, unit, bounds=tuple(bounds))


@dataclass(frozen=True)
class Spark:
    """A history in a table cell: every run's mean as a line (broken where the definition changed, skipped where a
    run had no ok repeat), the last run as a dot."""

    width: int
    height: int
    path: str
    dot: tuple[float, float] | None


def spark(means: Sequence[float], breaks: Sequence[int] = (), width: int = 120, height: int = 22) -> Spark:
    """The sparkline of run means in order; `breaks`: indexes where a new definition starts (the line is broken)."""
    vals = [v for v in means if math.isfinite(v)]
    if not vals:
        return Spark(width, height, "", None)
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or abs(hi) * 0.1 or 1.0
    n = max(len(means) - 1, 1)
    parts, pen, dot = [], False, None
    for i, v in enumerate(means):
        if not math.isfinite(v):
            pen = False
            continue
        x = round(2 + (width - 4) * (i / n if len(means) > 1 else 0.5), 1)
        y = round(2 + (height - 4) * (1 - (v - lo) / span) if hi > lo else height / 2, 1)
        parts.append(f"{'L' if pen and i not in breaks else 'M'}{x},{y}")
        pen, dot = True, (x, y)
    return Spark(width, height, " ".join(parts), dot)


def _s(std: float) -> float:
    return std if math.isfinite(std) else 0.0


def _nice_range(lo: float, hi: float) -> tuple[float, float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float) -> list[float]:
    raw = (hi - lo) / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
