"""The regression gate of `matrix compare A B --fail-on slower:3%`: exit 1 only for a change that is both
larger than its threshold and significant, and say which pairs tripped it.

Rules: `slower:X` (B's throughput below A's: A/B - 1 > X, the compare table's "1.03x slower" is 3%),
`faster:X` (B/A - 1 > X in throughput), `memory:X` (B's peak memory over A's by more than X). A cell that
has ok repeats on A and none on B trips `slower` and `memory` (it newly fails, as in asv).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from runner.analysis import PARAM_KEYS
from runner.decide import significance
from runner.errors import ConfigError
from runner.spec import percentage

GATE_SCHEMA = 1
RULES = {"slower": "throughput", "faster": "throughput", "memory": "peak_mem"}


@dataclass(frozen=True)
class Rule:
    kind: str          # slower | faster | memory
    threshold: float   # 0.03 = 3%

    @property
    def metric(self) -> str:
        return RULES[self.kind]

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.threshold * 100:g}%"

    def change(self, a_mean: float, b_mean: float) -> float:
        """The change in the rule's direction (positive = the way the rule fears), as a fraction."""
        if not (a_mean > 0 and b_mean > 0):
            return math.nan
        if self.kind == "slower":
            return a_mean / b_mean - 1
        return b_mean / a_mean - 1


def parse_rules(specs: Iterable[str]) -> list[Rule]:
    """`slower:3%`, `faster:10%`, `memory:5%` (repeatable, or comma-separated) -> rules; a mistake is one line."""
    rules = []
    for spec in specs:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            kind, sep, value = item.partition(":")
            if kind not in RULES or not sep:
                raise ConfigError(f"--fail-on {item!r}: expected KIND:THRESHOLD with KIND one of "
                                  f"{', '.join(RULES)}, e.g. slower:3%")
            try:
                threshold = float(percentage(value.strip() if value.strip().endswith("%") else float(value)))
            except ValueError as e:
                raise ConfigError(f"--fail-on {item!r}: {e}") from None
            if not 0 <= threshold < 1:
                raise ConfigError(f"--fail-on {item!r}: the threshold must be between 0% and 100%")
            rules.append(Rule(kind, threshold))
    return rules


@dataclass(frozen=True)
class Check:
    """One pair of cells under one rule."""

    rule: Rule
    params: Mapping[str, Any]
    a_n: int
    b_n: int
    a_mean: float
    b_mean: float
    change: float        # in the rule's direction, as a fraction
    p_value: float
    tripped: bool
    reason: str          # why it tripped, or why not

    def as_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else float(f"{x:.6g}")
        return {"rule": self.rule.text, "metric": self.rule.metric, **{k: self.params[k] for k in PARAM_KEYS},
                "a_n": self.a_n, "b_n": self.b_n, "a_mean": num(self.a_mean), "b_mean": num(self.b_mean),
                "change": num(self.change), "p_value": num(self.p_value), "tripped": self.tripped,
                "reason": self.reason}


def _ok_values(frame: pd.DataFrame, metric: str) -> dict[tuple[Any, ...], tuple[np.ndarray, int]]:
    """Each cell's ok values of `metric` and its count of ok repeats, keyed on the params that pair cells
    across sides (a metric a backend does not measure, e.g. peak memory on a CPU, has no values)."""
    out: dict[tuple[Any, ...], tuple[np.ndarray, int]] = {}
    if frame.empty:
        return out
    for key, g in frame.groupby(list(PARAM_KEYS), sort=False, dropna=False):
        ok = g[g["status"] == "ok"][metric].to_numpy(dtype=float)
        out[tuple(key)] = (ok[~np.isnan(ok)], int(ok.size))
    return out


def evaluate(a: pd.DataFrame, b: pd.DataFrame, rules: Sequence[Rule], alpha: float = significance.ALPHA,
             test: significance.PValue = significance.TEST) -> list[Check]:
    """Every pair of cells (params equal on both sides) under every rule, in A's cell order."""
    checks = []
    for rule in rules:
        va, vb = _ok_values(a, rule.metric), _ok_values(b, rule.metric)
        for key, (xa, ok_a) in va.items():
            if key not in vb:
                continue
            xb, ok_b = vb[key]
            params = dict(zip(PARAM_KEYS, key, strict=True))
            checks.append(_check(rule, params, xa, xb, alpha, test, (ok_a, ok_b)))
    return checks


