"""The report's comparison of two sides as views: the pairs table with ratios, p-values and verdicts, the
geometric-mean and decision sentences, and the comparison sections of a report (runner/report/views.py has the
rest; `matrix compare` renders the same table through runner/report/render.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.analysis.change import threshold_text
from runner.analysis.comparable import unit_of
from runner.analysis.pairing import OK_ONLY
from runner.analysis.verdict import Verdict
from runner.report import fmt, tone
from runner.report.fmt import DASH, Section, Table, TableCell, records
from runner.report.labels import (
    KEY_LABELS,
    key_text,
    not_ok,
    varying,
)


@dataclass(frozen=True)
class Families:
    """Every family of pairs a report judges, computed once: on each machine, every environment against its first
    (`environments`: A, B, the comparison), and in each environment every precision against fp32 (`precisions`:
    environment, fp32, the precision, compare's pairs). Each side is the one `compare` takes (runner/analysis/sides.py)."""

    sides: dict[str, an.Side]
    environments: list[tuple[str, str, an.Comparison]]
    precisions: list[tuple[str, str, str, pd.DataFrame]]


RATE_WORDS = "Fisher's exact test on the failure rates, or every repeat one way on each side"  # how failures decide

def families(df: pd.DataFrame, summary: pd.DataFrame, metric: an.Metric | None = None,
             info: pd.DataFrame | None = None) -> Families:
    """`info`: the environments' facts (`environment_info(df)`), which a side that holds its environment's rows of
    `df` takes as its own rather than computing them again."""
    m = metric or an.METRICS["throughput"]
    envs = list(dict.fromkeys(summary["environment"])) if len(summary) else []
    machine = df.drop_duplicates("environment").set_index("environment")["machine"] if "machine" in df else None
    on: dict[str, list[str]] = {}
    for e in envs:
        on.setdefault(str(machine.get(e, "")) if machine is not None else "", []).append(e)
    sides = {e: replace(an.select_side(df, f"env:{e}"), ref=e) for e in envs} if len(envs) > 1 else {}
    if info is not None and "environment" in info:
        for e, side in sides.items():
            if side.keys == an.PARAM_KEYS and side.chosen["id"].tolist() == df.loc[df["environment"] == e, "id"].tolist():
                side.share_info(info[info["environment"] == e].reset_index(drop=True))
    comparisons = [(group[0], e, an.compare(sides[group[0]], sides[e], m)) for group in on.values() for e in group[1:]]
    return Families(sides, comparisons, precision_pairs(df, envs, m, sides))


def precision_pairs(df: pd.DataFrame, envs: Sequence[str], metric: an.Metric,
                    sides: dict[str, an.Side] | None = None) -> list[tuple[str, str, str, pd.DataFrame]]:
    """In each environment, every precision against fp32, paired on the other params and judged by the decision core
    (side_stats, pair_stats: Welch's test, the p-values adjusted over the environment's pairs of that precision).
    `sides`: the environments' sides, whose cell statistics are taken where a side holds the environment's rows in
    the same order (computed once for both families)."""
    keys = tuple(k for k in an.PARAM_KEYS if k != "precision")
    out = []
    for env in envs:
        rows = df[df["environment"] == env]
        held = rows["precision"]
        if not (held == an.BASELINE_PRECISION).any():
            continue
        # Every precision's cells at once (a cell's statistics are its own rows'), then one side per precision.
        known = (sides or {}).get(env)
        if known is not None and known.keys == an.PARAM_KEYS and known.chosen["id"].tolist() == rows["id"].tolist():
            st = known.stats(metric.name, an.PARAM_KEYS)
        else:
            st = an.side_stats(rows, metric.name, an.PARAM_KEYS)

        def side(precision: Any, st: pd.DataFrame = st) -> pd.DataFrame:
            return st[st["precision"] == precision].drop(columns="precision").reset_index(drop=True)

        base = side(an.BASELINE_PRECISION)
        others = held[held != an.BASELINE_PRECISION].sort_values(key=an.precision_rank, kind="stable")
        for precision in others.dropna().unique():
            pairs, _ = an.pair_stats(base, side(precision), metric, keys=keys, unpaired=False)
            if len(pairs):
                out.append((str(env), an.BASELINE_PRECISION, str(precision), pairs))
    return out


def comparison_sections(df: pd.DataFrame, summary: pd.DataFrame, fam: Families | None = None
                        ) -> tuple[list[Section], list[tuple[str, str, an.Comparison]]]:
    """Environment comparison: on each machine, every environment against its first (never one machine's against
    another's: the machines side by side is another view), plus each one's FP16/FP32 ratios."""
    fam = fam or families(df, summary)
    if not fam.environments:
        return [], []
    envs = list(fam.sides)
    sections = []
    m = an.METRICS["throughput"]
    for a, b, c in fam.environments:
        sections.append(Section(f"{b} vs {a}", pairs_table(c, a, b), comparison_note(c, a, b)))
    ratios = pd.concat([fam.sides[e].precision_ratios(e) for e in envs], ignore_index=True)
    if not ratios.empty:
        sections.append(Section("Precision speed-up per environment (throughput ÷ fp32)",
                                precision_ratio_table(ratios, envs),
                                f"The {m.label} of each precision over fp32's, in the same environment and "
                                "configuration."))
    return sections, fam.environments


def geomean_sentence(c: an.Comparison, a: str, b: str) -> str:
    """'Geometric mean of B/A over 2 of 11 pairs (7 not measured on both sides, 2 not comparable): 1.10x faster':
    every pair without a ratio counted under its reason (a side without an ok repeat, or sides the core would not
    compare), as the rows say it."""
    n, with_ratio = len(c.pairs), c.n_ratios
    over = f"{with_ratio} pair{'s' if with_ratio != 1 else ''}"
    if with_ratio != n:
        p = c.pairs
        measured = (p["a_n"] > 0) & (p["b_n"] > 0)
        ratio = p["ratio"].to_numpy(dtype=float)
        apart = int((measured & ~((ratio == ratio) & (ratio > 0))).sum())
        reasons = [f"{n - with_ratio - apart} not measured on both sides" if n - with_ratio - apart else "",
                   f"{apart} not comparable" if apart else ""]
        over = f"{with_ratio} of {n} pairs ({', '.join(r for r in reasons if r)})"
        if not with_ratio:
            return f"No geometric mean of {b}/{a}: none of the {n} pairs has a ratio ({', '.join(r for r in reasons if r)})"
    text = f"Geometric mean of {b}/{a} over {over}: {fmt.ratio_words(c.geomean, c.geomean_words)}"
    recs = c.pairs.to_dict("records")
    tones = [tone.of_pair(r, c.metric) for r in recs]
    # The mean is of the ratios: its pairs' directions are those their metric decided, not their outcomes'.
    by_metric = [t for t, r in zip(tones, recs, strict=True) if not tone.by_outcomes(r)]
    up, down = by_metric.count(tone.Tone.BETTER), by_metric.count(tone.Tone.WORSE)
    held = [t for t, r in zip(tones, recs, strict=True)
            if tone.by_outcomes(r) and t in (tone.Tone.BETTER, tone.Tone.WORSE, tone.Tone.CHANGED, tone.Tone.UNDECIDED)
            and r["ratio"] == r["ratio"] and r["ratio"] > 0]  # in the mean: a ratio of the repeats that delivered
    if c.geomean_low == c.geomean_low and c.geomean_high == c.geomean_high:
        text += f", 95% interval {c.geomean_low:.3f}-{c.geomean_high:.3f}"
        low, high = 1 / (1 + c.min_effect), 1 + c.min_effect
        if (up and down) or held:  # a mean of opposite changes, or of pairs their failures decided, is no answer
            pass
        elif low <= c.geomean_low and c.geomean_high <= high:
            text += f" (the same within ±{threshold_text(c.min_effect)})"
        elif c.geomean_high < low or c.geomean_low > high:
            text += f" (a change beyond ±{threshold_text(c.min_effect)})"
    elif with_ratio:
        text += " (no 95% interval: the pairs' repeats are too few to size one, so the mean decides nothing)"
    if up and down:
        text += (f"; but the pairs disagree, {up} {c.metric.better} and {down} {c.metric.worse}: the mean decides "
                 "nothing, the pairs are the answer")
    if held:
        kinds = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in (
            (held.count(tone.Tone.WORSE), "regression"), (held.count(tone.Tone.BETTER), "fix"),
            (held.count(tone.Tone.CHANGED), "change of failure"),
            (held.count(tone.Tone.UNDECIDED), "held undecided by failures")) if n]
        text += (f"; {len(held)} of them judged by {'their' if len(held) != 1 else 'its'} failures, not by this "
                 f"figure ({', '.join(kinds)}): this mean of the repeats that delivered decides nothing")
    return text


