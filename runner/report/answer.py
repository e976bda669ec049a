"""The report's first section: which environment, precision or run differs, by how much and how sure that is, as
sentences and one chart of ratios with their intervals. Every comparison is the decision core's (compare's pairs,
the history's steps); this module only orders them and says them (runner/report/tone.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.report.labels import cell_label
from runner.report.tone import Said, Tone, by_outcomes, pair_said, same_words, say
from runner.report.tone import of_point as point_tone

SHOWN = 5           # sentences of each kind before "and N more"
CHARTED = 40        # comparisons the chart carries at most (the largest changes first)
COLUMNS = ["kind", "a", "b", "cell", "label", "ratio", "ratio_low", "ratio_high", "p", "decision", "tone", "needed",
           "sentence", "anchor"]


@dataclass(frozen=True)
class Compared:
    """One family of pairs the core judged: B against A (two environments, a precision against fp32 in one
    environment), the pairs frame of `an.pair_stats`, and the section of the report that has its table."""

    kind: str        # environment | precision
    a: str
    b: str
    pairs: pd.DataFrame
    anchor: str
    where: str = ""  # said after the cell ("in local-cpu")


@dataclass
class Answer:
    """The answer: every comparison as a finding (one row each: COLUMNS), the headline, and the sentences shown."""

    findings: pd.DataFrame
    headline: str
    decided: list[tuple[str, str]] = field(default_factory=list)     # (sentence, tone)
    undecided: list[tuple[str, str]] = field(default_factory=list)
    more: list[str] = field(default_factory=list)                    # "and 4 more changes: see ..." lines


def families(fam: Any, several: bool) -> list[Compared]:
    """The report's families of pairs (runner/report/pairs.py Families) as the answer reads them: each environment
    against the first, each precision against fp32 ("in ENV" where there are several environments)."""
    if fam is None:
        return []
    out = [Compared("environment", a, b, c.pairs, "comparison") for a, b, c in fam.environments]
    out += [Compared("precision", a, b, pairs, "precision", f"in {env}" if several else "")
            for env, a, b, pairs in fam.precisions]
    return out


def _where(r: dict[str, Any], keys: list[str]) -> str:
    """'for wrn at batch 64', with what else varies among the pairs ('fp16', 'cifar10', '2 GPUs')."""
    parts = [str(r["model"])] if "model" in keys else []
    extra = [str(r[k]) for k in keys if k not in ("model", "batch_size") and str(r.get(k, "")) not in ("", "1")]
    text = "for " + " ".join(parts + extra)
    return f"{text} at batch {r['batch_size']}" if "batch_size" in keys else text


def pair_findings(fam: Compared, metric: an.Metric, within: float | None = None) -> list[dict[str, Any]]:
    out = []
    p = fam.pairs
    keys = [k for k in an.PARAM_KEYS if k in p and (k in ("model", "batch_size") or p[k].nunique() > 1)]
    # Sides paired on the environment too (two runs of the same environments): each sentence names its own.
    envs = "environment" in p and p["environment"].nunique() > 1
    for r in p.to_dict("records"):
        where = _where(r, keys) + (f" in {r['environment']}" if envs else "") + (f" {fam.where}" if fam.where else "")
        said = pair_said(r, metric, fam.b, fam.a, where, within)
        cell = " · ".join([*([str(r["environment"])] if envs else []), *(str(r[k]) for k in keys if k != "batch_size")]
                          ) + (f" · batch {r['batch_size']}" if "batch_size" in keys else "")
        # A pair its outcomes decided has no figure of what decided it: the ratio of the repeats that delivered is
        # not its answer, so it is neither charted nor sized by it (it leads, as the largest change).
        sized = not by_outcomes(r)
        out.append(_row(fam.kind, fam.a, fam.b, cell, r.get("ratio") if sized else None,
                        r.get("ratio_low") if sized else None, r.get("ratio_high") if sized else None,
                        r.get("p_adjusted") if sized else None, str(r.get("decision", "")), said,
                        r.get("needed") if sized else None, fam.anchor,
                        f"{fam.b} / {fam.a} · {cell}" + (f" {fam.where}" if fam.where else "")))
    return out


def history_findings(hist: pd.DataFrame, metric: an.Metric) -> list[dict[str, Any]]:
    """The latest point of each series against the point before it, in the history's own verdict."""
    if hist.empty:
        return []
    out = []
    series = "series" if "series" in hist else "cell_key"
    # A name measured under several definitions has a series each: its label says which, as the history table does.
    names = [c for c in (*an.CELL_KEYS, "machine") if c in hist]
    several = hist.groupby(names, sort=False, dropna=False)[series].transform("nunique") > 1 if names else \
        pd.Series(False, index=hist.index)
    for _, g in hist.groupby(series, sort=False):
        r = g.iloc[-1].to_dict()
        if int(r.get("point", 0)) < 1:
            continue
        tone = point_tone(r)
        label = cell_label(r) + (f" (definition {r['cell_key']})" if bool(several[g.index[-1]]) else "")
        said = say(tone, r["ratio"], r.get("ratio_low"), r.get("ratio_high"), r["p_value"], metric, "the latest run",
                   "the run before", "", str(r.get("change") or r.get("undecided") or ""))
        said = replace(said, sentence=f"{label}: {said.sentence}")
        out.append(_row("history", "the run before", "the latest run", label, r["ratio"], r.get("ratio_low"),
                        r.get("ratio_high"), r["p_value"], "fail" if r["step"] else "undecided" if r.get("undecided")
                        else "pass", said, math.nan, "history", f"latest / before · {label}"))
    return out


