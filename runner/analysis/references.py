"""References: expected values per cell or group of cells in matrix.yaml, and the verdict on each cell.

```yaml
references:
  - match: {model: resnet50, precision: amp}     # environment and any axis; a list is any of its values
    throughput: ">= 3000"                        # or {min: 3000}; "2790 ± 5%" or {value: 2790, tolerance: 5%}
    memory: "<= 40960"                           # in the metric's display unit: img/s, ms, s, MiB, %
```

A cell's value is the mean of its ok repeats in the metric's display unit; the verdict
(runner/analysis/verdict.py) is pass or fail by that mean, with the margin: how far inside (+) or outside (-)
the bound it is, relative to the reference. A cell without an ok repeat fails when its repeats ended
failed, oom, diverged, timeout or unsupported (it does not deliver), and is undecided when nothing was measured
(nothing stored, cancelled, not started) or the metric is not measured there (peak memory on a CPU). A cell with ok
repeats beside ones that ended failed, oom, diverged or timeout is never shown to pass, however well its ok repeats
do: with its mean inside the bound it is undecided ("not every repeat ended ok (3 ok, 3 oom)"), and no number of
repeats is said to decide it; with its mean outside it fails as any cell does.
An entry's `undecided: error | fail | pass` says how its undecided verdicts count (default error: exit 5).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from runner.analysis import (
    METRIC_ALIASES,
    METRICS,
    Metric,
    change,
    definition,
    describe,
    get_metric,
    positive,
    resolution,
    shown_unit,
    significance,
)
from runner.analysis import verdict as verdicts_
from runner.analysis.bounds import Bound, parse_bound
from runner.analysis.comparable import no_one_figure
from runner.analysis.sides import select
from runner.analysis.stats import widened
from runner.analysis.verdict import UNDECIDED_POLICIES, Verdict
from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit
from runner.domain.cellmatch import MATCH_KEYS
from runner.domain.cellmatch import coerce as _coerce
from runner.domain.cellmatch import same as _same
from runner.domain.cellmatch import show as _show
from runner.domain.cellmatch import value as _value
from runner.domain.cells import AXIS_NAMES, Cell, Scalar

VERDICT_SCHEMA = 3  # 3: pass only when the interval of the mean is inside the bound
ENTRY_KEYS = ("match", "undecided")  # the keys of an entry that are not metrics
Locate = Callable[[Sequence[Any]], str]  # a field path -> "file: references[0].throughput (line N)"


@dataclass(frozen=True)
class Reference:
    """One entry of `references:`: which cells, and per metric the bound they must meet."""

    index: int
    match: Mapping[str, tuple[Scalar, ...]]  # values in the axis's type, alternatives per key
    bounds: Mapping[str, Bound]       # metric name (canonical) -> bound
    undecided: str = "error"          # how its undecided verdicts count: error (exit 5), fail or pass

    def matches(self, cell: Cell) -> bool:
        return all(any(_same(_value(cell, k), v) for v in values) for k, values in self.match.items())

    def match_text(self) -> str:
        return " ".join(f"{k}={'|'.join(map(_show, v))}" for k, v in self.match.items()) or "every cell"


def _problem_text(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"unknown key {err['loc'][-1]!r}; allowed: {', '.join(Bound.model_fields)}"
    return msg


def parse(raw: Any, locate: Locate, own: Sequence[str] = ()) -> tuple[Reference, ...]:
    """Validate `references:`; every mistake is one line naming the field, all mistakes together."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{locate(('references',))}: expected a list of {{match: {{...}}, METRIC: BOUND}}")
    problems: list[str] = []
    refs = []
    known = ", ".join([*METRICS, *METRIC_ALIASES])
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            problems.append(f"{locate(('references', i))}: expected a mapping such as "
                            "{match: {model: wrn}, throughput: '>= 100'}")
            continue
        match: dict[str, tuple[Scalar, ...]] = {}
        rule = entry.get("match") or {}
        if not isinstance(rule, Mapping):
            problems.append(f"{locate(('references', i, 'match'))}: expected a mapping of KEY: VALUE "
                            f"with KEY one of {', '.join(MATCH_KEYS)}")
            rule = {}
        for key, value in rule.items():
            if key not in MATCH_KEYS and key not in own:  # own: a workload's own axes
                problems.append(f"{locate(('references', i, 'match', key))}: unknown key {key!r}; "
                                f"allowed: {', '.join([*MATCH_KEYS, *own])}")
                continue
            values = value if isinstance(value, list) else [value]
            try:
                match[str(key)] = tuple(_coerce(key, v) if key in AXIS_NAMES or key in own else str(v)
                                        for v in values)
            except ValidationError as e:
                why = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
                problems.append(f"{locate(('references', i, 'match', key))}: {why}")
        bounds: dict[str, Bound] = {}
        policy = entry.get("undecided", "error")
        if policy not in UNDECIDED_POLICIES:
            problems.append(f"{locate(('references', i, 'undecided'))}: {policy!r} is not allowed; allowed: "
                            f"{', '.join(UNDECIDED_POLICIES)} (how this entry's undecided verdicts count; "
                            "default error: exit status 5)")
            policy = "error"
        for key, value in entry.items():
            if key in ENTRY_KEYS:
                continue
            try:
                metric = get_metric(str(key))
            except ConfigError:
                problems.append(f"{locate(('references', i, key))}: unknown metric {key!r}; known metrics: {known}")
                continue
            if metric.name in bounds:
                problems.append(f"{locate(('references', i, key))}: {metric.name} is given twice")
                continue
            try:
                bounds[metric.name] = parse_bound(value)
            except ValidationError as e:
                problems += [f"{locate(('references', i, key, *err['loc']))}: {_problem_text(err)}"
                             for err in e.errors()]
            except ValueError as e:
                problems.append(f"{locate(('references', i, key))}: {e}")
        if not any(key not in ENTRY_KEYS for key in entry):
            problems.append(f"{locate(('references', i))}: no metric to check; add e.g. throughput: '>= 100' "
                            f"(metrics: {known})")
        refs.append(Reference(i, match, bounds, str(policy)))
    if problems:
        raise ConfigError("\n".join(problems))
    return tuple(refs)


