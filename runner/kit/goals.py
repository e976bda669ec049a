"""The evidence page's goals: the three figures the kit aims at on one H100 (published.json "goals"), each beside the
first run's figure on an H100 (published.json "h100-first-run": the baseline) and this page's best admitted figure.

A goal is decided as a reference is (runner/analysis/change.py `bound_test`): **met** only where the 95% interval
of the row's mean lies at or above it, **not met** where the mean is below it and significantly so, and undecided
otherwise, with the repeats that would decide it; one repeat has no interval and meets nothing, and a row some of
whose repeats did not end ok (out of memory, failed, timed out) meets nothing on the others alone. FP8's goal is
met only where the interval of the ratio to BF16 lies at or above it; whether the losses agree is the FP8-by-size
table's column beside it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from runner.analysis import change, significance
from runner.analysis.verdict import Verdict
from runner.kit.cell_results import _md
from runner.kit.lever_sections import settings
from runner.kit.transformer import BASE
from runner.report.fmt import DASH, Table

LEAST = 2  # admitted repeats a row needs before it can meet a goal


def best(rows: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    """The row of the highest `key` among those with a known spread, else the highest of any (not met from it)."""
    measured = [r for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key]) and r.get("n")]
    known = [r for r in measured if r["n"] >= LEAST]
    return max(known or measured, key=lambda r: r[key], default=None)


def not_ok(statuses: str) -> str:
    """The repeats of a row that did not end ok ('2 oom'), from its statuses ('3 ok, 2 oom'); '' when all did."""
    return ", ".join(p for p in str(statuses or "").split(", ") if p and not p.endswith(" ok"))


def verdict(value: float | None, goal: float, n: int, std: float | None = None, family: int = 1,
            statuses: str = "") -> str:
    """met, not met or undecided: the row's mean against the goal, by the interval of the mean. `family`: the rows
    the best was chosen from; the best of twenty rows at the goal would otherwise "meet" it one time in five, so its
    interval is at 1 - 0.05 / family (Bonferroni over the choice). A row some of whose repeats did not end ok
    (`statuses`) never meets a goal on the others alone, as a reference never passes such a cell."""
    if value is None or not math.isfinite(value):
        return "not measured yet"
    if n < LEAST or std is None or not math.isfinite(std):
        side = "reached" if value >= goal else "below it"
        return f"undecided: {side} by {'one repeat' if n < LEAST else 'a row without its spread'} (at least {LEAST} " \
               "repeats needed)"
    confidence = 1 - significance.ALPHA / max(family, 1)
    low, high = significance.mean_interval(value, std, n, True, confidence)
    t = change.bound_test(value, std, n, goal, math.inf, (float(low), float(high)), True, confidence)
    if t.verdict is Verdict.PASS:
        bad = not_ok(statuses)
        return f"undecided: its ok repeats reach it, but not every repeat ended ok ({bad})" if bad else "met"
    if t.verdict is Verdict.FAIL and t.p_value < significance.ALPHA:
        return f"not met ({value / goal:.0%} of it)"
    return (f"undecided: {value / goal:.0%} of it, {confidence * 100:.3g}% interval {float(low) / goal:.0%}-"
            f"{float(high) / goal:.0%}"
            + (f"; about {t.needed} repeats would decide" if t.needed else ""))


def family(rows: Sequence[Mapping[str, Any]]) -> int:
    """The rows with a known spread a best was chosen from."""
    return max(1, sum(1 for r in rows if int(r.get("n") or 0) >= LEAST))


def ratio_verdict(fp8: Mapping[str, Any] | None, goal: float, rows: int = 1) -> str:
    """FP8 over BF16 against its goal: met only where the ratio's interval lies at or above it; chosen as the best of
    `rows`, its 95% interval is widened to 1 - 0.05 / rows (on the log scale, by the normal quantiles' ratio)."""
    if fp8 is None:
        return "not measured yet"
    ratio, low, high = (float(fp8.get(k) or math.nan) for k in ("ratio_to_bf16", "ratio_low", "ratio_high"))
    if not all(math.isfinite(x) for x in (ratio, low, high)):
        return f"undecided: {ratio:.2f}x without an interval (at least {LEAST} repeats a side needed)"
    if rows > 1 and low > 0:
        from statistics import NormalDist

        widen = NormalDist().inv_cdf(1 - significance.ALPHA / 2 / rows) / NormalDist().inv_cdf(1 - significance.ALPHA / 2)
        centre, half = math.log(ratio), max(math.log(high) - math.log(ratio), math.log(ratio) - math.log(low))
        low, high = math.exp(centre - half * widen), math.exp(centre + half * widen)
    level = f"{(1 - significance.ALPHA / max(rows, 1)) * 100:.3g}%"
    if low >= goal:
        bad = not_ok(str(fp8.get("statuses") or ""))
        return f"undecided: its ok repeats reach it, but not every FP8 repeat ended ok ({bad})" if bad else "met"
    if high < goal:
        return f"not met ({ratio:.2f}x, {level} interval {low:.2f}-{high:.2f}x)"
    return f"undecided: {ratio:.2f}x, {level} interval {low:.2f}-{high:.2f}x reaches across {goal:.1f}x"


def section(doc: Mapping[str, Any], pub: Mapping[str, Any], gpu: str) -> tuple[str, dict[str, Any]]:
    """The section's Markdown and its numbers for evidence.json (doc holds the other sections' numbers)."""
    goals, first = pub.get("goals") or {}, pub.get("h100-first-run") or {}
    if not goals:
        return "", {}
    same_gpu = str(first.get("gpu") or "") in gpu.upper()
    rn_first = max((first.get("resnet50_batch256_img_s") or {}).items(), key=lambda kv: kv[1], default=None)
    mfu_first = max((first.get("gpt2_124m_mfu") or {}).items(), key=lambda kv: kv[1], default=None)
    tok = first.get("gpt2_124m_tok_s") or {}
    # Over bf16, as every FP8 ratio of the page (runner/kit/transformer.py BASE): 337,807 / 389,224 = 0.87x.
    fp8_first = (tok["fp8 tensorwise"] / tok[BASE]) if tok.get("fp8 tensorwise") and tok.get(BASE) else None

    resnet = [*((doc.get("headline") or {}).get("rows") or []), *(doc.get("resnet50-fastest") or [])]
    rn = best(resnet, "mean")
    gpt = best([*(doc.get("gpt2") or []), *(doc.get("gpt2-levers") or [])], "mfu")
    fp8_rows = [r for r in doc.get("fp8-by-size") or [] if r.get("model") == goals.get("fp8_model")]
    fp8 = max((r for r in fp8_rows if isinstance(r.get("ratio_to_bf16"), float) and math.isfinite(r["ratio_to_bf16"])),
              key=lambda r: r["ratio_to_bf16"], default=None)

    t = Table(["goal", "target", "first run on an H100 (27 Nov 2026)", "this page", "verdict"],
              align=["l", "r", "l", "l", "l"])
    out: dict[str, Any] = {}
    target = float(goals["resnet50_img_s"])
    rn_n = int(rn["n"]) if rn else 0
    said = verdict(rn["mean"] if rn else None, target, rn_n, rn.get("std") if rn else None, family(resnet),
                   str(rn.get("statuses") or "") if rn else "")
    t.add("ResNet-50 img/s, one GPU", f"{target:,.0f}",
          f"{rn_first[1]:,} ({rn_first[0]}, one repeat)" if rn_first else DASH,
          f"{rn['mean']:,.0f} (n={rn_n}; {settings(rn['params'])}, batch {rn['params'].get('batch_size')})" if rn
          else DASH, said)
    out["resnet50_img_s"] = {"target": target, "first_run": rn_first[1] if rn_first else None,
                             "best": rn["mean"] if rn else None, "n": rn_n, "verdict": said}
    target = float(goals["gpt2_124m_mfu"])
    gpt_n = int(gpt["n"]) if gpt else 0
    said = verdict(gpt["mfu"] if gpt else None, target, gpt_n, gpt.get("mfu_std") if gpt else None,
                   family([*(doc.get("gpt2") or []), *(doc.get("gpt2-levers") or [])]),
                   str(gpt.get("statuses") or "") if gpt else "")
    t.add("GPT-2 124M MFU (BF16 dense peak)", f"{target:.0%}",
          f"{mfu_first[1]:.1%} ({mfu_first[0]}, compiled, one repeat)" if mfu_first else DASH,
          f"{gpt['mfu']:.1%} (n={gpt_n}; {settings(gpt['params'])})" if gpt else DASH, said)
    out["gpt2_124m_mfu"] = {"target": target, "first_run": mfu_first[1] if mfu_first else None,
                            "best": gpt["mfu"] if gpt else None, "n": gpt_n, "verdict": said}
    target = float(goals["fp8_over_bf16"])
    ratio = fp8["ratio_to_bf16"] if fp8 else None
    said = ratio_verdict(fp8, target, len(fp8_rows))
    t.add(f"FP8 ÷ {BASE} at {goals['fp8_model']}, same loss", f"{target:.1f}x",
          f"{fp8_first:.2f}x at gpt2_124m (tensorwise, one repeat)" if fp8_first else DASH,
          f"{ratio:.2f}x ({fp8['params'].get('fp8_recipe')}; losses in the FP8-by-size table)" if fp8 else DASH, said)
    out["fp8_over_bf16"] = {"target": target, "model": goals["fp8_model"], "best": ratio, "verdict": said}
    lines = ["## Goals on one H100", "",
             "The kit's goals beside the first run on an H100 (the benchmark run directly, one repeat a row) and this "
             "page's best admitted figure: met only where the 95% interval of the row's mean (of FP8's ratio to BF16) "
             f"lies at or above the goal, so never from one repeat nor beside a repeat that did not end ok; at least "
             f"{LEAST} admitted repeats a row."
             + ("" if same_gpu else " This GPU is not an H100: the first run's figures are another GPU's."),
             "", _md(t)]
    return "\n".join(lines), out
