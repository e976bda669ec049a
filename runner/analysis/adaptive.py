"""The adaptive-repeat stopping rule: how many more repeats a cell needs for its confidence interval.

`run.repeats: {min: 3, max: 20, target_ci: 1%}` gives every cell `min` repeats; after that a cell gets
more while the 95% confidence interval of its mean throughput is wider than ±target_ci of the mean and
fewer than `max` repeats are stored. The rule reads only stored repeats, so an interrupted run resumes
where it stopped and repeats stored by an earlier run (or a fixed `repeats:`) count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from runner.analysis.significance import CONFIDENCE, t_quantile
from runner.domain.cells import AdaptiveRepeats, Cell


class Stop(str, Enum):
    """Where a cell stands under the rule."""

    MORE = "more"            # the interval is still too wide: run more repeats
    TARGET = "target"        # the interval is within the target
    MAX = "max"              # `max` repeats are stored and the interval is still too wide
    NOT_OK = "not ok"        # a repeat did not end ok (OOM, failure): more repeats would not help


@dataclass(frozen=True)
class Assessment:
    """One cell under the rule: repeats stored, its relative CI half-width, the decision, how many more."""

    n: int
    ci: float          # half-width of the 95% CI over the mean (0.01 = ±1%); NaN below two values
    stop: Stop
    more: int          # repeats to add now (0 unless stop is MORE)

    @property
    def words(self) -> str:
        ci = "n/a" if math.isnan(self.ci) else f"±{self.ci:.1%}"
        text = {Stop.MORE: f"{self.more} more", Stop.TARGET: "target reached",
                Stop.MAX: "max reached, CI still wide", Stop.NOT_OK: "not every repeat ok"}[self.stop]
        return f"{self.n} repeats, CI {ci}: {text}"


def relative_ci(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> float:
    """Half-width of the t confidence interval of the mean, over the mean; NaN below two values."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size < 2 or x.mean() == 0:
        return math.nan
    return float(t_quantile(x.size - 1, confidence)) * float(x.std(ddof=1)) / math.sqrt(x.size) / abs(float(x.mean()))


def assess(values: Sequence[float], rule: AdaptiveRepeats, stored: int | None = None, all_ok: bool = True
           ) -> Assessment:
    """Decide for one cell from the throughput of its ok repeats (`stored`: repeats stored, any status).

    More repeats are asked for in one batch sized from the current spread, n_needed = (t * cv / target)²,
    at most doubling the count per round (a spread estimated from three values is itself rough) and never
    past `max`.
    """
    n = len(values) if stored is None else stored
    ci = relative_ci(values)
    if not all_ok:
        return Assessment(n, ci, Stop.NOT_OK, 0)
    if n < rule.min:
        return Assessment(n, ci, Stop.MORE, rule.min - n)
    if not math.isnan(ci) and ci <= rule.target_ci:
        return Assessment(n, ci, Stop.TARGET, 0)
    if n >= rule.max:
        return Assessment(n, ci, Stop.MAX, 0)
    needed = n + 1 if math.isnan(ci) else math.ceil(n * (ci / rule.target_ci) ** 2)
    more = max(1, min(needed - n, n, rule.max - n))
    return Assessment(n, ci, Stop.MORE, more)


def replay(values: Sequence[float], rule: AdaptiveRepeats) -> Assessment:
    """Where the rule would have stopped on these repeats taken in order (benchmarks and docs use it to
    count the repeats adaptive runs save); the last assessment, with `n` the repeats it used."""
    n = min(rule.min, len(values))
    while True:
        a = assess(list(values[:n]), rule)
        if a.stop is not Stop.MORE or n >= len(values):
            return a
        n = min(len(values), n + a.more)


@dataclass(frozen=True)
class CellState:
    cell: Cell
    assessment: Assessment
    free: tuple[int, ...]     # the repeat numbers to use for the next repeats (not stored as final, not claimed)
    in_flight: int = 0        # repeats of this cell another live run is measuring now
