"""The regression gate of `matrix compare A B --fail-on slower:3%`: every pair under every rule gets a
verdict (runner/analysis/verdict.py): fail (the change is beyond the threshold and significant), pass, or
undecided (the data cannot tell: fewer than two ok repeats on a side, a metric not measured, run settings
that differ). Exit 1 on a fail; undecided fails closed (exit 5) unless `--undecided` says otherwise.

Rules: `slower:X` (B's throughput below A's: A/B - 1 > X, the compare table's "1.03x slower" is 3%),
`faster:X` (B/A - 1 > X in throughput), `memory:X` (B's peak memory over A's by more than X), `energy:X`
(B's images per joule below A's: A/B - 1 > X, i.e. B spends more energy per image). A cell that has ok
repeats on A and none on B fails `slower`, `memory` and `energy` (it newly fails, as in asv). Sides that have
no spread at all (every repeat equal, as GPU peak memory usually is) are judged by the size of the change.
The p-values of one rule's pairs are adjusted together (Benjamini-Hochberg) before they are compared with
alpha, so that a gate over a hundred pairs does not trip on five by chance.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from runner.analysis import METRICS, PARAM_KEYS, change, choose, resolution, significance
from runner.analysis.change import Change
from runner.analysis.comparable import (
    OutcomeChange,
    Outcomes,
    definition_text,
    no_ratio,
    other_definition,
    outcome_change,
    throttling_note,
    why_not,
    with_outcomes,
)
from runner.analysis.verdict import Verdict, counts, counts_text, overall, policy_note
from runner.base.errors import ConfigError
from runner.domain.cells import percentage

GATE_SCHEMA = 3  # 3: pass only when the interval is inside the threshold; the interval, repeats needed


@dataclass(frozen=True)
class Rule:
    """One rule of the gate: a metric's rule word (runner/record/metrics.py `Metric.rule`, `rule_better`: slower,
    faster, memory, energy) and its threshold."""

    kind: str          # slower | faster | memory | energy | another metric's word
    threshold: float   # 0.03 = 3%

    @property
    def metric(self) -> str:
        return METRICS.rules()[self.kind][0].name

    @property
    def fears_worse(self) -> bool:
        """The rule fears a change for the worse (slower, memory, energy), not for the better (faster)."""
        return METRICS.rules()[self.kind][1]

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.threshold * 100:g}%"

    @property
    def sense(self) -> int:
        """The direction of B the rule fears: -1 a lower figure (slower, energy), +1 a higher one (memory, faster)."""
        return -1 if METRICS[self.metric].higher_is_better == self.fears_worse else 1

    def change(self, a_mean: float, b_mean: float) -> float:
        """The change in the rule's direction (positive = the way the rule fears), as a fraction, from the pair's one
        ratio B/A (runner/analysis/change.py): A/B - 1 for a rule that fears a lower figure, B/A - 1 otherwise; NaN
        where the means have no ratio that can be sized."""
        return change.Change(change.ratio_of(a_mean, b_mean), math.nan, math.nan).toward(self.sense)[0]


def parse_rules(specs: Iterable[str]) -> list[Rule]:
    """`slower:3%`, `faster:10%`, `memory:5%` (repeatable, or comma-separated) -> rules; a mistake is one line."""
    known = METRICS.rules()
    rules = []
    for spec in specs:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            kind, sep, value = item.partition(":")
            if kind not in known or not sep:
                raise ConfigError(f"--fail-on {item!r}: expected KIND:THRESHOLD with KIND one of "
                                  f"{', '.join(known)}, e.g. slower:3%")
            try:
                threshold = float(percentage(value.strip() if value.strip().endswith("%") else float(value)))
            except ValueError as e:
                raise ConfigError(f"--fail-on {item!r}: {e}") from None
            if not 0 <= threshold < 1:
                raise ConfigError(f"--fail-on {item!r}: the threshold must be between 0% and 100%")
            rules.append(Rule(kind, threshold))
    return rules


@dataclass(frozen=True)
class GateCheck:
    """One pair of cells under one rule."""

    rule: Rule
    params: Mapping[str, Any]
    a_n: int
    b_n: int
    a_mean: float
    b_mean: float
    change: float        # in the rule's direction, as a fraction
    p_value: float       # the test's (NaN: undecided; 0 or 1 when neither side has spread)
    verdict: Verdict
    reason: str          # why it failed, passed or is undecided
    p_adjusted: float = math.nan  # p_value adjusted over the rule's pairs: what is compared with alpha
    a_throttled: int = 0  # ok repeats the GPU's telemetry marked throttled, per side
    b_throttled: int = 0
    outcomes: OutcomeChange | None = None  # a new failure on B that too few repeats could not tell from chance
    settled: bool = False  # decided without the metric's test (its p, if any, still counts in the family)
    coarse: float = 0.0    # how far the printed resolution alone may move the change (runner/analysis/resolution.py)
    delta: Change | None = None  # the pair's ratio B/A and its interval, where both sides were measured
    needed: int | None = None  # repeats a side that would decide an undecided check, as far as its spread says
    a_keys: str = ""  # the cell keys each side compared (runner/execution/decided_rounds.py adds repeats to them)
    b_keys: str = ""
    by_failures: bool = False  # decided by how the repeats ended, not by the metric's test (whose p is not shown)

    @property
    def more_would_help(self) -> bool:
        """An undecided check that more repeats could decide: its spread says how many, a side has one ok repeat
        (a test needs two), or a new failure on B waits to be told from chance."""
        if self.verdict is not Verdict.UNDECIDED:
            return False
        return self.needed is not None or min(self.a_n, self.b_n) == 1 or (
            self.outcomes is not None and self.outcomes.verdict is Verdict.UNDECIDED and self.outcomes.rates_differ)

    @property
    def note(self) -> str:
        """Throttling on a side, in compare's words ('' when none)."""
        return throttling_note(self.tripped, self.a_throttled, self.b_throttled, self.a_n, self.b_n)

    @property
    def tripped(self) -> bool:
        return self.verdict is Verdict.FAIL

    def as_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if not math.isfinite(x) else float(f"{x:.6g}")
        d = self.delta or change.Change(math.nan, math.nan, math.nan)
        _, low, high = d.toward(self.rule.sense)
        return {"rule": self.rule.text, "metric": self.rule.metric, **dict(self.params),
                "a_n": self.a_n, "b_n": self.b_n, "a_mean": num(self.a_mean), "b_mean": num(self.b_mean),
                "ratio": num(d.ratio), "ratio_low": num(d.low), "ratio_high": num(d.high), "confidence": d.confidence,
                "change": num(self.change), "change_low": num(low), "change_high": num(high),
                "repeats_needed": self.needed, "p_value": num(self.p_value), "p_adjusted": num(self.p_adjusted),
                "verdict": self.verdict.value, "tripped": self.tripped, "reason": self.reason, "note": self.note,
                "decided_by": "outcomes" if self.by_failures else "metric"}


