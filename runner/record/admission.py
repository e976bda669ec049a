"""Admission: what makes a stored repeat count. One step between a repeat's raw result and everything that ranks or
decides (compare, the gate, check, bisect, history, the report, publish, the GPU kit's headline), applied to every
repeat however it arrived (run, collect, import, an older store read today): the long frame (runner/analysis/frame.py)
calls `admit` on each row, so the decision core sees a repeat as `ok` only when it was admitted.

A stored `ok` repeat is admitted when the training stayed finite (every loss kept, warm-up and window, whichever parser
read it), its loss did not grow by orders of magnitude, it holds a figure (bench's throughput, items and window; a
program's parsed figure) that counts at least one item in its window, its measured window is what the run settings
promised, its loss scaler did not skip most of its window's steps, and each of its figures is finite and inside what a
machine can reach (each Metric's `reach`, runner/record/metrics.py). Otherwise it is `diverged` (a loss was NaN or
infinite, or exploded: an outcome, like oom, that comparisons count as a failure) or `refused` (no figure to rank, and
no outcome either: the repeat is set aside as a cancelled one is). docs/admission.md says what each check means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.bench.readings import ordinal
from runner.domain.bench_contract import WINDOW_REDO_BELOW
from runner.domain.outcomes import Status
from runner.record.metrics import HEADLINE, METRICS

OK, DIVERGED, REFUSED = Status.OK.value, Status.DIVERGED.value, Status.REFUSED.value

# A window skipping more than this share of its optimizer steps (a dynamic loss scaler that overflows at every
# step) did not train: its speed is not the speed of training.
MOST_SKIPPED = 0.5
# How closely a result's throughput must equal its own images over its window (bench computes it so; a
# figure edited in a file, or imported from one, does not): relative.
CONSISTENT = 1e-6
# An exploding loss: one whose magnitude grew to more than this many times its first kept loss's (a finite loss from 2.3
# to 2.3e30 trains nothing, and its steps are not the steps of training). Magnitudes, so a negative objective that runs
# away to -1e30 is caught too; a first loss nearer zero than LOSS_FLOOR counts as LOSS_FLOOR, so a fine-tuned model's
# 0.001 that rises to 5 is not called exploding (docs/admission.md).
EXPLODED = 1000.0
LOSS_FLOOR = 1.0
# A figure must count at least this many items (images, tokens, samples) over its window: a throughput of 1e-300 img/s
# over a 2 s window measured nothing, and a ratio built on it is none.
LEAST_ITEMS = 1.0


def bound_rows() -> tuple[tuple[str, float, float, bool, bool, str], ...]:
    """Each bounded metric of the table (runner/record/metrics.py `Metric.reach`, decided there once and documented
    in docs/admission.md): (name, low, high, low_open, refuses, why), made again when the table changes."""
    if _ROWS[0] != METRICS.version:
        _ROWS[:] = [METRICS.version, tuple((m.name, m.reach.low, m.reach.high, m.reach.low_open, m.reach.refuses,
                                            m.reach.why) for m in METRICS.values() if m.reach is not None)]
    rows: tuple[tuple[str, float, float, bool, bool, str], ...] = _ROWS[1]
    return rows


_ROWS: list[Any] = [-1, ()]


def _plain_refusing() -> tuple[str, ...]:
    """The metrics a result stores as they are (no reader) whose reach refuses the repeat (throughput, window_s): a
    value there that is not a finite number refuses it, although the frame reads it as not measured."""
    if _PLAIN_REFUSING[0] != METRICS.version:
        _PLAIN_REFUSING[:] = [METRICS.version, tuple(m.name for m in METRICS.values()
                                                     if m.reach is not None and m.reach.refuses and m.reader is None)]
    names: tuple[str, ...] = _PLAIN_REFUSING[1]
    return names


_PLAIN_REFUSING: list[Any] = [-1, ()]


@dataclass(frozen=True)
class AdmissionCheck:
    """One admission check of one repeat: its name, whether it passed (None: it does not apply to this repeat),
    and what it found, in words a table can print."""

    name: str
    passed: bool | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "passed": self.passed, "detail": self.detail}


# The checks' common results, made once: admission reads every repeat a site plots (100,000 of them).
_PLAIN = {(name, passed): AdmissionCheck(name, passed)
          for name in ("finite", "growth", "figure", "window", "scaler", "bounds") for passed in (True, None)}


@dataclass(frozen=True)
class Admission:
    """What admission decided for one repeat: the status the decision core sees (the stored one, or diverged /
    refused for a stored ok that is not admitted), every check, and the figures left out on their own."""

    status: str
    stored: str
    checks: tuple[AdmissionCheck, ...] = ()
    dropped: tuple[str, ...] = ()   # metrics left out of this repeat (out of bounds, the repeat still admitted)

    @property
    def admitted(self) -> bool:
        return self.status == OK

    @property
    def changed(self) -> bool:
        return self.status != self.stored

    @property
    def reasons(self) -> str:
        """The failed checks in words ('' when none failed)."""
        return "; ".join(c.detail for c in self.checks if c.passed is False)

    @property
    def notes(self) -> str:
        """What passed but deserves a word (a few skipped steps, a capped window, a figure left out)."""
        return "; ".join(c.detail for c in self.checks if c.passed is not False and c.detail)


def _num(value: Any) -> float | None:
    kind = type(value)  # the common cases first: admission reads every repeat a site plots (100,000 of them)
    if kind is float or kind is int:
        return float(value)
    if value is None or kind is bool or not isinstance(value, int | float):
        return None
    return float(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    return value if isinstance(value, dict | Mapping) else {}


def _program(raw: Mapping[str, Any]) -> bool:
    record = raw.get("workload")
    return record is not None and isinstance(record, dict | Mapping) and "parser" in record


def finite_check(metrics: Mapping[str, Any], stored: str) -> AdmissionCheck:
    """Every loss the repeat kept is finite. bench's own record (`metrics.finite`, every step checked) names where a
    loss first was not; a program's parser records every loss it read (`metrics.loss_seen`: how many were not finite,
    and where the first was); the losses bench kept (a NaN or an infinity is written as null in bench's result line,
    so a null among the window's losses or the loss ladder is one) are read as well, so that a record saying `all:
    true` (or anything but a plain false) beside a kept NaN is not believed."""
    record = _mapping(metrics.get("finite"))
    if record.get("all") is False:
        step, phase = record.get("first_nonfinite_step"), record.get("phase")
        where = f" at training step {step}" if isinstance(step, int) else ""
        return AdmissionCheck("finite", False, f"diverged: a loss became NaN or infinite{where}"
                     f"{f' ({phase})' if isinstance(phase, str) and phase else ''}")
    seen = _mapping(metrics.get("loss_seen"))
    bad = _num(seen.get("nonfinite")) if seen else None
    if bad is not None and bad > 0:
        what = seen.get("first_nonfinite")
        what = what[:20] if isinstance(what, str) and what else "NaN or infinite"
        return AdmissionCheck("finite", False, f"diverged: the loss became {what} at {_read_at(seen, seen.get('first_nonfinite_at'))}")
    if stored == DIVERGED:
        return AdmissionCheck("finite", False, "diverged: a loss became NaN or infinite")
    if any(type(metrics.get(k)) is float and not math.isfinite(metrics[k]) for k in ("loss_start", "loss_end")):
        return AdmissionCheck("finite", False, "diverged: the loss became NaN or infinite (the first or the final loss)")
    losses = metrics.get("losses")
    window = losses if isinstance(losses, list) else []
    ladder = _mapping(metrics.get("loss_at"))
    if not window and not ladder:
        return _PLAIN["finite", True if record.get("all") is True or seen else None]
    bad_window = sum(1 for v in window if not _finite(v))
    bad_ladder = sorted(_step(k) for k, v in ladder.items() if not _finite(v))
    if not (bad_window or bad_ladder):
        return _PLAIN["finite", True]
    where = f" by training step {bad_ladder[0]}" if bad_ladder else ""
    count = f" ({bad_window} of the window's {len(window)} losses)" if window else ""
    return AdmissionCheck("finite", False, f"diverged: the loss became NaN or infinite{where}{count}")


def _finite(value: Any) -> bool:
    """A kept loss: a finite number (a NaN or an infinity is written as null in bench's strict JSON line)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _step(key: Any) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        return 1 << 62


def _place(value: Any) -> int | None:
    """A count or a place in a record (a whole number from 0 up), else None: a record read from a file may hold
    anything."""
    n = _num(value)
    return int(n) if n is not None and math.isfinite(n) and 0 <= n < 1 << 62 else None


def _read_at(seen: Mapping[str, Any], at: Any) -> str:
    """Where a loss of a parser's record was: "the 2nd of the 4 losses read (mllog: tracked_stats loss)"."""
    count, source = _place(seen.get("count")), seen.get("from")
    of = f" of the {count} loss{'' if count == 1 else 'es'} read" if count is not None else " loss read"
    return f"{_nth(at, 'a')}{of}{f' ({source})' if isinstance(source, str) and source else ''}"


def _nth(at: Any, unknown: str) -> str:
    place = _place(at)
    return f"the {ordinal(place)}" if place is not None else unknown


def _bench_losses(metrics: Mapping[str, Any]) -> tuple[str, float, str, float] | None:
    """bench's kept losses (the loss ladder from step 1, the first loss, every loss of the window): where and what the
    first one in training order was, and where and what the largest in magnitude was (None: no loss kept). Asked only
    once the finite check passed (every kept loss a finite number); the window is read in C (max, min): admission
    reads every repeat a site plots."""
    kept = sorted((_step(k), float(v)) for k, v in _mapping(metrics.get("loss_at")).items() if _finite(v))
    start = _num(metrics.get("loss_start"))
    if start is not None and math.isfinite(start) and not (kept and kept[0][0] == 1):
        kept.insert(0, (1, start))
    found = metrics.get("losses")
    window = every = found if isinstance(found, list) else []
    try:
        high, low = (max(window), min(window)) if window else (0.0, 0.0)
        clean = math.isfinite(high) and math.isfinite(low) and type(high) is not bool and type(low) is not bool
    except (TypeError, ValueError):
        clean = False
    if not clean:  # asked before the finite check, or of a hand-made record: the finite losses only
        window = [v for v in window if _finite(v)]
        high, low = (max(window), min(window)) if window else (0.0, 0.0)
    steps = _num(metrics.get("steps"))
    begin = int(steps) - len(every) if steps is not None and steps >= len(every) else None

    def at(i: int) -> str:  # the window's i-th loss (from 0)
        return f"training step {begin + i + 1}" if begin is not None else f"the window's loss {i + 1}"
    if kept:
        first = (f"training step {kept[0][0]}", kept[0][1])
    elif window:
        first = (at(every.index(window[0])), float(window[0]))
    else:
        return None
    top_at, top = max(((f"training step {step}", v) for step, v in kept), key=lambda p: abs(p[1]), default=first)
    if window:
        extreme = high if abs(high) >= abs(low) else low
        if abs(extreme) > abs(top):
            top_at, top = at(every.index(extreme)), float(extreme)
    return first[0], first[1], top_at, top


def growth_check(metrics: Mapping[str, Any]) -> AdmissionCheck:
    """The loss did not explode: its largest kept magnitude is at most EXPLODED times its first kept loss's (a first
    loss nearer zero than LOSS_FLOOR counts as LOSS_FLOOR). Read from a parser's record (`metrics.loss_seen`) or from
    bench's kept losses; a repeat without a finite loss kept has nothing to judge."""
    seen = _mapping(metrics.get("loss_seen"))
    if seen:
        first, top = _num(seen.get("first")), _num(seen.get("largest"))
        if first is None or top is None:
            return _PLAIN["growth", None]
        first_at, top_at = _read_at(seen, seen.get("first_at")), _nth(seen.get("largest_at"), "a later one")
    else:
        found = _bench_losses(metrics)
        if found is None:
            return _PLAIN["growth", None]
        first_at, first, top_at, top = found
    factor = abs(top) / max(abs(first), LOSS_FLOOR)
    if not factor > EXPLODED:
        return _PLAIN["growth", True]
    grew = "the loss grew" if top > 0 else "the loss's magnitude grew"
    counted = "" if abs(first) >= LOSS_FLOOR else f", counted as {LOSS_FLOOR:g}"
    return AdmissionCheck("growth", False, f"diverged: {grew} {factor:.3g}-fold, from {first:.4g}{counted} ({first_at}) to "
                 f"{top:.4g} ({top_at}); more than {EXPLODED:,.0f}-fold is an exploding training")


def window_check(metrics: Mapping[str, Any], raw: Mapping[str, Any]) -> AdmissionCheck:
    """The measured window is what was promised: at least `--window-time` seconds when the run asked for a time
    (unless its count reached the ceiling the run settings allow), exactly `--iterations` when it asked for a
    count. A user's program measures its own window: nothing promised, nothing checked."""
    if _program(raw):
        return _PLAIN["window", None]
    params = _mapping(raw.get("params"))
    window_s, iterations = _num(metrics.get("window_s")), _num(metrics.get("iterations"))
    promised = _num(metrics.get("window_asked_s"))  # the benchmark completes its windows to this since it says so
    asked = promised or _num(params.get("window_time"))
    if asked is not None and asked > 0:
        # A result from before windows were completed ran later repeats at the first one's count: held to the share
        # of its promise below which a window was sized from a wrong estimate, not to the run's own noise (refusing
        # the windows that came out a little short, the fast ones, would keep the slow ones).
        floor = asked if promised else WINDOW_REDO_BELOW * asked
        if window_s is None:
            return _PLAIN["window", None]
        cal = _mapping(metrics.get("calibration"))
        most = _num(params.get("window_max")) or _num(cal.get("most"))
        capped = cal.get("capped") is True or (most is not None and iterations is not None and iterations >= most)
        if window_s >= floor:
            if window_s >= asked:
                return _PLAIN["window", True]
            return AdmissionCheck("window", True, f"window {window_s:.3g} s of {asked:g} s asked (a result from before windows "
                         "were completed: short by the run's own noise)")
        if capped:
            return AdmissionCheck("window", True, f"window {window_s:.3g} s of at least {asked:g} s asked: its count reached "
                         f"the ceiling of {int(most or iterations or 0)} iterations the run settings allow")
        return AdmissionCheck("window", False, f"window {window_s:.3g} s, at least {asked:g} s asked "
                     f"({int(iterations) if iterations is not None else '?'} iterations)")
    requested = _num(params.get("iterations"))
    if requested is not None and iterations is not None and iterations != requested:
        return AdmissionCheck("window", False, f"measured {int(iterations)} of the {int(requested)} iterations asked")
    return AdmissionCheck("window", True if iterations is not None else None)


def figure_check(metrics: Mapping[str, Any], raw: Mapping[str, Any], figures: Mapping[str, float] | None) -> AdmissionCheck:
    """A stored ok has something measured to rank: bench's result a throughput, a positive number, over a window
    that is not 0 s (bench has written both since its first version; the window check holds the window to what was
    promised, the bounds check the throughput to its items over its window); a user's program at least one figure
    its parser read. A check that cannot be made is no pass: an ok with no figure is refused, not counted as an ok
    beside figures it does not have."""
    if _program(raw):
        if figures is None:
            return _PLAIN["figure", None]
        if not any(v == v for v in figures.values()):
            return AdmissionCheck("figure", False, "no figure: the program's output held none its parser reads")
        return least_items(metrics, raw)
    throughput, window = _num(metrics.get(HEADLINE)), _num(metrics.get("window_s"))
    if throughput is None or not (math.isfinite(throughput) and throughput > 0):
        return AdmissionCheck("figure", False, "no figure: the result holds no throughput (nothing measured to rank)")
    if window is not None and not (math.isfinite(window) and window > 0):
        return AdmissionCheck("figure", False, f"no figure: a window of {window:g} s measured nothing")
    return least_items(metrics, raw)


def least_items(metrics: Mapping[str, Any], raw: Mapping[str, Any]) -> AdmissionCheck:
    """A throughput counts at least LEAST_ITEMS items over its window (a program that says no window of its own: over
    the program's whole run, the longest its window can have been). 1e-300 img/s over 2 s is no measurement: the rate
    of less than one image is an extrapolation, and a ratio built on it says nothing."""
    throughput = _num(metrics.get(HEADLINE))
    if throughput is None or not math.isfinite(throughput) or throughput <= 0:
        return _PLAIN["figure", True]  # a program's other figures; bench's throughput is checked above
    window, over = _num(metrics.get("window_s")), "its"
    if (window is None or not window > 0) and _program(raw):
        window, over = _num(_mapping(raw.get("workload")).get("program_s")), "the program's whole"
    if window is None or not (math.isfinite(window) and window > 0):
        return _PLAIN["figure", True]
    items = throughput * window
    if items >= LEAST_ITEMS:
        return _PLAIN["figure", True]
    unit = _mapping(_mapping(metrics.get("definitions")).get(HEADLINE)).get("unit")
    return AdmissionCheck("figure", False, f"less than one item measured: {throughput:.3g} "
                 f"{unit if isinstance(unit, str) and unit else 'items/s'} over {over} {window:.3g} s window is "
                 f"{items:.3g} items")


def scaler_check(metrics: Mapping[str, Any]) -> AdmissionCheck:
    """A dynamic loss scaler skips the optimizer step of an iteration whose gradients overflowed: a few early on
    are normal, a window that skipped most of its steps did not train."""
    found = metrics.get("scaler")
    if found is None:
        return _PLAIN["scaler", None]
    record = _mapping(found)
    skipped, steps = _num(record.get("skipped_window")), _num(record.get("window_steps"))
    end = _num(record.get("scale_end"))
    if end is not None and end <= 0:  # a scale that fell to 0 scales every gradient to 0 (or NaN): nothing trains
        return AdmissionCheck("scaler", False, f"the loss scale fell to {end:g}: every step overflowed, not training")
    if skipped is None or not steps:
        return _PLAIN["scaler", None]
    said = f"the loss scaler skipped {int(skipped)} of the window's {int(steps)} optimizer steps"
    if skipped > MOST_SKIPPED * steps:
        return AdmissionCheck("scaler", False, f"{said}: not training")
    return AdmissionCheck("scaler", True, said if skipped else "")


def bounds_check(figures: Mapping[str, float], metrics: Mapping[str, Any], raw: Mapping[str, Any]
                 ) -> tuple[AdmissionCheck, tuple[str, ...]]:
    """Each figure finite and inside its metric's reach (`bound_rows`), and a throughput equal to its own items over its window (for bench's
    results). Returns the check and the metrics left out on their own."""
    refused: list[str] = []
    dropped: list[str] = []
    for metric, low, high, low_open, refuses, why in bound_rows():
        v = figures.get(metric)
        if v is None or v != v:  # not measured (NaN)
            continue
        if (v > low if low_open else v >= low) and v <= high:  # inside: finite too (the bounds are)
            continue
        if refuses:
            refused.append(f"{metric} {v:.6g} outside what a machine can reach ({why})")
        else:
            dropped.append(f"{metric} {v:.6g} ({why})")
    for name in _plain_refusing():  # the frame reads these as NaN; here they refuse the repeat
        v = metrics.get(name)
        if v is not None and not (_num(v) is not None and math.isfinite(v)):
            refused.append(f"{name} {v!r} is not a finite number")
    throughput, images, window = _num(metrics.get(HEADLINE)), _num(metrics.get("images")), _num(
        metrics.get("window_s"))
    if (not _program(raw) and throughput is not None and images is not None and window is not None and window > 0
            and math.isfinite(throughput) and abs(throughput - images / window) > CONSISTENT * abs(throughput)):
        refused.append(f"throughput {throughput:.6g} is not the result's own items over its window "
                       f"({images:g} / {window:.6g} s = {images / window:.6g})")
    if refused:
        return AdmissionCheck("bounds", False, "; ".join(refused)), ()
    if dropped:
        return (AdmissionCheck("bounds", True, f"left out, outside what a machine can reach: {'; '.join(dropped)}"),
                tuple(d.split(" ", 1)[0] for d in dropped))
    return _PLAIN["bounds", True], ()


def admit(stored: str, metrics: Mapping[str, Any], raw: Mapping[str, Any] | None,
          figures: Mapping[str, float] | None = None) -> Admission:
    """Admission of one stored repeat from its stored status and its result's documents (runner/record/stored.py
    `StoredRepeat.admission` asks). `figures`: the repeat's figures (stored units), for the bounds. Only a stored
    `ok` (or a bench `diverged`) is judged; every other status is what it was."""
    if stored not in (OK, DIVERGED):
        return Admission(stored, stored)
    metrics = _mapping(metrics)
    raw = _mapping(raw)
    finite = finite_check(metrics, stored)
    growth = growth_check(metrics) if finite.passed is not False else _PLAIN["growth", None]
    bounds, dropped = bounds_check(figures or {}, metrics, raw)
    if stored == DIVERGED or finite.passed is False or growth.passed is False:
        # Diverged whatever else: its bounds are still judged (an import refuses a figure no machine produces,
        # whatever the loss did).
        return Admission(DIVERGED, stored, (finite, growth, bounds))
    figure = figure_check(metrics, raw, figures)
    window = window_check(metrics, raw)
    scaler = scaler_check(metrics)
    checks = (finite, growth, figure, window, scaler, bounds)
    status = REFUSED if any(c.passed is False for c in checks[2:]) else OK
    return Admission(status, stored, checks, dropped)


def refused_words(checks: Sequence[AdmissionCheck]) -> str:
    """The failed checks of a repeat, joined for a table."""
    return "; ".join(c.detail for c in checks if c.passed is False)