def check_matches(refs: Iterable[Reference], cells: Sequence[Cell], locate: Locate) -> None:
    """A reference that matches no cell of the matrix is a mistake (a typo in a value): say which values exist."""
    problems = []
    for ref in refs:
        if any(ref.matches(c) for c in cells):
            continue
        existing = "; ".join(
            f"{k}: {', '.join(dict.fromkeys(_show(_value(c, k)) for c in cells if _value(c, k) is not None))}"
            f"{'' if any(_value(c, k) is not None for c in cells) else '(the axis is not set)'}"
            for k in ref.match)
        problems.append(f"{locate(('references', ref.index, 'match'))}: {ref.match_text()} matches no cell "
                        f"of the matrix; values that exist: {existing}")
    if problems:
        raise ConfigError("\n".join(problems))


# Verdicts ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judgement:
    """One cell against one metric's reference; numbers in the metric's display unit."""

    reference: int
    cell_key: str
    cell: str                  # the cell in words (environment and its params)
    metric: str
    unit: str
    expected: str              # the reference, e.g. '>= 3000'
    verdict: Verdict
    measured: float            # mean of the ok repeats (NaN without one)
    n: int
    ci_low: float
    ci_high: float
    margin: float              # + inside the bound, - outside, relative to the reference (NaN: no value)
    statuses: str = ""         # the cell's stored repeats by status, e.g. '3 ok' or '2 oom'
    reason: str = ""           # why it failed or is undecided without a value ('' when judged on the mean)
    undecided_policy: str = "error"  # the entry's `undecided:` setting
    p_value: float = math.nan  # a mean outside the bound: its test against the bound (NaN: not tested)
    p_adjusted: float = math.nan  # ... adjusted over the references' family (Benjamini-Hochberg), what decides a fail
    needed: int | None = None  # an undecided one: the repeats that would decide it, as far as the spread seen says
    confidence: float = significance.CONFIDENCE  # the level of ci_low..ci_high
    final: bool = False        # undecided however many repeats are added (some did not deliver): none are asked for

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["final"]  # the JSON's schema as it was: `needed` null with an undecided verdict says it already
        d["verdict"] = self.verdict.value
        for k in ("measured", "ci_low", "ci_high", "margin", "p_value", "p_adjusted"):
            d[k] = None if not math.isfinite(d[k]) else round(float(d[k]), 6)
        return d