@dataclass(frozen=True)
class _Cell:
    """One side's cell for one metric: its measured values, how its repeats ended, its run settings, how the
    metric was obtained, and how many ok repeats the GPU's telemetry marked throttled."""

    values: np.ndarray
    outcomes: Outcomes
    settings: str
    definition: str = ""
    throttled: int = 0
    quanta: resolution.Quanta = resolution.Quanta()  # its values' printed resolution (runner/analysis/resolution.py)
    keys: str = ""  # its cell keys: two machines' cells are compared only as one definition

    @property
    def ok(self) -> int:
        return self.outcomes.ok


def _joined(values: Iterable[Any]) -> str:
    return ", ".join(dict.fromkeys(str(v) for v in values if v))


def _cells(frame: pd.DataFrame, metric: str, pool: bool, keys: Sequence[str] = PARAM_KEYS
           ) -> dict[tuple[Any, ...], _Cell]:
    """Each cell's ok values of `metric` (a metric a backend does not measure, e.g. peak memory on a CPU,
    has none), keyed on what pairs cells across sides (`keys`: the params; between two machines the environment
    too); one definition per cell unless pooled."""
    out: dict[tuple[Any, ...], _Cell] = {}
    if frame.empty:
        return out
    for key, g in choose(frame, keys, pool).frame.groupby(list(keys), sort=False, dropna=False):
        okr = g[g["status"] == "ok"]
        ok = okr[metric].to_numpy(dtype=float)
        settings = ", ".join(sorted({s for s in g["settings"] if s})) if "settings" in g else ""
        how, unit = f"how_{metric}", f"unit_{metric}"
        definition = _joined(definition_text(h, u) for h, u in zip(okr[how], okr[unit], strict=True)) \
            if how in okr and unit in okr else ""
        throttled = int(okr["throttled"].fillna(False).astype(bool).sum()) if "throttled" in okr else 0
        keep = ~np.isnan(ok)
        q = resolution.of_rows(ok[keep], list(okr["resolution"][keep]), list(okr["printed"][keep]), metric) \
            if "resolution" in okr and "printed" in okr else resolution.Quanta()
        out[tuple(key)] = _Cell(ok[keep], Outcomes.of(g["status"]), settings, definition, throttled, q,
                                ", ".join(dict.fromkeys(g["cell_key"])))
    return out


