"""One presentation of a verdict: every table, page, chart, CSV and JSON takes a comparison's colour, sign, interval
and sentence from here, and this takes them from the decision core's typed result (the decision, the ratio B/A and
its interval, the metric's direction, the history's step and direction), never from another module's words."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from runner import analysis as an
from runner.analysis.change import threshold_text
from runner.analysis.comparable import Outcomes, outcome_change
from runner.analysis.pairing import OUTCOMES
from runner.analysis.verdict import Verdict
from runner.report import fmt


class Tone(str, Enum):
    """How a comparison reads: better or worse (a change the core decided, by its direction), same (decided: no
    change), changed (decided, with no better or worse: one failure for another), undecided, or none (nothing was
    compared: a first run, a cell without a partner)."""

    BETTER = "better"
    WORSE = "worse"
    SAME = "same"
    CHANGED = "changed"
    UNDECIDED = "undecided"
    NONE = "none"


# One colour per tone, for CSS classes and charts alike (green, red, grey, purple, amber, light grey).
COLOURS = {Tone.BETTER: "#12805c", Tone.WORSE: "#c4320a", Tone.SAME: "#667085", Tone.CHANGED: "#7a5af8",
           Tone.UNDECIDED: "#b07d09", Tone.NONE: "#98a2b3"}
ORDER = (Tone.BETTER, Tone.WORSE, Tone.SAME, Tone.CHANGED, Tone.UNDECIDED, Tone.NONE)
SIGNS = {Tone.BETTER: "▲", Tone.WORSE: "▼", Tone.SAME: "=", Tone.CHANGED: "≠", Tone.UNDECIDED: "?", Tone.NONE: ""}


def legend(metric: an.Metric) -> dict[str, str]:
    """Each tone's word in a chart's legend, in the metric's own words ('faster', 'slower')."""
    return {Tone.BETTER.value: metric.better, Tone.WORSE.value: metric.worse, Tone.SAME.value: "no change",
            Tone.CHANGED.value: "outcome changed", Tone.UNDECIDED.value: "undecided", Tone.NONE.value: "not compared"}


def by_failures(row: Any) -> bool:
    """A history point whose step its outcomes decided (more or fewer failures: no ratio of the figure)."""
    return bool(row.get("step")) and not _finite(row.get("ratio"))


def word(tone: Tone | str, metric: an.Metric, failures: bool = False) -> str:
    """A tone's word in a legend or a count: a step its failures decided is 'more failures' or 'fewer failures',
    never the metric's 'slower' or 'faster'."""
    t = Tone(tone)
    if failures and t in (Tone.BETTER, Tone.WORSE):
        return "fewer failures" if t is Tone.BETTER else "more failures"
    return legend(metric)[t.value]


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def of_ratio(ratio: Any, metric: an.Metric) -> Tone:
    """A decided change's direction from its ratio B/A and whether the metric is better higher."""
    return Tone.BETTER if (float(ratio) > 1) == metric.higher_is_better else Tone.WORSE


def of_pair(row: Any, metric: an.Metric) -> Tone:
    """A compare pair's tone (a row of `Comparison.pairs`) from what decided it (`decided_by`): where its outcomes
    did (more failures on one side, one failure for another), the outcomes' direction, whatever the ratio of the
    repeats that did deliver; where the metric did, the ratio's direction. A pass with nothing measured on either
    side (unsupported on both) is no comparison at all: none, never 'the same'."""
    decision = str(row.get("decision", ""))
    if decision == Verdict.UNDECIDED.value:
        return Tone.UNDECIDED
    if decision == Verdict.PASS.value:
        return Tone.SAME if _finite(row.get("ratio")) and float(row["ratio"]) > 0 else Tone.NONE
    if decision != Verdict.FAIL.value:
        return Tone.NONE
    if not by_outcomes(row) and _finite(row.get("ratio")) and float(row["ratio"]) > 0:
        return of_ratio(row["ratio"], metric)
    oc = outcome_change(Outcomes.parse(str(row.get("a_statuses", ""))), Outcomes.parse(str(row.get("b_statuses", ""))))
    return Tone(oc.direction) if oc is not None and oc.direction else Tone.CHANGED


def by_outcomes(row: Any) -> bool:
    """Whether a pair was decided (or held undecided) by its outcomes, not by its metric: its ratio and p-value are
    then those of the repeats that delivered, not what decided."""
    return str(row.get("decided_by", "")) == OUTCOMES


def of_point(row: Any) -> Tone:
    """A history point's tone against the previous point of its series (runner/analysis/history.py): a step by its
    direction, undecided with its reason, the same where it was tested and no step was found, none for a first."""
    if bool(row.get("step")):
        return Tone(row["direction"]) if row.get("direction") in ("better", "worse") else Tone.CHANGED
    if row.get("undecided"):
        return Tone.UNDECIDED
    return Tone.SAME if _finite(row.get("ratio")) or _finite(row.get("p_value")) else Tone.NONE