def comparison_note(c: an.Comparison, a: str, b: str) -> str:
    n = len(c.pairs)
    if not n:
        return f"No cell of {b} has a partner in {a}."
    text = f"{geomean_sentence(c, a, b)}; {decisions_sentence(c)}"
    if not c.unpaired.empty:
        text += f" Unpaired: {len(c.unpaired)} cell{'s' if len(c.unpaired) != 1 else ''}."
    return text


def decisions_sentence(c: an.Comparison) -> str:
    """'5 of 8 pairs significant (Welch's p < 0.05 adjusted by Benjamini–Hochberg over the 7 tested pairs,
    and a change of at least 2%).', with the undecided pairs counted: the table footer."""
    n, tested = len(c.pairs), c.n_tested
    recs = c.pairs.to_dict("records")
    said = [tone.of_pair(r, c.metric) for r in recs]
    failures = sum(1 for r in recs if tone.by_outcomes(r) and r["decision"] == Verdict.FAIL.value)
    # Significant by Welch's test (the metric decided it); a change of outcomes is counted apart, by its own test.
    text = f"{c.n_significant - failures} of {n} pair{'s' if n != 1 else ''} significant"
    same = said.count(tone.Tone.SAME)
    if same:
        text += f", {same} the same within ±{threshold_text(c.min_effect)} (the 95% interval of B/A inside it)"
    none = sum(1 for t, r in zip(said, recs, strict=True) if t is tone.Tone.NONE and r["decision"] == Verdict.PASS.value)
    if none:
        text += f", {none} not compared (nothing measured on either side)"
    und = c.n_decision(Verdict.UNDECIDED)
    if und:
        needed = [int(x) for x in c.pairs["needed"] if x is not None and x == x] if "needed" in c.pairs else []
        if needed and len(needed) == und:
            more = f" (about {max(needed)} repeats a side would decide them all)"
        elif needed:
            more = (f" (about {max(needed)} repeats a side would decide {len(needed)} of them; more repeats are not "
                    f"known to decide the other {und - len(needed)})")
        else:
            more = ""
        text += f", {und} undecided{more}"
    if tested > 1:
        how = (f"Welch's p < {c.alpha:g} adjusted by {c.correction.replace('-', '–').title()} over the {tested} "
               f"tested pairs, and a change of at least {threshold_text(c.min_effect)}")
    else:
        how = (f"Welch's p < {c.alpha:g} and a change of at least {threshold_text(c.min_effect)}; "
               f"{'one pair tested, nothing to adjust' if tested else 'no pair could be tested'}")
    text = f"{text} ({how})"
    if failures:
        text += f"; {failures} changed in {'their' if failures != 1 else 'its'} failures ({RATE_WORDS})"
    text += "."
    hot = c.pairs[(c.pairs["throttling"] != "") & c.pairs["significant"]] if "throttling" in c.pairs else c.pairs[:0]
    if len(hot):
        text += (f" {len(hot)} significant difference{'s' if len(hot) != 1 else ''} coincide"
                 f"{'s' if len(hot) == 1 else ''} with throttling (the verdict says on which side).")
    return text