_MISSING = _Cell(np.array([]), Outcomes({}), "")


def evaluate(a: pd.DataFrame, b: pd.DataFrame, rules: Sequence[Rule], alpha: float = significance.ALPHA,
             test: significance.PValue = significance.TEST, pool: bool = False,
             keys: Sequence[str] = PARAM_KEYS, same_definition: bool | None = None) -> list[GateCheck]:
    """Every cell of A under every rule, in A's cell order, against B's cell of the same params (`keys`: and the same
    environment, between two machines or sides of several environments; runner/analysis/compare.py `pair_keys`;
    `same_definition`: only the same definition of a cell compared, between two whole machines, by default wherever
    the keys hold the environment). Each side contributes its newest definition of a cell (runner/analysis/identity.py),
    all of them with `pool`. A cell of A that B never measured is an undecided check (never dropped: `--undecided`
    says how it counts)."""
    checks = []
    for rule in rules:
        ca, cb = _cells(a, rule.metric, pool, keys), _cells(b, rule.metric, pool, keys)
        same = "environment" in keys if same_definition is None else same_definition
        raw = [replace(_check(rule, dict(zip(keys, key, strict=True)), cell, cb.get(key, _MISSING), test, alpha, same),
                       a_keys=cell.keys, b_keys=cb.get(key, _MISSING).keys)
               for key, cell in ca.items()]
        adjusted = significance.adjust([c.p_value for c in raw])
        family = sum(not math.isnan(c.p_value) for c in raw)
        checks += [_decide(c, q, alpha, family) for c, q in zip(raw, adjusted, strict=True)]
    return checks


def only_in_b(a: pd.DataFrame, b: pd.DataFrame, keys: Sequence[str] = PARAM_KEYS) -> list[dict[str, Any]]:
    """B's cells that A has no cell for: nothing to gate them against, said in the text and the JSON."""
    keys_a = set(_cells(a, "throughput", True, keys)) if not a.empty else set()
    return [dict(zip(keys, key, strict=True)) for key in _cells(b, "throughput", True, keys) if key not in keys_a]