def _row(kind: str, a: str, b: str, cell: str, ratio: Any, low: Any, high: Any, p: Any, decision: str, said: Said,
         needed: Any, anchor: str, label: str) -> dict[str, Any]:
    def num(v: Any) -> float:
        try:
            return float(v)
        except (TypeError, ValueError):
            return math.nan

    return {"kind": kind, "a": a, "b": b, "cell": cell, "label": label, "ratio": num(ratio), "ratio_low": num(low),
            "ratio_high": num(high), "p": num(p), "decision": decision, "tone": said.tone.value, "needed": num(needed),
            "sentence": said.sentence, "anchor": anchor}


def _size(r: pd.Series) -> float:
    return abs(math.log(r["ratio"])) if r["ratio"] == r["ratio"] and r["ratio"] > 0 else math.inf


def build(families: list[Compared], hist: pd.DataFrame, metric: an.Metric, nothing: str,
          within: float | None = None) -> Answer:
    """The answer over every family and the history; `nothing`: the sentence when there is nothing to compare;
    `within`: the threshold the pairs were judged by (compare's --min-effect; MIN_EFFECT unless given)."""
    rows = [f for fam in families for f in pair_findings(fam, metric, within)] + history_findings(hist, metric)
    df = pd.DataFrame(rows, columns=COLUMNS)
    if df.empty:
        return Answer(df, nothing)
    df = df.assign(_size=df.apply(_size, axis=1)).sort_values("_size", ascending=False, kind="stable")
    changed = df[df["tone"].isin([Tone.BETTER.value, Tone.WORSE.value, Tone.CHANGED.value])]
    same = df[df["tone"] == Tone.SAME.value]
    open_ = df[df["tone"] == Tone.UNDECIDED.value]
    n, none = len(df), int((df["tone"] == Tone.NONE.value).sum())
    # Every comparison counted once: changed, the same, undecided, or (nothing measured on either side) not compared.
    headline = (f"{n} comparison{'s' if n != 1 else ''} of {metric.label}: {len(changed)} changed, {len(same)} "
                f"{same_words(within)}, {len(open_)} undecided" + (f", {none} not compared (nothing measured on either "
                                                              "side)." if none else "."))
    ans = Answer(df.drop(columns="_size").reset_index(drop=True), headline,
                 [(s, t) for s, t in zip(changed["sentence"].head(SHOWN), changed["tone"].head(SHOWN), strict=True)],
                 [(s, t) for s, t in zip(open_["sentence"].head(SHOWN), open_["tone"].head(SHOWN), strict=True)])
    for what, part in (("change", changed), ("undecided comparison", open_)):
        if len(part) > SHOWN:
            more = len(part) - SHOWN
            ans.more.append(f"and {more} more {what}{'s' if more != 1 else ''}")
    return ans


def charted(answer: Answer) -> pd.DataFrame:
    """What the answer's chart carries: the comparisons with a ratio, the largest changes first, at most CHARTED."""
    f = answer.findings
    if f.empty:
        return f
    return f[f["ratio"].notna() & (f["ratio"] > 0)].head(CHARTED)
