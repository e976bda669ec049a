"""What `matrix bisect` prints: the environments it measured, its decisions in order, the answer (the pair, the
change with its interval and p-value, what it cost against a full sweep) and what differs between the pair's two
environments; as terminal tables, Markdown or JSON."""

from __future__ import annotations

import io
import json
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from runner.analysis.bisect_pair import percent
from runner.analysis.bisect_search import (
    FOUND,
    NO_CHANGE,
    SPREAD,
    STATUS,
    PairComparison,
    Sample,
    SearchAnswer,
    Settings,
)
from runner.analysis.change import threshold_text
from runner.analysis.comparable import unit_in
from runner.analysis.envdiff import EnvDiff, EnvSide
from runner.analysis.envdiff import to_json as diff_json
from runner.analysis.pairing import change_words
from runner.record.metrics import Metric
from runner.report import diff as diff_view
from runner.report.fmt import DASH, Table, TableCell, md_table, mean_std, p_value

BISECT_SCHEMA = 1


@dataclass(frozen=True)
class Cost:
    """What the bisect measured against a full sweep of the same list."""

    environments: int            # in the list
    measured_envs: int           # the search looked at
    looked: int                  # repeats the search looked at
    measured_now: int            # of them, measured by this bisect (the rest were stored)
    first_level: int
    last_level: int

    def text(self) -> str:
        stored = self.looked - self.measured_now
        return (f"Measured {self.measured_envs} of {self.environments} environments, {self.looked} repeats "
                f"({self.measured_now} measured now, {stored} already stored); a full sweep: "
                f"{self.environments} environments x {self.first_level} repeats = "
                f"{self.environments * self.first_level} repeats (x {self.last_level} = "
                f"{self.environments * self.last_level} at the most repeats).")


@dataclass(frozen=True)
class BisectReport:
    names: list[str]
    cell: str
    metric: Metric | None
    settings: Settings
    answer: SearchAnswer
    cost: Cost
    diff: EnvDiff | None = None
    steps: tuple[tuple[EnvSide, EnvSide], ...] = ()


def _metric_name(r: BisectReport) -> str:
    """The metric with the unit its samples were measured in (a transformer's tok/s), never one written here."""
    if r.metric is None:
        return "status"
    units = dict.fromkeys(unit_in(d) for s in r.answer.samples.values() for d in s.definition.split(", "))
    unit = " | ".join(u for u in units if u) or r.metric.unit
    return f"{r.metric.label} ({unit})" if unit else r.metric.label


def change_percent(change: float, metric: Metric | None) -> str:
    """'+100.0% (2.00x faster)': a change b/a - 1 as bisect prints it (and the site's bisects.html shows it)."""
    words = change_words(1 + change, metric) if metric else ""
    return percent(change) + (f" ({words})" if words else "")


def change_text(c: PairComparison, metric: Metric | None, confidence: float) -> str:
    """'+41.2% (1.41x faster), 98.8% CI +30.1%..+52.0%, p=0.003' or 'unsupported -> ok'."""
    if c.kind == STATUS or c.change is None:
        return c.why
    text = change_percent(c.change, metric)
    if c.ci is not None:
        text += f", {confidence:.4g}% CI {percent(c.ci[0])}..{percent(c.ci[1])}"
    if c.p_value is not None:
        text += f", p={p_value(c.p_value)}" if c.p_value >= 0.001 else ", p<0.001"
    return text


def _pair(r: BisectReport, c: PairComparison) -> str:
    return f"{r.names[c.a]} -> {r.names[c.b]}"


def answer_lines(r: BisectReport) -> list[str]:
    a, conf = r.answer, r.settings.confidence * 100
    end = f"{r.names[0]} -> {r.names[-1]}: {change_text(a.end, r.metric, conf)}"
    lines = []
    if a.outcome == FOUND and a.culprit is not None:
        lines.append(f"Culprit: {_pair(r, a.culprit)}: {change_text(a.culprit, r.metric, conf)}; "
                     f"{a.why} ({end}).")
    elif a.outcome == SPREAD:
        lines.append(f"No single culprit: {a.why} ({end}).")
        for s in a.steps:
            lines.append(f"  step {_pair(r, s)}: {change_text(s, r.metric, conf)}")
        for d in a.drifts:
            lines.append(f"  drift {_pair(r, d)}: {change_text(d, r.metric, conf)}, each part within the threshold")
        for u in a.unresolved:
            lines.append(f"  undecided {_pair(r, u)}: {u.why}")
    elif a.outcome == NO_CHANGE:
        lines.append(f"No change: {a.why}; {end}.")
    else:
        lines.append(f"Undecided: {a.why}.")
        if a.culprit is not None:
            lines.append(f"  candidate (not a culprit) {_pair(r, a.culprit)}: {change_text(a.culprit, r.metric, conf)}")
        for u in a.unresolved or ([a.end] if a.end.verdict.value == "undecided" else []):
            lines.append(f"  undecided {_pair(r, u)}: {u.why}")
    lines.append(r.cost.text())
    return lines


def _stat(s: Sample | None, metric: Metric | None) -> str:
    if s is None:
        return DASH
    if s.missing:
        return "not measured"
    if s.state != "ok" or metric is None:
        return s.state + (" (not every repeat)" if s.flaky else "")
    vals = list(s.values)
    if not vals:
        return "ok, not measured"
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return mean_std(statistics.fmean(vals), std, len(vals), metric.scale) + (" (some not ok)" if s.flaky else "")