def judge(refs: Sequence[Reference], cells: Sequence[Cell], frame: pd.DataFrame, alpha: float = significance.ALPHA
          ) -> list[Judgement]:
    """Every (reference, matched cell, metric) in the order of the file and the cells, from the long frame
    (runner.analysis.frame of the store's rows; each repeat's newest row). A cell is its key: repeats
    stored under another definition of the same name (another `env`, image or iterations) are not its; and its
    machine: this store's repeats, or, where it has none, those of the one machine it imported them from
    (runner/analysis/sides.py). `alpha`: the level the verdicts decide at, their intervals at 1 - alpha (a run that
    looks again after adding repeats splits alpha over its looks: runner/execution/decided_rounds.py)."""
    varying = varying_keys([c for c in cells if any(r.matches(c) for r in refs)])
    sides_: dict[str, tuple[dict[str, pd.DataFrame], str]] = {}
    work = []
    for ref in refs:
        for cell in cells:
            if not ref.matches(cell):
                continue
            by_key, refused = _side(frame, cell.env_name, sides_)
            rows = by_key.get(cell.key, frame.iloc[0:0])
            work += [(ref, cell, rows, METRICS[name], bound, refused) for name, bound in ref.bounds.items()]
    out = [_judgement(r, c, rows, m, b, varying, refused, 1 - alpha) for r, c, rows, m, b, refused in work]
    family = sum(not math.isnan(j.p_value) for j in out)
    if family > 1:  # a fail is judged adjusted over the family: the repeats it would take are sized at that level
        out = [_judgement(r, c, rows, m, b, varying, refused, 1 - alpha, alpha / family)
               for r, c, rows, m, b, refused in work]
    return _adjusted(out, alpha)


def _adjusted(judgements: list[Judgement], alpha: float = significance.ALPHA) -> list[Judgement]:
    """A mean outside its bound fails only when its test against the bound stays significant once the p-values of
    every tested judgement are adjusted together (Benjamini-Hochberg, as the gate adjusts a rule's pairs); otherwise
    it is undecided, with what would decide it."""
    adjusted = significance.adjust([j.p_value for j in judgements])
    out = []
    for j, q in zip(judgements, adjusted, strict=True):
        if j.verdict is Verdict.FAIL and not math.isnan(j.p_value):
            j = replace(j, p_adjusted=float(q))
            if q >= alpha:
                j = replace(j, verdict=Verdict.UNDECIDED, reason=(
                    f"the mean is outside the bound but not significantly (p={q:.3g} adjusted over "
                    f"{sum(not math.isnan(x.p_value) for x in judgements)} tested); {_needed_words(j.needed)}"))
        out.append(j)
    return out


def _side(frame: pd.DataFrame, env: str, seen: dict[str, tuple[dict[str, pd.DataFrame], str]]
          ) -> tuple[dict[str, pd.DataFrame], str]:
    """An environment's repeats by cell key (an imported one without its `@<store id>`), as runner/analysis/sides.py
    selects them: one machine's (this store's own by default); several machines and none of them this store is
    why the cell is undecided."""
    if env not in seen:
        mine = frame[frame["environment"] == env] if len(frame) else frame
        try:
            rows, refused = (select(mine, f"env:{env}").frame if len(mine) else mine), ""
        except ConfigError as e:
            rows, refused = mine.iloc[0:0], str(e)
        keys = rows["cell_key"].map(lambda k: str(k).partition("@")[0]) if len(rows) else rows["cell_key"]
        seen[env] = (dict(iter(rows.groupby(keys, sort=False))) if len(rows) else {}, refused)
    return seen[env]


def varying_keys(cells: Sequence[Cell]) -> list[str]:
    """The params whose value differs between these cells (model, precision and batch size if none do)."""
    return [k for k in dict.fromkeys(k for c in cells for k in c.params)
            if len({_show(c.params.get(k)) for c in cells}) > 1] or ["model", "precision", "batch_size"]


def cell_words(cell: Cell, keys: Sequence[str]) -> str:
    """The cell by its environment and the params that tell it apart from the other cells checked."""
    return " ".join([cell.env_name, *(f"{k}={_show(cell.params[k])}" for k in keys if k in cell.params)])


# A cell whose repeats ended this way does not deliver what its reference asks for: a fail, not a shrug.
DID_NOT_DELIVER = frozenset({"failed", "oom", "diverged", "timeout", "unsupported"})