def machine_lines(c: an.Comparison) -> list[str]:
    """Where each side ran, when a side holds another machine's repeats: 'A (b): machine:ID (host ...; hardware;
    imported from FILE on DAY)', and a last line when the two sides ran on different machines or hardware. None
    for two sides of this store's own (the usual comparison)."""
    ma, mb = c.machines
    if all(m.local for m in (*ma, *mb)) and not c.across_machines:
        return []
    lines = [f"{label} ({side.ref}): {'; '.join(m.words() for m in ms) or 'no repeat'}"
             for label, side, ms in (("A", c.a, ma), ("B", c.b, mb))]
    if c.across_machines:
        hw = [", ".join(sorted({h for m in ms for h in m.hardware})) or "device unknown" for ms in (ma, mb)]
        same = "the same hardware" if hw[0] == hw[1] else f"different hardware ({hw[0]} against {hw[1]})"
        lines.append(f"The sides ran on different machines, {same}: a change between them is the machines' as much "
                     "as the environments'.")
    return lines


def pairs_table(c: an.Comparison, a: str, b: str) -> Table:
    """Per pair: both sides' mean ± std, B/A, the change in words, p (adjusted for the false discovery rate
    over the pairs) and the verdict (undecided when the pair could not be tested)."""
    p = c.pairs
    keys = varying(p, c.keys, always=("environment", "model", "precision", "batch_size") if "environment" in c.keys
                   else ("model", "precision", "batch_size"))
    m = c.metric
    ua, ub = (unit_of(side.chosen, m) for side in (c.a, c.b))
    p_head = "p (BH)" if c.n_tested > 1 else "p"
    table = Table([*(KEY_LABELS[k] for k in keys), f"{a} ({ua})" if ua else a, f"{b} ({ub})" if ub else b, f"{b}/{a}",
                   "change", p_head,
                   "verdict"], align=["l"] * len(keys) + ["r", "r", "r", "l", "r", "l"])
    for r in p.to_dict("records"):
        cls = tone.of_pair(r, m).value  # the colour of the decision core's verdict, never of its words
        words = str(r["verdict"]) + (f" ({r['throttling']})" if r.get("throttling") else "")
        iv = tone.interval(r["ratio"], r.get("ratio_low"), r.get("ratio_high"), m)
        moved = str(r["change"] or "")
        bare, only = moved.removesuffix(OK_ONLY), OK_ONLY if moved.endswith(OK_ONLY) else ""
        change = f"{bare} ({iv}){only}" if moved and iv else moved or DASH
        # Where the outcomes decided, the change of the repeats that delivered is shown uncoloured and its p left
        # out: the verdict (its own test's p in its words) is what decided.
        held = tone.by_outcomes(r)
        table.add(*(key_text(k, r[k]) for k in keys),
                  side_cell(r, "a", m), side_cell(r, "b", m),
                  TableCell(fmt.number(r["ratio"], 3), "num"),
                  TableCell(change, "status" if held else cls),
                  TableCell(DASH if held else fmt.p_value(r["p_adjusted"]), "num"), TableCell(words, cls))
    return table