def _check(rule: Rule, params: dict[str, Any], xa: np.ndarray, xb: np.ndarray, alpha: float,
           test: significance.PValue, ok_repeats: tuple[int, int] | None = None) -> Check:
    ma = float(xa.mean()) if xa.size else math.nan
    mb = float(xb.mean()) if xb.size else math.nan
    ok_a, ok_b = ok_repeats or (xa.size, xb.size)
    if (ok_a and ok_b) and not (xa.size and xb.size):
        return Check(rule, params, xa.size, xb.size, ma, mb, math.nan, math.nan, False,
                     f"{rule.metric} not measured on {'either side' if not (xa.size or xb.size) else 'one side'}")
    if xa.size and not ok_b:
        newly = rule.kind != "faster"
        return Check(rule, params, xa.size, 0, ma, mb, math.nan, math.nan, newly,
                     "B has no ok repeat (A has)" if newly else "no ok repeat on B")
    if not xa.size:
        return Check(rule, params, 0, xb.size, ma, mb, math.nan, math.nan, False, "no ok repeat on A")
    change = rule.change(ma, mb)
    p = test(xa, xb)
    if math.isnan(p):
        why = "not tested (needs 2+ ok repeats per side)" if min(xa.size, xb.size) < 2 else "not tested (no spread)"
        return Check(rule, params, xa.size, xb.size, ma, mb, change, p, False, why)
    big = change > rule.threshold
    significant = p < alpha
    tripped = big and significant
    if tripped:
        reason = f"{rule.kind} by {change:.1%} > {rule.threshold:.1%}, p={p:.3g}"
    elif big:
        reason = f"{change:+.1%} but not significant (p={p:.3g})"
    else:
        reason = f"{change:+.1%} is within {rule.threshold:.1%}" + (" (significant)" if significant else "")
    return Check(rule, params, xa.size, xb.size, ma, mb, change, p, tripped, reason)


def tripped(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.tripped]


def to_json(a: str, b: str, rules: Sequence[Rule], checks: Sequence[Check], alpha: float = significance.ALPHA
            ) -> str:
    """Stable JSON for CI: sorted keys per record, checks in rule then pair order, no NaN."""
    doc = {"schema": GATE_SCHEMA, "a": a, "b": b, "test": significance.TEST_NAME, "alpha": alpha,
           "rules": [r.text for r in rules], "tripped": bool(tripped(checks)),
           "n_tripped": len(tripped(checks)), "checks": [c.as_json() for c in checks]}
    return json.dumps(doc, indent=2, allow_nan=False)


def rows(checks: Sequence[Check]) -> list[dict[str, str]]:
    """The tripped checks as table rows of text."""
    out = []
    for c in tripped(checks):
        cell = " ".join(f"{k}={c.params[k]}" for k in ("model", "precision", "batch_size"))
        extra = [f"{k}={c.params[k]}" for k in ("dataset", "gpus", "nodes") if str(c.params[k]) not in
                 ("synthetic", "1")]
        opts = c.params.get("options") or ""
        out.append({"rule": c.rule.text, "cell": " ".join([cell, *extra, opts]).strip(),
                    "A": _num(c.a_mean), "B": _num(c.b_mean),
                    "change": "—" if math.isnan(c.change) else f"{c.change:+.1%}",
                    "p": "—" if math.isnan(c.p_value) else f"{c.p_value:.3g}", "why": c.reason})
    return out


def summary_line(rules: Sequence[Rule], checks: Sequence[Check]) -> str:
    n = len(tripped(checks))
    tested = len({(tuple(c.params.values())) for c in checks})
    rule_text = ", ".join(r.text for r in rules)
    pairs = f"{tested} pair{'s' if tested != 1 else ''}"
    if n:
        return f"Gate tripped ({rule_text}): {n} of {len(checks)} checks over {pairs}."
    return f"Gate passed ({rule_text}): no change beyond its threshold and significant, {pairs} checked."


def _num(x: float) -> str:
    return "—" if math.isnan(x) else (f"{x:.1f}" if abs(x) >= 100 else f"{x:.3g}")