def tables(r: BisectReport) -> list[tuple[str, Table]]:
    a = r.answer
    envs = Table(["#", "environment", "repeats", _metric_name(r)], align=["r", "l", "r", "r"])
    for i, name in enumerate(r.names):
        s = a.samples.get(i)
        envs.add(str(i + 1), name, str(s.n) if s is not None else DASH,
                 TableCell(_stat(s, r.metric), "muted" if s is None else ""))
    decisions = Table(["A", "B", "n", "change", "verdict", "why"], align=["l", "l", "r"])
    conf = r.settings.confidence * 100
    for c in a.decisions:
        decisions.add(r.names[c.a], r.names[c.b], f"{c.n_a}+{c.n_b}",
                      change_text(c, r.metric, conf) if c.kind != STATUS and c.change is not None else DASH,
                      TableCell(c.verdict.value, {"fail": "bad", "pass": "good"}.get(c.verdict.value, "status")), c.why)
    out = [("Environments (in order)", envs), ("Decisions, in order (fail: changed; pass: the same within the "
                                             "threshold)", decisions)]
    for sa, sb in r.steps:
        t = Table(["step", sa.name, sb.name])
        t.add("versions", sa.version_line(sb) or "(the same)", sb.version_line(sa) or "(the same)")
        out.append((f"{sa.name} -> {sb.name}", t))
    return out


def method(r: BisectReport) -> str:
    s = r.settings
    what = "a change of status only" if r.metric is None else (
        f"a change of {r.metric.label} beyond ±{threshold_text(s.threshold)} that is significant (Welch, p < {s.alpha_look:.3g}: "
        f"{s.alpha:g} over {len(s.levels)} repeat levels), or a change of status; the same: the {s.confidence * 100:.4g}% "
        f"interval of the change within ±{threshold_text(s.threshold)}")
    return (f"Bisect of {r.cell} over {len(r.names)} environments, {r.names[0]} … {r.names[-1]}: {what}; repeats "
            f"{', '.join(map(str, s.levels))} as needed.")


def render(r: BisectReport, fmt: str | None = None) -> str:
    if fmt == "json":
        return json.dumps(to_json(r), indent=2, default=str) + "\n"
    diff_title = (f"What differs between {r.diff.a.name} and {r.diff.b.name}" if r.diff is not None else "")
    if fmt == "md":
        parts = [method(r)]
        parts += [f"**{title}**\n\n{md_table(t)}" for title, t in tables(r)]
        parts.append("\n".join(answer_lines(r)))
        if r.diff is not None:
            parts.append(f"**{diff_title}**\n\n" + diff_view.render(r.diff, "md"))
        return "\n\n".join(parts) + "\n"
    from rich.text import Text

    from runner.base.console import console as make_console
    from runner.base.console import rich_table

    buf = io.StringIO()
    console = make_console(buf, tty=sys.stdout.isatty())
    console.print(Text(method(r), style="dim"))
    for title, t in tables(r):
        console.print(rich_table(t, title))
    for i, line in enumerate(answer_lines(r)):
        console.print(Text(line, style="bold" if i == 0 else ""))
    if r.diff is not None:
        console.print(Text(diff_title, style="bold"))
        buf.write(diff_view.render(r.diff))
    return buf.getvalue()


def _comparison(c: PairComparison, names: list[str]) -> dict[str, Any]:
    return {"a": names[c.a], "b": names[c.b], "verdict": c.verdict.value, "why": c.why, "kind": c.kind,
            "state_a": c.state_a, "state_b": c.state_b, "n_a": c.n_a, "n_b": c.n_b, "mean_a": c.mean_a,
            "mean_b": c.mean_b, "change": c.change, "ci": list(c.ci) if c.ci else None, "p_value": c.p_value}


def to_json(r: BisectReport) -> dict[str, Any]:
    a, s = r.answer, r.settings
    return {
        "schema": BISECT_SCHEMA, "kind": "matrix-bisect", "outcome": a.outcome, "exit_status": int(a.exit_code),
        "why": a.why, "cell": r.cell, "metric": r.metric.name if r.metric else STATUS,
        "threshold": s.threshold, "alpha": s.alpha, "alpha_per_look": s.alpha_look, "confidence": s.confidence,
        "levels": list(s.levels), "environments": r.names,
        "culprit": _comparison(a.culprit, r.names) if a.culprit else None,
        "share": a.share, "end": _comparison(a.end, r.names),
        "steps": [_comparison(c, r.names) for c in a.steps], "drifts": [_comparison(c, r.names) for c in a.drifts],
        "unresolved": [_comparison(c, r.names) for c in a.unresolved],
        "decisions": [_comparison(c, r.names) for c in a.decisions],
        "repeats": {r.names[i]: n for i, n in a.repeats.items()},
        "cost": {"environments": r.cost.environments, "measured_environments": r.cost.measured_envs,
                 "repeats": r.cost.looked, "measured_now": r.cost.measured_now,
                 "full_sweep": r.cost.environments * r.cost.first_level,
                 "full_sweep_most": r.cost.environments * r.cost.last_level},
        "diff": diff_json(r.diff) if r.diff is not None else None,
    }