def _judgement(ref: Reference, cell: Cell, rows: pd.DataFrame, metric: Metric, bound: Bound,
               keys: Sequence[str], refused: str = "", confidence: float = significance.CONFIDENCE,
               fail_alpha: float | None = None) -> Judgement:
    ok = rows[rows["status"] == "ok"] if len(rows) else rows
    values = ok[metric.name].to_numpy(dtype=float) * metric.scale if len(ok) else np.array([])
    st = describe(values, positive(metric.name), confidence)
    if st.n:  # the interval the report shows for the cell: widened by rounding, inside what the metric can be
        low, high = widened(st.ci_low, st.ci_high, st.mean, _rounding(ok, metric, st.mean), metric.name, metric.scale)
        st = replace(st, ci_low=float(low), ci_high=float(high))
    tested = change.BoundTest(Verdict.UNDECIDED, math.nan, None)
    counts = rows["status"].value_counts() if len(rows) else pd.Series(dtype=int)
    statuses = ", ".join(f"{n} {s}" for s, n in counts.items()) or "nothing stored"
    margin, reason, final = math.nan, "", False
    units = sorted({str(u) for u in ok[f"unit_{metric.name}"]}) if f"unit_{metric.name}" in ok and len(ok) else []
    # The reference is in the unit the cell is defined to produce: a workload's own (one unit over its repeats),
    # else the built-in benchmark's for its model; a figure obtained another way is not comparable to it.
    own = cell.workload is not None and len(units) == 1
    expected = units[0] if own else definition({}, metric.name, cell.params.get("model"))[1]
    mixed = no_one_figure(ok, metric)
    if refused:  # measured only on machines this store imported, and on more than one: whose would it be?
        verdict, reason = Verdict.UNDECIDED, refused
    elif units and units != [expected]:
        hows = sorted({str(h) for h in ok[f"how_{metric.name}"]})
        verdict, reason = Verdict.UNDECIDED, (f"not comparable: the {metric.label} is obtained differently here "
                                              f"({'; '.join(hows)} [{', '.join(units)}]); the reference is in "
                                              f"{expected}")
    elif mixed:  # two definitions of the metric (or step counts of a loss) in one cell: never their mean
        verdict, reason = Verdict.UNDECIDED, mixed
    elif st.n:
        inside = bound.low <= st.mean <= bound.high
        margin = bound.margin(st.mean)
        # Pass only where the interval of the mean lies inside the bound; a mean outside fails once the test
        # against the bound is significant over the references' family (judge); else undecided.
        tested = change.bound_test(st.mean, st.std, st.n, bound.low, bound.high, (st.ci_low, st.ci_high),
                                   positive(metric.name), confidence, fail_alpha)
        verdict = tested.verdict
        failed = set(counts.index) & (DID_NOT_DELIVER - {"unsupported"})
        half = _rounding(ok, metric, st.mean)
        if failed and inside:
            # A figure from some repeats only: not every repeat delivered, so the cell is never shown to pass, however
            # well its ok repeats do; more repeats cannot undo the failed ones, so none would decide it. Checked first:
            # an interval that passes must not hide them. (A mean outside the bound can still fail on its ok ones.)
            verdict, reason = Verdict.UNDECIDED, (f"not every repeat ended ok ({statuses}): the value is of the ok "
                                                  "ones; more repeats cannot show the cell passes")
            tested, final = replace(tested, needed=None), True
        elif verdict is Verdict.PASS:
            pass  # the widened interval lies inside the bound: rounding cannot take the mean across it
        elif half and any(st.mean - half <= edge <= st.mean + half for edge in (bound.low, bound.high)):
            verdict, reason = Verdict.UNDECIDED, (f"the figures are printed too coarsely to tell: rounding alone may "
                                                  f"move the mean by {half:g}, across the bound")
        elif verdict is Verdict.UNDECIDED:
            reason = tested.why or (f"the interval {_num(st.ci_low)}-{_num(st.ci_high)} reaches across the bound; "
                                    f"{_needed_words(tested.needed)}")
    elif len(ok):
        verdict, reason = Verdict.UNDECIDED, f"{metric.name} not measured in its ok repeats"
    elif set(counts.index) & DID_NOT_DELIVER:
        verdict, reason = Verdict.FAIL, f"no ok repeat ({statuses})"
    else:
        verdict, reason = Verdict.UNDECIDED, f"nothing measured ({statuses})"
    unit = shown_unit(ok.get(f"unit_{metric.name}", ()), metric.name)  # the program's own (tok/s), else the metric's
    return Judgement(ref.index, cell.key, cell_words(cell, keys), metric.name, unit, bound.text(), verdict,
                     st.mean, st.n, st.ci_low, st.ci_high, margin, statuses, reason, ref.undecided,
                     tested.p_value if verdict is Verdict.FAIL else math.nan, needed=tested.needed,
                     confidence=confidence, final=final)


