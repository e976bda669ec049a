"""Change points along a cell's history (docs/publish.md, "Changes along a history").

Binary segmentation over the runs' means: in a stretch of the history, every split into an earlier and a later
part is a candidate; the split whose two parts differ most (the smallest Welch p-value over the run means of
each part) is a change when the decision core calls that pair significant (`judge_pair`: significant and at
least the minimum effect) at a p-value multiplied by the number of splits tried (Bonferroni: one stretch asks
many questions). Each part is then searched again. The unit is the run, not the repeat: runs of one machine
differ by more than their repeats do (a reboot, another neighbour), and a detector fed repeats calls those
changes. Each part needs three runs (with two, heavy-tailed run means made more than 5% of A/A histories show a
change; with three, at most 3.6% of 100-run histories do), so a change is found at the earliest three runs
from an end.
The p-values and verdicts are the compare core's (runner/analysis/compare.py); only the search is here.
False alarms on A/A histories: benchmarks/changepoint_check.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import runner.analysis as an
from runner.analysis.verdict import Verdict

MIN_RUNS = 3          # runs each side of a split needs


@dataclass(frozen=True)
class Change:
    """A change at run `index` (the first run after it): the means before and after, B/A ratio, p-value (adjusted
    for the splits tried), and the compare core's words for it."""

    index: int
    before: float
    after: float
    ratio: float
    p: float
    words: str


def changes(means: Sequence[float], metric: an.Metric, alpha: float = an.ALPHA,
            min_effect: float = an.MIN_EFFECT) -> list[Change]:
    """The change points of a history of run means (NaN: a run without an ok repeat, skipped), in order."""
    values = np.asarray(means, dtype=float)
    keep = np.flatnonzero(~np.isnan(values))
    found: list[Change] = []
    _search(values[keep], 0, len(keep), metric, alpha, min_effect, found)
    return sorted((Change(int(keep[c.index]), c.before, c.after, c.ratio, c.p, c.words) for c in found),
                  key=lambda c: c.index)


def _search(x: np.ndarray, lo: int, hi: int, metric: an.Metric, alpha: float, min_effect: float,
            found: list[Change]) -> None:
    n = hi - lo
    if n < 2 * MIN_RUNS:
        return
    seg = x[lo:hi]
    splits = np.arange(MIN_RUNS, n - MIN_RUNS + 1)
    csum, csq = np.cumsum(seg), np.cumsum(seg * seg)
    na, nb = splits.astype(float), (n - splits).astype(float)
    sa, sb = csum[splits - 1], csum[-1] - csum[splits - 1]
    qa, qb = csq[splits - 1], csq[-1] - csq[splits - 1]
    ma, mb = sa / na, sb / nb
    with np.errstate(invalid="ignore", divide="ignore"):
        va = np.maximum(qa - na * ma * ma, 0) / (na - 1)
        vb = np.maximum(qb - nb * mb * mb, 0) / (nb - 1)
    p = an.welch_from_stats(ma, np.sqrt(va), na, mb, np.sqrt(vb), nb)
    if np.all(np.isnan(p)):
        return
    best = int(np.nanargmin(p))
    adjusted = min(1.0, float(p[best]) * len(splits))
    a_mean, b_mean = float(ma[best]), float(mb[best])
    ratio = b_mean / a_mean if a_mean else math.nan
    significant, words, decision = an.judge_pair(ratio, adjusted, int(na[best]), int(nb[best]), metric, alpha,
                                                 min_effect)
    if not significant or decision is not Verdict.FAIL:
        return
    at = lo + int(splits[best])
    found.append(Change(at, a_mean, b_mean, ratio, adjusted, words))
    _search(x, lo, at, metric, alpha, min_effect, found)
    _search(x, at, hi, metric, alpha, min_effect, found)
