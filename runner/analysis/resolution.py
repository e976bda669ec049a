"""A figure's printed resolution is part of its uncertainty. A program that prints its throughput rounded ("1.0e2",
"105") hides everything below the last digit: three repeats that all print 100 have no spread, and without this
module the decision core would call 100 against 110 a certain 10% change although the true figures may be 0.6%
apart. The rounding error is shared by every repeat printed the same way, so more repeats do not average it away:
it is a bound on each side's mean (half a quantum), not noise.

Where a quantum comes from: the result's own record (`metrics.resolution`, a workload parser's reading of the
printed text, carried through to derived figures), else the values themselves: the largest power of ten of which
every value of the sample is a whole multiple (100 and 110: 10). A figure computed by the benchmark has no such
quantum (its floats carry ~16 digits); one below a millionth of the mean is ignored (NEGLIGIBLE).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

NEGLIGIBLE = 1e-6     # a half-quantum below this share of the mean changes no decision: treated as none
_POWERS = 10.0 ** np.arange(-12, 19)
_INTEGRAL = 1e-12     # relative: how close to a whole multiple a float must be (0.1 * 3 = 0.30000000000000004)


def value_quanta(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Per value, the largest power of ten (at most a tenth of the value: two digits printed at least) of which it is a
    whole multiple, to a
    millionth of a millionth (so a float of many digits gets a quantum near 1e-12 of itself: negligible); 0 for 0 and for
    values that are not finite."""
    v = np.abs(np.asarray(values, dtype=float))
    out = np.zeros(v.shape)
    good = np.isfinite(v) & (v > 0)
    if not good.any():
        return out
    x = v[good][:, None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = x / _POWERS[None, :]
        # At most the place of the value's second significant digit: a printer shows two digits at least ("1.0e2"),
        # so 10 read alone is 10 to the unit, not to the ten.
        integral = (np.abs(r - np.round(r)) <= _INTEGRAL * np.maximum(r, 1.0)) & (_POWERS[None, :] <= x * (0.1 + 1e-12))
    # The largest power of ten that divides the value; none (a float of many digits): its own last digit, ~0.
    idx = np.where(integral.any(axis=1), integral.shape[1] - 1 - np.argmax(integral[:, ::-1], axis=1), -1)
    out[good] = np.where(idx >= 0, _POWERS[np.clip(idx, 0, None)], 0.0)
    return out


def quantum(values: Sequence[float] | np.ndarray, recorded: Iterable[float] = ()) -> float:
    """A sample's quantum: the coarsest one its results recorded, or the finest power of ten every one of its values
    is a multiple of (the printer's resolution), whichever is larger; 0 when none."""
    q = value_quanta(values)
    q = q[q > 0]  # zeros and non-finite values say nothing of the printer
    inferred = float(q.min()) if q.size else 0.0
    given = [float(r) for r in recorded if isinstance(r, int | float) and math.isfinite(r) and r > 0]
    return max([inferred, *given])


def half_width(q_a: float, q_b: float, mean: float) -> float:
    """Half the two sides' quanta together: how far rounding alone may move the difference of the means; 0 when
    that is below NEGLIGIBLE of the mean."""
    half = (max(q_a, 0.0) + max(q_b, 0.0)) / 2
    if not math.isfinite(half) or half <= 0 or not math.isfinite(mean) or half <= NEGLIGIBLE * abs(mean):
        return 0.0
    return half


def floor_std(std: float, q: float) -> float:
    """A side's spread with its rounding's own: values rounded to q differ from the truth by up to q/2, uniformly
    (standard deviation q/sqrt(12)); a side that shows less spread than that shows the rounding, not certainty."""
    if q <= 0 or not math.isfinite(q):
        return std
    floor = q / math.sqrt(12.0)
    return floor if not math.isfinite(std) or std < floor else std


def words(q: float, unit: str = "") -> str:
    """'printed to 10 img/s'."""
    return f"printed to {q:g}{f' {unit}' if unit else ''}"


@dataclass(frozen=True)
class Quanta:
    """One side's resolution of a metric: what its digits show (`inferred`, from printed figures only) and what its
    results recorded. Two sides of a comparable pair obtained the metric the same way (one definition), so their
    printer is one: the pair's quantum is the finer of what the digits show on either side (three repeats that all
    print 100 say little; 150 beside it says the printer has tens) and the coarser of what was recorded."""

    inferred: float = 0.0
    recorded: float = 0.0

    @property
    def alone(self) -> float:
        """This side's quantum by itself (a cell's own interval)."""
        return max(self.inferred, self.recorded)


def pair(a: Quanta, b: Quanta) -> float:
    """The quantum both sides of a pair are judged with."""
    shown = [q for q in (a.inferred, b.inferred) if q > 0]
    return max([min(shown) if shown else 0.0, a.recorded, b.recorded])


def of_rows(values: Sequence[float] | np.ndarray, recorded: Sequence[object], printed: Sequence[bool],
            metric: str) -> Quanta:
    """One side's Quanta of `metric` from its frame rows (aligned sequences): what the results recorded
    (`resolution` column), and, for figures read from a program's printed output (`printed`), what their digits
    show. A figure the benchmark computed has neither."""
    given = [float(d[metric]) for d in recorded if isinstance(d, dict) and d.get(metric)]
    # A figure whose parser recorded its resolution (it read the text) is not guessed at from its digits again: a
    # mean of rounded figures has many digits, and "100" may be exact.
    shown = [v for v, p, d in zip(values, printed, recorded, strict=True)
             if p and not (isinstance(d, dict) and d.get(metric))]
    return Quanta(quantum(shown), max(given, default=0.0))


def per_group(values: np.ndarray, recorded: Sequence[object], printed: np.ndarray, gid: np.ndarray, ngroups: int,
              metric: str) -> tuple[np.ndarray, np.ndarray]:
    """`of_rows` for every group at once (gid: each row's group; rows with a NaN value take no part): the inferred
    and the recorded quanta, each an array over the groups."""
    inferred = np.full(ngroups, np.inf)
    recorded_out = np.zeros(ngroups)
    if not ngroups:
        return np.zeros(0), recorded_out
    given = np.array([float(d.get(metric) or 0.0) if isinstance(d, dict) else 0.0 for d in recorded])
    guess = printed & np.isfinite(values) & ~(given > 0)  # a recorded resolution is not guessed at again
    vq = np.where(guess, value_quanta(np.where(np.isfinite(values), values, 0.0)), 0.0)
    use = vq > 0
    np.minimum.at(inferred, gid[use], vq[use])
    inferred[np.isinf(inferred)] = 0.0
    np.maximum.at(recorded_out, gid, np.where(np.isfinite(values), given, 0.0))
    return inferred, recorded_out
