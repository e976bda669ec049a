"""A name's measurements over time as arrays, not frames: what runner/analysis/history.py tests point by point.

A site of 100,000 repeats holds thousands of points; cutting a frame per point (a mask, a copy, a sort) cost seconds.
Here one name's rows are read into arrays once, each point is the positions of its rows (each repeat's newest), and
everything a point is judged on (its outcomes, its ok figures, how they were obtained, their steps and printed
resolution, its unit) is read from those arrays. A frame is cut only where a view needs one: at a boundary, to say
what changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from runner.analysis import resolution
from runner.analysis.comparable import OK, Outcomes, counted, definition_text
from runner.record.metrics import get_metric


@dataclass(frozen=True)
class Name:
    """One name's rows on one machine as arrays (in the frame's row order), read once."""

    frame: pd.DataFrame
    metric: str
    values: np.ndarray
    status: np.ndarray
    repeat: np.ndarray
    seq: np.ndarray
    ids: np.ndarray
    run: np.ndarray
    started: np.ndarray
    series: np.ndarray
    definition: list[str]
    steps: list[str]
    unit: list[str]
    recorded: list[object]
    printed: np.ndarray
    has_resolution: bool
    keys: np.ndarray        # each row's cell key
    head: dict[str, object]  # what every row of the name shares: its params and its machine (the first row's)

    @classmethod
    def of(cls, frame: pd.DataFrame, metric: str, series: pd.Series) -> Name:
        n = len(frame)
        how, unit = f"how_{metric}", f"unit_{metric}"
        definition = ([definition_text(h, u) for h, u in zip(frame[how], frame[unit], strict=True)]
                      if how in frame and unit in frame else [""] * n)
        count = counted(get_metric(metric)) or "steps"  # what the metric is compared at (steps, window iterations)
        steps = ([str(int(s)) if isinstance(s, int | float) and s == s else "" for s in frame[count]]
                 if count in frame else [""] * n)
        units = [str(u) if u else "" for u in frame[unit]] if unit in frame else [""] * n
        has_res = "resolution" in frame and "printed" in frame
        seq = frame["seq"].to_numpy() if "seq" in frame else frame["id"].to_numpy()
        return cls(frame, metric, frame[metric].to_numpy(dtype=float), frame["status"].to_numpy(dtype=str),
                   frame["repeat"].to_numpy(dtype=int), seq, frame["id"].to_numpy(), frame["run_id"].to_numpy(dtype=str),
                   frame["started_at"].to_numpy(dtype=float), series.to_numpy(dtype=str), definition, steps, units,
                   list(frame["resolution"]) if has_res else [None] * n,
                   frame["printed"].to_numpy(dtype=bool) if has_res else np.zeros(n, dtype=bool), has_res,
                   frame["cell_key"].to_numpy(dtype=str), frame.iloc[0].to_dict() if n else {})


@dataclass(frozen=True)
class Point:
    """One measurement: the runs in it and the positions (into its Name) of each repeat's newest row."""

    name: Name
    series: str
    runs: list[str]
    pos: np.ndarray
    ok: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = self.name
        object.__setattr__(self, "ok", self.pos[(n.status[self.pos] == OK) & ~np.isnan(n.values[self.pos])])

    @property
    def first(self) -> int:
        return int(self.name.ids[self.pos].min())

    @property
    def statuses(self) -> list[str]:
        return list(self.name.status[self.pos])

    @property
    def outcomes(self) -> Outcomes:
        return Outcomes.of(self.statuses)

    @property
    def values(self) -> np.ndarray:
        """The metric of its ok repeats that have one."""
        return self.name.values[self.ok]

    @property
    def date(self) -> float:
        return float(self.name.started[self.pos].min())

    def joined(self, column: list[str]) -> str:
        """A per-row text of its ok repeats, joined where they differ ('' where none says)."""
        return ", ".join(dict.fromkeys(column[i] for i in self.ok if column[i]))

    @property
    def definition(self) -> str:
        return ", ".join(dict.fromkeys(self.name.definition[i] for i in self.ok))

    @property
    def steps(self) -> str:
        return self.joined(self.name.steps)

    def unit(self, default: str) -> str:
        """The unit its ok repeats measured the metric in (comparable.unit_of's rule), else `default`."""
        units = dict.fromkeys(self.name.unit[i] for i in self.pos if self.name.status[i] == OK and self.name.unit[i])
        return " | ".join(units) if units else default

    @property
    def quanta(self) -> resolution.Quanta:
        n = self.name
        if not n.has_resolution:
            return resolution.Quanta()
        return resolution.of_rows(n.values[self.ok], [n.recorded[i] for i in self.ok], n.printed[self.ok], n.metric)

    def frame(self) -> pd.DataFrame:
        """Its rows as a frame (where a view needs one: what changed at a boundary)."""
        return self.name.frame.iloc[self.pos]

    @property
    def cell_key(self) -> str:
        return str(self.name.keys[self.pos[0]])


def points(name: Name, series: str) -> Iterator[Point]:
    """One series' measurements, oldest first (history.py `points` says the rule: a run continues the current point
    unless it stores a repeat whose number the point already has ok, or the point has no ok repeat and the run
    stores one of its numbers again), each repeat's newest row standing for it."""
    mine = np.flatnonzero(name.series == series)
    order: dict[str, list[int]] = {}
    for p in mine[np.argsort(name.seq[mine], kind="stable")]:
        order.setdefault(str(name.run[p]), []).append(int(p))
    ranked = list(order)  # in the order of each run's first row: its rows came sorted
    runs: list[str] = []
    have_ok: set[int] = set()
    have: set[int] = set()
    parts: list[int] = []
    for run in ranked:
        rows = order[run]
        repeats = {int(name.repeat[p]) for p in rows}
        if parts and (repeats & have_ok or (not have_ok and repeats & have)):
            yield Point(name, series, runs, _newest(name, parts))
            runs, have_ok, have, parts = [], set(), set(), []
        runs.append(str(run))
        have |= repeats
        have_ok |= {int(name.repeat[p]) for p in rows if name.status[p] == OK}
        parts += rows
    if parts:
        yield Point(name, series, runs, _newest(name, parts))


def _newest(name: Name, parts: list[int]) -> np.ndarray:
    """Each repeat's newest row among these (by the measuring store's order, then id), in that order."""
    pos = np.asarray(parts)
    order = pos[np.lexsort((name.ids[pos], name.seq[pos]))]
    newest: dict[int, int] = {}
    for p in order:
        newest[int(name.repeat[p])] = int(p)
    kept = set(newest.values())
    return np.array([p for p in order if p in kept], dtype=int)