def _needed_words(n: int | None) -> str:
    return f"about {n} repeats would decide" if n else "no number of repeats would decide it (the mean sits at the bound)"


def _rounding(ok: pd.DataFrame, metric: Metric, mean: float) -> float:
    """Half the printed resolution of a cell's ok figures, in displayed units (0 when it does not matter)."""
    if "resolution" not in ok or "printed" not in ok:
        return 0.0
    q = resolution.of_rows(ok[metric.name].to_numpy(dtype=float), list(ok["resolution"]), list(ok["printed"]),
                           metric.name).alone * metric.scale
    return resolution.half_width(q, 0.0, mean) if q else 0.0


def counted(judgements: Iterable[Judgement], policy: str | None = None) -> list[Verdict]:
    """What each verdict counts as: an undecided one by `policy` when given (`--undecided`), else by its
    entry's `undecided:` setting."""
    return [verdicts_.counted(j.verdict, policy or j.undecided_policy) for j in judgements]


def exit_status(judgements: Sequence[Judgement], policy: str | None = None) -> Exit:
    """0 every verdict passes (or counts as passed), 1 one failed (or an undecided one counts as failed),
    5 one is undecided under the default policy; nothing to judge is undecided."""
    if not judgements:
        return Exit.UNDECIDED if (policy or "error") == "error" else verdicts_.exit_status(
            [Verdict.UNDECIDED], policy or "error")
    return verdicts_.exit_status(counted(judgements, policy))


def failed(judgements: Iterable[Judgement], policy: str | None = None) -> bool:
    """Whether a reference failed, counting undecided verdicts as their policy says."""
    return Verdict.FAIL in counted(judgements, policy)


def to_json(judgements: Sequence[Judgement], policy: str | None = None) -> str:
    """Stable JSON for pipelines: schema, the verdict over all, counts per verdict, the verdicts in file order."""
    verdicts = [j.verdict for j in judgements]
    status = exit_status(judgements, policy)
    doc = {"schema": VERDICT_SCHEMA, "verdict": verdicts_.overall(verdicts).value,
           "passed": status is Exit.OK, "exit_status": int(status), "undecided_policy": policy,
           "counts": verdicts_.counts(verdicts), "verdicts": [j.as_json() for j in judgements]}
    return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False)


def rows(judgements: Sequence[Judgement]) -> list[dict[str, str]]:
    """The verdicts as table rows of text (the CLI prints them as a table)."""
    out = []
    for v in judgements:
        measured = "—" if v.n == 0 else _num(v.measured)
        if v.n >= 2 and not math.isnan(v.ci_low):
            measured += f" ({v.confidence * 100:.4g}% CI {_num(v.ci_low)}–{_num(v.ci_high)}, n={v.n})"
        elif v.n == 1:
            measured += " (n=1)"
        out.append({"verdict": v.verdict.value, "cell": v.cell, "metric": f"{v.metric} ({v.unit})" if v.unit
                    else v.metric, "reference": v.expected, "measured": measured,
                    "margin": "—" if math.isnan(v.margin) else f"{v.margin:+.1%}",
                    "repeats": v.statuses, "why": v.reason})
    return out


def _num(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.3g}"


def summary_line(judgements: Sequence[Judgement], policy: str | None = None) -> str:
    """'References met: 3 passed (3 checks).', '... NOT met: ...', or 'References undecided: ...'; undecided
    verdicts counted otherwise by a policy are said to be."""
    verdicts = [j.verdict for j in judgements]
    if not judgements:
        return "References undecided: no reference covers the selected cells (0 checks)."
    status = exit_status(judgements, policy)
    word = {Exit.OK: "References met", Exit.FAILED: "References NOT met",
            Exit.UNDECIDED: "References undecided"}[status]
    tally = f"{verdicts_.counts_text(verdicts)} ({len(judgements)} check{'s' if len(judgements) != 1 else ''})"
    n_und = verdicts.count(Verdict.UNDECIDED)
    if n_und:
        as_what = counted([j for j in judgements if j.verdict is Verdict.UNDECIDED], policy)
        policies = {f"{'passed' if v is Verdict.PASS else 'failed' if v is Verdict.FAIL else 'undecided'}"
                    for v in as_what}
        if policies != {"undecided"}:
            how = "--undecided " + policy if policy else "the entries' `undecided:` setting"
            tally += f"; undecided counted as {' or '.join(sorted(policies))} by {how}"
    return f"{word}: {tally}."