def _by_failures(oc: OutcomeChange, fears_failure: bool, both_ok: bool) -> tuple[Verdict, str] | None:
    """A check decided by how its repeats ended, before the metric (None: the metric decides, the outcomes said
    beside it): a new failure the rule fears, nothing measured on a side, or failures against none."""
    if oc.direction == "worse" and fears_failure and (oc.verdict is not Verdict.UNDECIDED or not both_ok):
        return oc.verdict, oc.why
    if oc.direction == "" and oc.verdict is Verdict.PASS and "unsupported" in oc.why:
        return Verdict.PASS, f"{oc.why}: nothing to compare"
    if oc.direction == "":
        return Verdict.UNDECIDED, (oc.why if ("not measured" in oc.why or "either side" in oc.why
                                              or "no admitted" in oc.why) else f"no ok repeat on either side ({oc.why})")
    if not both_ok:
        if oc.verdict is Verdict.UNDECIDED:  # fewer failures on B, not yet told from chance: not yet a fix
            return Verdict.UNDECIDED, oc.why
        if oc.direction == "worse":
            return Verdict.PASS, f"{oc.why}: not faster"
        if fears_failure:
            return Verdict.PASS, f"{oc.why}: not a regression"
        return Verdict.UNDECIDED, f"{oc.why}: no ok repeat on A to compare B with"
    return None


def _check(rule: Rule, params: dict[str, Any], a: _Cell, b: _Cell, test: significance.PValue,
           alpha: float = significance.ALPHA, same_definition: bool = False) -> GateCheck:
    """The check before the false-discovery adjustment: decided here when the data says so without a test
    (the sides not comparable, a change of outcome, a metric not measured), else its p-value. What may be
    compared and what a change of outcome means come from runner/analysis/comparable.py, as for compare."""
    xa, xb = a.values, b.values
    ma = float(xa.mean()) if xa.size else math.nan
    mb = float(xb.mean()) if xb.size else math.nan
    metric = METRICS[rule.metric]
    note: dict[str, Any] = {"a_throttled": a.throttled, "b_throttled": b.throttled}

    apart = why_not(metric, (a.settings, b.settings), (a.definition, b.definition)) or (
        other_definition(a.keys, b.keys) if same_definition else "")
    # Every comparable pair with two values a side is one test of the rule's family, however it is decided, as in
    # compare: the two adjust the same p-values together.
    q = resolution.pair(a.quanta, b.quanta)
    quanta = (q, q)
    tested = significance.difference(xa, xb, test, quanta).p_value if not apart else math.nan

    def done(verdict: Verdict, why: str, change: float = math.nan) -> GateCheck:
        return GateCheck(rule, params, xa.size, xb.size, ma, mb, change, tested, verdict, why, **note, settled=True)

    if apart:
        return done(Verdict.UNDECIDED, apart)
    oc = outcome_change(a.outcomes, b.outcomes, alpha)
    fears_failure = rule.fears_worse
    both_ok = bool(a.ok and b.ok)
    if oc is not None:
        decided = _by_failures(oc, fears_failure, both_ok)
        if decided is not None:
            return replace(done(*decided), by_failures=True)
    if not (xa.size and xb.size):
        where = "either side" if not (xa.size or xb.size) else ("A" if not xa.size else "B")
        return done(Verdict.UNDECIDED, f"{rule.metric} not measured on {where}")
    unsized = no_ratio(metric, ma, mb)
    if unsized:
        return done(*with_outcomes(Verdict.UNDECIDED, unsized, oc))
    delta = change.of_samples(xa, xb, quanta, 1 - alpha)  # the interval at the level the check decides at
    point = delta.toward(rule.sense)[0]
    diff = significance.difference(xa, xb, test, quanta)
    if not diff.decided:
        return replace(done(*with_outcomes(Verdict.UNDECIDED, f"not tested: {diff.why}", oc), point), delta=delta)
    # The outcomes go with the check: undecided, they may hold it; decided and not feared by the rule (a fix, or any
    # change for `faster`), they are said beside a tripped check, never left out of it.
    pending = oc
    return GateCheck(rule, params, xa.size, xb.size, ma, mb, point, diff.p_value, Verdict.PASS,
                 "", **note, outcomes=pending, coarse=diff.rounding / abs(ma), delta=delta)