def interval(ratio: Any, low: Any, high: Any, metric: an.Metric, as_ratio: bool = False) -> str:
    """The 95% interval of a change in the orientation its words take ('1.41x faster (1.32–1.50)': the interval of
    the gain; '1.20x slower': of its inverse), or of B/A itself (`as_ratio`); '' without one."""
    if not (_finite(ratio) and _finite(low) and _finite(high)) or float(low) <= 0 or float(ratio) <= 0:
        return ""
    r, lo, hi = float(ratio), float(low), float(high)
    if as_ratio:
        return f"{lo:.2f}–{hi:.2f}"
    if not metric.higher_is_better:
        r, lo, hi = 1 / r, 1 / hi, 1 / lo
    if r < 1 and f"{r:.2f}" != "1.00":
        lo, hi = 1 / hi, 1 / lo
    return f"{lo:.2f}–{hi:.2f}"


def p_text(p: Any) -> str:
    """'p<0.001', 'p=0.004'; '' without a p-value."""
    if not _finite(p):
        return ""
    text = fmt.p_value(p)
    return f"p{text}" if text.startswith("<") else f"p={text}"


def brackets(*parts: str) -> str:
    said = [p for p in parts if p]
    return f" ({', '.join(said)})" if said else ""


@dataclass(frozen=True)
class Said:
    """A comparison as every view shows it: its tone, the change in the core's words, the interval, the p-value, and
    one sentence."""

    tone: Tone
    change: str
    interval: str
    p: str
    sentence: str

    @property
    def css(self) -> str:
        return self.tone.value

    @property
    def colour(self) -> str:
        return COLOURS[self.tone]


def say(tone: Tone, ratio: Any, low: Any, high: Any, p: Any, metric: an.Metric, b: str, a: str, where: str = "",
        why: str = "", needed: Any = None, within: float | None = None) -> Said:
    """The sentence of one comparison of B against A: 'bf16 is 1.41x faster than fp32 for wrn at batch 64
    (1.32–1.50, p<0.001)'; 'no change' or 'undecided' with the core's reason and, where the core says it, the repeats
    a side that would decide it."""
    words = an.change_words(float(ratio), metric) if _finite(ratio) else ""
    iv, pt = interval(ratio, low, high, metric, as_ratio=tone is not Tone.BETTER and tone is not Tone.WORSE), p_text(p)
    at = f" {where}" if where else ""
    if tone in (Tone.BETTER, Tone.WORSE) and words:
        text = f"{b} is {words.replace(' (same)', '')} than {a}{at}{brackets(iv, pt)}."
    elif tone in (Tone.BETTER, Tone.WORSE, Tone.CHANGED):
        text = f"{b} against {a}{at}: {sides(why, a, b) or 'the outcomes changed'}."
    elif tone is Tone.SAME:
        text = f"{b} against {a}{at}: {same_words(within)}{brackets(f'B/A {float(ratio):.2f}' if words else '', iv, pt)}."
    elif tone is Tone.UNDECIDED:
        more = (f"; about {int(needed)} repeats a side would decide it" if _finite(needed) and float(needed) > 0
                and "repeats a side would decide" not in why else "")  # said once, where the core said it already
        text = f"{b} against {a}{at} is undecided: {sides(why.removeprefix('undecided: '), a, b) or 'the data cannot tell'}{more}."
    else:
        text = f"{b} against {a}{at}: not compared{f' ({sides(why, a, b)})' if why else ''}."
    return Said(tone, words, iv, pt, text)


def same_words(within: float | None = None) -> str:
    """What a pass means, said once for every surface: the interval of B/A lies inside ±min_effect (compare's and the
    history's default unless given), not that nothing was found."""
    return f"the same within ±{threshold_text(an.MIN_EFFECT if within is None else within)}"


def sides(why: str, a: str, b: str) -> str:
    """The core's reason for a pair (A, B) said with the sides' names, as history.before_here says it of two points in
    time: 'regression: bf16 3 oom (fp32 3 ok)'."""
    import re

    return re.sub(r"\b([AB])\b", lambda m: a if m.group(1) == "A" else b, why)


def pair_said(row: Any, metric: an.Metric, b: str, a: str, where: str = "", within: float | None = None) -> Said:
    """`say` for a row of compare's pairs (the lead's interval and `needed` columns read where present). A pair its
    outcomes decided is said in the outcomes' words, without the ratio, interval or p-value of the repeats that
    delivered (they did not decide it)."""
    tone = of_pair(row, metric)
    if by_outcomes(row):
        return say(tone, None, None, None, None, metric, b, a, where, str(row.get("verdict", "")))
    said = say(tone, row.get("ratio"), row.get("ratio_low"), row.get("ratio_high"), row.get("p_adjusted"), metric, b, a,
               where, str(row.get("verdict", "")), row.get("needed"), within)
    if tone in (Tone.BETTER, Tone.WORSE):
        # A change the metric decided beside failures few repeats cannot tell from chance: said with it, as the gate
        # says it ("oom on B only ..., fisher p=1: more repeats needed").
        oc = outcome_change(Outcomes.parse(str(row.get("a_statuses", ""))),
                            Outcomes.parse(str(row.get("b_statuses", ""))))
        if oc is not None and oc.verdict is Verdict.UNDECIDED:
            said = replace(said, sentence=f"{said.sentence[:-1]}; {sides(oc.why, a, b)}.")
    return said


def css() -> str:
    """The tones' colours as CSS for table cells and sentences, from COLOURS: the pages and the charts share them."""
    return "\n".join(f"td.{t.value}, li.{t.value}, span.{t.value} {{ color: {COLOURS[t]};"
                     f"{' font-weight: 600;' if t in (Tone.BETTER, Tone.WORSE) else ''} }}" for t in ORDER) + "\n"
