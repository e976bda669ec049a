"""Which repeats may be compared, and what the outcomes of two sides' repeats say before any metric does.

Every decision asks this module first (compare, the gate, check, bisect, the report's comparison views): two
sides' repeats of a pair are comparable on a metric only when their run settings match, the metric was obtained
the same way in the same unit (its definition: the result's metrics.definitions, runner/analysis/frame.py), and a
loss or accuracy comes after the same number of training steps (or is taken at a step every repeat recorded).
How the repeats ended is compared as rates (runner/analysis/significance.py): a new failure on one side is a
regression, a fix, or undecided when too few repeats cannot tell a flaky failure from chance; never silent.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from runner.analysis import significance
from runner.analysis.change import SIZEABLE, ratio_of
from runner.analysis.frame import PARAM_KEYS, present
from runner.analysis.stats import _join_unique
from runner.analysis.verdict import Verdict
from runner.domain.outcomes import Status
from runner.record.metrics import Metric, definition_text

OK = Status.OK.value
UNSUPPORTED = Status.UNSUPPORTED.value
REFUSED = Status.REFUSED.value
# Repeats that neither measured nor failed (a user's Ctrl-C, a cell skipped on purpose, a repeat admission
# refused: runner/record/admission.py): not outcomes. A diverged training is one, as oom is.
NOT_OUTCOMES = frozenset({Status.CANCELLED.value, Status.SKIPPED.value, Status.REFUSED.value})


def unit_in(definition: str) -> str:
    """The unit a `definition_text` names ('mllog: mean of tracked_stats [samples/s]' -> 'samples/s'); '' when none."""
    return definition[definition.rindex("[") + 1:-1] if definition.endswith("]") and "[" in definition else ""


def _several(text: str) -> bool:
    return ", " in text


def settings_differ(a: str, b: str) -> str:
    """Why two sides' cells measured different things although their params match ('' when they did not):
    other iterations, warmup or seed (as asv calls results of another benchmark version not comparable)."""
    a, b = str(a or ""), str(b or "")
    if not a or not b:
        return ""  # a side without a bench result: nothing measured, nothing to compare anyway
    if _several(a) or _several(b):
        return f"not comparable: run settings differ within a pooled side ({a} | {b})"
    return f"not comparable: run settings differ ({a} vs {b})" if a != b else ""


def definitions_differ(a: str, b: str, metric: Metric) -> str:
    """Why a metric's figures cannot be paired: the sides (or the repeats of one) obtained it differently or in
    another unit ('' when every repeat defines it the same way)."""
    a, b = str(a or ""), str(b or "")
    if not a or not b:
        return ""
    if _several(a) or _several(b):
        return f"not comparable: the {metric.label} is obtained in more than one way within a side ({a} | {b})"
    return f"not comparable: the {metric.label} is obtained differently ({a} vs {b})" if a != b else ""


def no_one_figure(ok: pd.DataFrame, metric: Metric) -> str:
    """Why one cell's ok repeats have no one figure of a metric to hold against a bound (`matrix check`): they
    obtained it in more than one way, or took a loss after different numbers of steps ('' when neither); never a
    mean of both."""
    how, unit = f"how_{metric.name}", f"unit_{metric.name}"
    seen = list(dict.fromkeys(definition_text(h, u) for h, u in zip(ok[how], ok[unit], strict=True))) \
        if how in ok and unit in ok else []
    if len(seen) > 1:
        return f"not comparable: the {metric.label} is obtained in more than one way within the cell ({' | '.join(seen)})"
    trained = _join_unique(str(int(s)) for s in ok.get(counted(metric) or "steps", ())
                           if isinstance(s, int | float) and s == s)
    return steps_differ(trained, trained, metric)


def counted(metric: Metric) -> str:
    """The frame's column of the count a metric is compared at (steps_differ): the training steps before a loss or
    an accuracy, the iterations of the window whose length is the time; '' for a metric that needs neither."""
    return "steps" if metric.per_step else "window_iters" if metric.per_window else ""


def steps_differ(a: str, b: str, metric: Metric) -> str:
    """Why a loss or an accuracy cannot be compared: the two sides (or the repeats of one) trained for different
    numbers of steps before it was taken; or a window's length: the windows held different numbers of iterations
    (a calibrated window is as long as its target, whatever the speed). '' when every repeat counted the same."""
    if not counted(metric):
        return ""
    a, b = str(a or ""), str(b or "")
    if not a or not b or (a == b and not _several(a)):
        return ""
    shown = a if a == b else f"{a} vs {b}"  # one side (or cell) whose repeats differ: its counts once
    if metric.per_window:
        return (f"not comparable: the {metric.label} is the length of windows of different numbers of iterations "
                f"({shown}; a calibrated window is as long as its target, whatever the speed)")
    return f"not comparable: the {metric.label} comes after different numbers of training steps ({shown})"


def unit_of(frame: pd.DataFrame, metric: Metric) -> str:
    """The unit a side's figures of a metric are in (its ok repeats' `unit_<m>`): the one they share, each of them
    when they say several ('tok/s | samples/s', never one they are not in), the Metric's own when they say none.
    Tables label a figure with it, never with a unit written in the code."""
    col = f"unit_{metric.name}"
    if col not in frame or frame.empty:
        return metric.unit
    units = dict.fromkeys(str(u) for u, s in zip(frame[col], frame["status"], strict=True) if s == OK and u)
    return " | ".join(units) if units else metric.unit


def why_not(metric: Metric, settings: tuple[str, str], definitions: tuple[str, str] = ("", ""),
            steps: tuple[str, str] = ("", "")) -> str:
    """The one answer to "may these two sides be compared on this metric?": '' when yes, else why not, in the
    words every command prints."""
    return (settings_differ(*settings) or definitions_differ(*definitions, metric)
            or steps_differ(*steps, metric))


def other_definition(keys_a: str, keys_b: str) -> str:
    """Two machines' cells of one name are compared only as the same definition: the same cell key, less the store an
    imported one names (`<key>@<store id>`). '' when they are; else why not, in the words every command prints."""
    def base(keys: str) -> list[str]:
        return sorted({k.partition("@")[0] for k in str(keys or "").split(", ") if k})
    a, b = base(keys_a), base(keys_b)
    if not a or not b or a == b:
        return ""
    return (f"not comparable: another definition of the cell on each machine (cell key {', '.join(a)} on A, "
            f"{', '.join(b)} on B; matrix diff says how the environments differ)")


def no_ratio(metric: Metric, mean_a: float, mean_b: float) -> str:
    """Why a pair measured on both sides has no change to size ('' when it has one): every change matrix judges is
    the ratio of the two means, which needs a positive, finite mean on each side (a throughput of 0, a negative
    or an infinite figure is never "within" a threshold). The same words in compare and the gate."""
    bad = [(side, m) for side, m in (("A", mean_a), ("B", mean_b)) if not math.isnan(m) and not 0 < m < math.inf]
    if not bad:
        if math.isnan(mean_a) or math.isnan(mean_b) or not math.isnan(ratio_of(mean_a, mean_b)):
            return ""
        return (f"not tested: the {metric.label} averages {mean_a:g} on A and {mean_b:g} on B, a ratio too extreme to "
                f"size (B/A beyond {SIZEABLE[0]:g}..{SIZEABLE[1]:g})")
    said = " and ".join(f"{m:g} on {side}" for side, m in bad)
    return f"not tested: the {metric.label} averages {said} (a change needs a positive, finite mean on each side)"


def common_step(ladders: Sequence[Mapping[int, float] | None]) -> int | None:
    """The last step at which every repeat recorded its loss (bench's loss_at: steps 1, 2, 5, 10, 20, 50, ...);
    None when a repeat recorded none or they share no step."""
    sets = [set(d) for d in ladders if isinstance(d, Mapping)]
    if not sets or len(sets) != len(ladders):
        return None
    common = set.intersection(*sets)
    return max(common) if common else None


Values = tuple[Sequence[float], Sequence[int | None], Sequence[Mapping[int, float] | None]]


def at_common_step(metric: Metric | None, a: Values, b: Values) -> tuple[np.ndarray, np.ndarray, int | None | str]:
    """Both sides' finite values (each side: its ok repeats' values, training steps and losses by step), a loss or
    accuracy taken at a step every repeat of both reached (as compare's `align_steps`: the last step every repeat
    recorded when their windows differ); the step used (None: as measured), or why they cannot be compared."""
    x, y = np.asarray(a[0], dtype=float), np.asarray(b[0], dtype=float)
    if metric is not None and metric.per_window and len(set((*a[1], *b[1])) - {None}) > 1:
        # A window's length against one of other iterations: no step to take it at (compare says the same).
        counts = [", ".join(str(s) for s in sorted({int(s) for s in side[1] if s is not None})) for side in (a, b)]
        return x[:0], y[:0], steps_differ(counts[0] or "unknown", counts[1] or "unknown", metric)
    if metric is not None and metric.per_step and len(set((*a[1], *b[1]))) > 1:
        ladders = [*a[2], *b[2]]
        step = common_step(ladders) if metric.ladder and len(ladders) == x.size + y.size else None
        if step is None:
            shown = ", ".join(str(s) for s in sorted(st for st in set((*a[1], *b[1])) if st is not None)) or "unknown"
            return x[:0], y[:0], (f"not comparable: the {metric.label} comes after different numbers of training "
                                  f"steps ({shown}) and no step was recorded by every repeat")
        x = np.asarray([d[step] for d in a[2] if d is not None], dtype=float)
        y = np.asarray([d[step] for d in b[2] if d is not None], dtype=float)
        return x[np.isfinite(x)], y[np.isfinite(y)], step
    return x[np.isfinite(x)], y[np.isfinite(y)], None


@dataclass(frozen=True)
class Outcomes:
    """How one side's repeats ended: a count per status."""

    counts: Mapping[str, int]
    refused: int = 0   # repeats admission set aside (runner/record/admission.py): neither a figure nor an outcome

    @classmethod
    def of(cls, statuses: Iterable[str]) -> Outcomes:
        seen = [str(s) for s in statuses]
        return cls(dict(Counter(s for s in seen if s not in NOT_OUTCOMES)), seen.count(REFUSED))

    @classmethod
    def parse(cls, summary: str) -> Outcomes:
        """From a status summary in words ('2 ok, 1 oom', runner/analysis/stats.py status_summary)."""
        counts: dict[str, int] = {}
        refused = 0
        for part in str(summary or "").split(", "):
            n, _, status = part.partition(" ")
            if n.isdigit() and status == REFUSED:
                refused += int(n)
            elif n.isdigit() and status and status not in NOT_OUTCOMES:
                counts[status] = counts.get(status, 0) + int(n)
        return cls(counts, refused)

    def missing(self, side: str) -> str:
        """Why a side has no outcome to compare: nothing stored, or only repeats admission refused."""
        if self.refused:
            return (f"no admitted repeat on {side} ({self.refused} refused by admission: the figures did not earn "
                    "a place; the report lists why)")
        return f"not measured on {side} (no repeat of this cell)"

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> int:
        return self.counts.get(OK, 0)

    @property
    def modes(self) -> set[str]:
        """The ways a repeat did not end ok."""
        return {s for s, k in self.counts.items() if k and s != OK}

    @property
    def words(self) -> str:
        order = [s.value for s in Status]
        parts = sorted(((k, v) for k, v in self.counts.items() if v),
                       key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
        return ", ".join(f"{v} {k}" for k, v in parts) or "nothing stored"


@dataclass(frozen=True)
class OutcomeChange:
    """What the outcomes say before the metric: `verdict` answers "did B end the way A did?" (FAIL: it did not,
    significantly or certainly; PASS: the same, and there is no metric to compare; UNDECIDED: cannot tell).
    `direction`: 'worse' (B fails more), 'better' (B fails less) or ''."""

    verdict: Verdict
    why: str
    direction: str = ""
    p_value: float | None = None
    rates_differ: bool = True  # False: the same rate of failing, in other ways (no number of repeats tells them apart)

    @property
    def newly_fails(self) -> bool:
        return self.direction == "worse" and self.verdict is not Verdict.PASS


def outcome_change(a: Outcomes, b: Outcomes, alpha: float = significance.ALPHA) -> OutcomeChange | None:
    """The outcomes of a pair compared as rates; None when both sides have ok repeats and neither fails in a way
    the other does not (the metric decides then). A side with nothing stored is undecided, never dropped."""
    for side, o in (("A", a), ("B", b)):
        if not o.n:
            return OutcomeChange(Verdict.UNDECIDED, o.missing(side))
    if not a.ok and not b.ok:
        if a.modes == b.modes == {UNSUPPORTED}:
            return OutcomeChange(Verdict.PASS, "unsupported on both sides")
        if len(a.modes) == len(b.modes) == 1 and a.modes != b.modes:
            return OutcomeChange(Verdict.FAIL, f"{next(iter(a.modes))} -> {next(iter(b.modes))}", "", 0.0)
        if len(a.modes) == len(b.modes) == 1:
            return OutcomeChange(Verdict.PASS, f"{next(iter(a.modes))} on both sides")
        return OutcomeChange(Verdict.UNDECIDED, f"no ok repeat on either side (A {a.words}; B {b.words})")
    new_b, new_a = b.modes - a.modes, a.modes - b.modes
    d = significance.rate_difference(a.n - a.ok, a.n, b.n - b.ok, b.n)
    if not new_a and not new_b and a.ok and b.ok and not (d.decided and d.p_value < alpha):
        return None  # the same ways of failing, at rates not told apart (or none): the metric decides
    rate_a, rate_b = (a.n - a.ok) / a.n, (b.n - b.ok) / b.n
    # A way of failing B has and A had not is feared (worse), even where A lost one of its own or failed more often,
    # unless B failed significantly less often in all: a gate that fears a slowdown fears a new failure too.
    fewer = rate_b < rate_a and d.decided and d.p_value < alpha
    worse = rate_b > rate_a or (bool(new_b) and not fewer)
    direction = "worse" if worse else "better"
    said = f"regression: B {b.words} (A {a.words})" if worse else f"fixed: A {a.words} (B {b.words})"
    if d.exact:
        return OutcomeChange(Verdict.FAIL, said, direction, d.p_value)
    p_text = f"{significance.RATE_TEST} p={d.p_value:.2g}"
    if d.p_value < alpha:
        return OutcomeChange(Verdict.FAIL, f"{said}, {p_text}", direction, d.p_value)
    new = sorted(new_b if worse else new_a)
    what = f"{', '.join(new)} on {'B' if worse else 'A'} only" if new else f"more failures on {'B' if worse else 'A'}"
    # Equal rates are what a rate test cannot tell apart however many repeats are added: said so, not "more repeats".
    tail = ("the same rate of failing on both sides, in other ways, which a rate test cannot tell apart (read the "
            "logs)" if rate_a == rate_b else "more repeats needed")
    return OutcomeChange(Verdict.UNDECIDED, f"{what} ({a.words} vs {b.words}), {p_text}: {tail}", direction,
                         d.p_value, rate_a != rate_b)


def for_the_metric(oc: OutcomeChange) -> OutcomeChange:
    """An outcome verdict as compare and the gate give it, deciding about the metric. With no ok repeat on either
    side (no direction), nothing was measured: the same failure on both sides (`oom on both sides`) is the same
    *outcome*, and one failure against another (`failed -> oom`) a different one (bisect and a history say so),
    but neither passes nor fails a comparison of the metric: undecided, in the gate's words. Unsupported on both
    passes (nothing to compare)."""
    if (oc.direction == "" and oc.verdict is not Verdict.UNDECIDED
            and not (oc.verdict is Verdict.PASS and "unsupported" in oc.why)):
        return OutcomeChange(Verdict.UNDECIDED, f"no ok repeat on either side ({oc.why})", oc.direction, oc.p_value)
    return oc


def with_outcomes(metric_verdict: Verdict, metric_why: str, outcomes: OutcomeChange | None) -> tuple[Verdict, str]:
    """The verdict of a pair whose outcomes could not be told apart (a failure on one side that few repeats cannot
    tell from chance) once its metric is judged: a significant change of the metric fails anyway, with the
    outcomes said; anything else stays undecided, in the outcomes' words."""
    if outcomes is None or outcomes.verdict is not Verdict.UNDECIDED:
        return metric_verdict, metric_why
    if metric_verdict is Verdict.FAIL:
        return Verdict.FAIL, f"{metric_why}; {outcomes.why}"
    return Verdict.UNDECIDED, outcomes.why


def align_steps(a: pd.DataFrame, b: pd.DataFrame, metric: str = "loss_end", keys: Sequence[str] = PARAM_KEYS
                ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[Any, ...], int]]:
    """Where a pair's repeats trained for different numbers of steps (calibrated windows, warm-ups until steady),
    its loss (`metric`: one whose ladder bench records, Metric.ladder) is taken at the last step every ok repeat of
    both sides recorded (bench's loss_at: steps 1, 2, 5, 10, 20, 50, ...): the metric and steps of those rows are
    replaced. `keys`: what pairs the two sides' cells (the params; the environment too where the sides pair on it).
    Returns both frames and {pair key: step}."""
    if "loss_at" not in a or "loss_at" not in b:
        return a, b, {}
    a, b = a.copy(), b.copy()
    at: dict[tuple[Any, ...], int] = {}
    ok_a = a[a["status"] == Status.OK.value]
    ok_b = b[b["status"] == Status.OK.value]
    groups_b = {k if isinstance(k, tuple) else (k,): g for k, g in ok_b.groupby(list(keys), sort=False)}
    for key, ga in ok_a.groupby(list(keys), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        gb = groups_b.get(key)
        if gb is None:
            continue
        rows = pd.concat([ga, gb])
        if rows["steps"].nunique(dropna=False) <= 1:
            continue
        step = common_step(list(rows["loss_at"]))
        if step is None:
            continue
        at[key] = step
        for frame_, g in ((a, ga), (b, gb)):
            frame_.loc[g.index, metric] = [d[step] for d in g["loss_at"]]
            frame_.loc[g.index, "steps"] = step
    return a, b, at


def measure_notes(sides: Sequence[tuple[str, str, pd.DataFrame]]) -> list[str]:
    """What a reader of a comparison must know about how the sides were measured: a precision emulated on a side's
    CPU (expect it slower than fp32 there), and cells with a repeat whose warm-up never got steady."""
    notes = []
    for label, ref, df in sides:
        if "cpu_native" not in df:
            continue
        read = ["environment", "precision", "cpu_native", "cpu_why", "steady", "cell_key"]  # not the whole frame
        ok = df.loc[df["status"] == Status.OK.value, present(df, read)]
        emulated = ok[ok["cpu_native"].map(lambda v: v is False).astype(bool)]
        for (env, precision), g in emulated.groupby(["environment", "precision"], sort=False):
            why = _join_unique(g["cpu_why"])
            notes.append(f"{label} ({env}): {precision} emulated on this CPU{f' ({why})' if why else ''}: expect it "
                         "slower than fp32.")
        unsteady = ok[ok["steady"].map(lambda v: v is False).astype(bool)]
        if not unsteady.empty:
            n = unsteady["cell_key"].nunique()
            notes.append(f"{label} ({ref}): in {n} cell{'s' if n != 1 else ''} a repeat's warm-up reached its "
                         "ceiling before the iteration times were steady.")
    return notes


def throttling_note(significant: bool, throttled_a: Any, throttled_b: Any, n_a: int, n_b: int) -> str:
    """'' unless the pair's difference coincides with throttling on one side only: then which side, and how
    many of its ok repeats the GPU's telemetry marked throttled (both sides throttled is said too)."""
    ta = int(throttled_a) if throttled_a == throttled_a and throttled_a is not None else 0
    tb = int(throttled_b) if throttled_b == throttled_b and throttled_b is not None else 0
    if not (ta or tb):
        return ""
    parts = [f"{side} throttled in {t} of {n}" for side, t, n in (("A", ta, n_a), ("B", tb, n_b)) if t]
    if ta and tb:
        return "both throttled: " + ", ".join(parts)
    return ("coincides with throttling: " if significant else "") + parts[0]