def _decide(c: GateCheck, p_adj: float, alpha: float, family: int = 1) -> GateCheck:
    """The verdict of a tested check from its adjusted p-value and its interval (runner/analysis/change.py `judge`:
    fail beyond the threshold and significant, pass only when the interval lies inside it, else undecided with what
    would decide); a check decided without a test is kept."""
    if c.settled or math.isnan(c.p_value) or c.delta is None:
        return replace(c, p_adjusted=p_adj) if c.settled else c
    d = change.judge(c.delta, c.rule.threshold, c.rule.sense, p_adj, alpha, METRICS[c.rule.metric], c.coarse,
                     c.p_value, family)
    verdict, reason = d.verdict, d.reason
    if verdict is Verdict.FAIL:
        p_text = "no spread on either side" if c.delta.exact else f"p={p_adj:.3g}"
        reason = f"{c.rule.kind} by {change.pct(c.change)} > {c.rule.threshold:.1%}, {p_text}"
    if c.outcomes is not None and (c.outcomes.direction != "worse" or not c.rule.fears_worse):
        # Failures the rule does not fear (fewer on B; or any, for `faster`): said beside a tripped check only.
        if verdict is Verdict.FAIL:
            reason = f"{reason}; {c.outcomes.why}"
    else:
        # Where the outcomes hold it undecided, the metric's repeats-needed would not decide it: none is said.
        held = c.outcomes is not None and c.outcomes.verdict is Verdict.UNDECIDED and verdict is not Verdict.FAIL
        verdict, reason = with_outcomes(verdict, reason, c.outcomes)
        if held:
            return replace(c, verdict=verdict, p_adjusted=p_adj, reason=reason, needed=None, by_failures=True)
    return replace(c, verdict=verdict, p_adjusted=p_adj, reason=reason, needed=d.needed)


def tripped(checks: Iterable[GateCheck]) -> list[GateCheck]:
    return [c for c in checks if c.tripped]


def undecided(checks: Iterable[GateCheck]) -> list[GateCheck]:
    return [c for c in checks if c.verdict is Verdict.UNDECIDED]


def verdict_of(checks: Sequence[GateCheck]) -> Verdict:
    """The gate's verdict before any `--undecided` policy: no pair to check is undecided, not a pass."""
    return overall([c.verdict for c in checks])


def to_json(a: str, b: str, rules: Sequence[Rule], checks: Sequence[GateCheck], alpha: float = significance.ALPHA,
            policy: str = "error", unchecked: Sequence[Mapping[str, Any]] = ()) -> str:
    """Stable JSON for CI: sorted keys per record, checks in rule then pair order, no NaN."""
    verdicts = [c.verdict for c in checks]
    doc = {"schema": GATE_SCHEMA, "a": a, "b": b, "test": significance.TEST_NAME, "alpha": alpha,
           "correction": significance.CORRECTION, "rules": [r.text for r in rules],
           "verdict": verdict_of(checks).value, "undecided_policy": policy, "counts": counts(verdicts),
           "tripped": bool(tripped(checks)), "n_tripped": len(tripped(checks)),
           "checks": [c.as_json() for c in checks],
           "only_in_b": [{k: u[k] for k in PARAM_KEYS} for u in unchecked]}
    return json.dumps(doc, indent=2, allow_nan=False)


def rows(checks: Sequence[GateCheck]) -> list[dict[str, str]]:
    """The checks that failed or could not be decided, and passed ones with a throttled side, as rows of text."""
    out = []
    for c in checks:
        if c.verdict is Verdict.PASS and not c.note:
            continue
        cell = " ".join(f"{k}={c.params[k]}" for k in ("environment", "model", "precision", "batch_size")
                        if str(c.params.get(k, "")) not in ("", "0", "None", "nan"))  # a workload's unset axes
        extra = [f"{k}={c.params[k]}" for k in ("dataset", "gpus", "nodes") if str(c.params.get(k, "")) not in
                 ("synthetic", "1", "", "0", "None", "nan")]
        opts = c.params.get("options") or ""
        p = c.p_value if math.isnan(c.p_adjusted) else c.p_adjusted
        out.append({"verdict": c.verdict.value, "rule": c.rule.text, "cell": " ".join([cell, *extra, opts]).strip(),
                    "A": _shown(c.a_mean, c.rule), "B": _shown(c.b_mean, c.rule),
                    "change": "—" if math.isnan(c.change) else f"{c.change:+.1%}",
                    "p": "—" if math.isnan(p) or c.by_failures else f"{p:.3g}",  # failures: their p is in the why
                    "why": "; ".join(x for x in (c.reason, c.note) if x)})
    return out