def side_cell(r: Any, side: str, m: an.Metric) -> TableCell:
    n = int(r[f"{side}_n"])
    bad = not_ok(r[f"{side}_statuses"])
    if n == 0:
        return TableCell(bad or DASH, "status")
    text = fmt.metric_value(m, r[f"{side}_mean"], r[f"{side}_std"], n)
    return TableCell(f"{text} ({bad})" if bad else text, "num")


def precision_ratio_table(ratios: pd.DataFrame, sides: Sequence[str]) -> Table:
    """Rows configuration, columns side × precision: the 2018 Slurm-versus-container table's ratios."""
    keys = varying(ratios, [k for k in an.PARAM_KEYS if k != "precision"], always=("model", "batch_size"))
    precisions = list(dict.fromkeys(ratios.sort_values(
        "precision", key=an.precision_rank, kind="stable")["precision"]))
    columns = [(s, p) for s in sides for p in precisions
               if ((ratios["side"] == s) & (ratios["precision"] == p)).any()]
    table = Table([*(KEY_LABELS[k] for k in keys), *(f"{s} {p}/fp32" for s, p in columns)],
                  align=["l"] * len(keys) + ["r"] * len(columns))
    recs = ratios.to_dict("records")
    lookup = {(r["side"], r["precision"], *(r[k] for k in keys)): r for r in recs}
    for key in dict.fromkeys(tuple(r[k] for k in keys) for r in recs):
        table.add(*(key_text(k, v) for k, v in zip(keys, key, strict=True)),
                  *(_ratio_cell(lookup.get((s, p, *key))) for s, p in columns))
    return table


def comparison_doc(c: an.Comparison) -> dict[str, Any]:
    """A comparison as plain data: sides, test settings, pairs, geometric mean, unpaired cells."""
    return {
        "metric": c.metric.name, "unit": c.metric.stored_unit,
        "a": {"ref": c.a.ref, "kind": c.a.kind, "environments": c.a.environments},
        "b": {"ref": c.b.ref, "kind": c.b.kind, "environments": c.b.environments},
        "test": {"name": "welch-t", "alpha": c.alpha, "min_effect": c.min_effect, "correction": c.correction,
                 "tested": c.n_tested},
        "pairs": records(with_tone(c.pairs, c.metric)),
        "geomean_ratio": None if math.isnan(c.geomean) else round(c.geomean, 10),
        "geomean_low": None if math.isnan(c.geomean_low) else round(c.geomean_low, 10),
        "geomean_high": None if math.isnan(c.geomean_high) else round(c.geomean_high, 10),
        "geomean_change": c.geomean_words,
        "significant": c.n_significant,
        "decisions": {v.value: c.n_decision(v) for v in Verdict},
        "definitions": {"pooled": c.a.pool or c.b.pool,
                        "a": records(c.a.definitions.several), "b": records(c.b.definitions.several)},
        "unpaired": records(c.unpaired),
        "precision_ratios": records(c.precision_ratios),
        "environments": records(c.environments),
        "recipes_differ": records(c.recipes),
        "notes": list(c.notes),
        "paired_on": list(c.keys),
        "machines": {"a": [m.as_json() for m in c.a.machines], "b": [m.as_json() for m in c.b.machines]},
        "across_machines": c.across_machines,
    }


def with_tone(pairs: pd.DataFrame, metric: an.Metric) -> pd.DataFrame:
    """Compare's pairs with each one's tone (better, worse, same, changed, undecided: runner/report/tone.py), the one
    word every page, chart, CSV and JSON colours a verdict by."""
    return pairs.assign(tone=[tone.of_pair(r, metric).value for r in pairs.to_dict("records")])


def _ratio_cell(r: dict[str, Any] | None) -> TableCell:
    """A precision's speed-up, or 'not comparable' where the core would not pair its two cells (the JSON's `why`
    says why in full)."""
    if r is not None and r.get("why"):
        return TableCell("not comparable", "status")
    return TableCell(fmt.ratio(None if r is None else r["ratio"]), "num")