def unchecked_line(unchecked: Sequence[Mapping[str, Any]]) -> str:
    """'' or how many cells B measured that A has no cell for (nothing to gate them against)."""
    n = len(unchecked)
    if not n:
        return ""
    cells = "; ".join(" ".join(str(u[k]) for k in ("model", "precision", "batch_size")) for u in unchecked[:5])
    return (f"{n} cell{'s' if n != 1 else ''} of B {'have' if n != 1 else 'has'} no partner in A, not checked: "
            f"{cells}{' ...' if n > 5 else ''}.")


def summary_line(rules: Sequence[Rule], checks: Sequence[GateCheck], policy: str = "error") -> str:
    """One line that says the gate's verdict and how many checks passed, failed and were undecided; a gate
    with undecided checks never says "passed" unless `--undecided pass` asked for it, and then says so."""
    verdicts = [c.verdict for c in checks]
    cells = {tuple(c.params.values()) for c in checks}
    alone = {tuple(c.params.values()) for c in checks if c.b_n == 0 and c.reason.startswith("not measured on B")}
    # A cell whose repeats in A were all cancelled or skipped is no pair either, whatever B holds.
    bare = {tuple(c.params.values()) for c in checks if c.a_n == 0 and c.reason.startswith("not measured on A")}
    # Nor is one whose repeats on a side were all refused by admission (runner/record/admission.py).
    refused = {tuple(c.params.values()) for c in checks if c.reason.startswith("no admitted repeat on")}
    n_pairs = len(cells - alone - bare - refused)  # a cell a side never measured is a check (undecided), not a pair
    rule_text = ", ".join(r.text for r in rules)
    pairs = f"{n_pairs} pair{'s' if n_pairs != 1 else ''}"
    if alone:
        pairs += f" and {len(alone)} cell{'s' if len(alone) != 1 else ''} of A not measured on B"
    if bare:
        pairs += f" and {len(bare)} cell{'s' if len(bare) != 1 else ''} not measured on A"
    if refused:
        pairs += f" and {len(refused)} cell{'s' if len(refused) != 1 else ''} with no admitted repeat on a side"
    if not checks:
        return (f"Gate undecided ({rule_text}): A has no cell to check, nothing was checked"
                + ("" if policy == "error" else f"; counted as {'passed' if policy == 'pass' else 'failed'} "
                   f"(--undecided {policy})") + ".")
    tally = f"{counts_text(verdicts)} of {len(checks)} check{'s' if len(checks) != 1 else ''} over {pairs}"
    correction = f" (p adjusted over each rule's pairs: {significance.CORRECTION})" if n_pairs > 1 else ""
    word = {Verdict.PASS: "passed", Verdict.FAIL: "tripped", Verdict.UNDECIDED: "undecided"}[overall(verdicts)]
    note = policy_note(verdicts, policy)
    counted_as = ""
    if word == "undecided" and policy != "error":
        word, counted_as = ("passed" if policy == "pass" else "failed"), f", with {note}"
    elif note:
        tally += f"; {note}"
    return f"Gate {word} ({rule_text}){counted_as}: {tally}{correction}."


def _shown(x: float, rule: Rule) -> str:
    """A side's mean as compare shows it: in the metric's displayed unit (peak memory in MiB, never bytes), the unit
    said where it does not depend on the workload (a throughput's img/s or tok/s does)."""
    m = METRICS[rule.metric]
    text = _num(x * m.scale)
    return f"{text} {m.unit}" if text != "—" and m.unit and not m.token_unit else text


def _num(x: float) -> str:
    return "—" if math.isnan(x) else (f"{x:.1f}" if abs(x) >= 100 else f"{x:.3g}")
