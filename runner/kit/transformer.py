"""The evidence page's GPT-2 124M section: tokens per second at BF16 beside FP8 (torchao's tensorwise and rowwise
scaling), each FP8 row's ratio to BF16 with Welch's p-value and the decision `matrix compare` would give it
(runner/analysis: `welch_from_stats`, `judge_pair`), model FLOPs utilisation against the peak the result names
(a GPU's datasheet figure from the table in runner/bench/flops.py; a CPU's measured), the loss at a step every
row reached, the peak memory and what each FP8 repeat ran (its library, recipe, formats and converted layers).

Throughput is labelled with the results' own unit (tok/s), never img/s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from runner import analysis as an
from runner.analysis import change
from runner.kit.cell_results import MIB, CellResult, _md, _num
from runner.report import fmt
from runner.report.fmt import DASH, Table

# Every FP8 ratio's baseline (the 124M table's and FP8 by size's, and the goals'): pure `bf16`. runner/bench/fp8.py
# converts the linear layers alone and keeps weights, activations and the rest of the model in BF16 "as in `bf16`",
# so fp8 ÷ bf16 is the linear layers' arithmetic and nothing else; over amp-bf16 (FP32 weights, autocast) it would
# also count the weights' precision (the first H100 run: 0.87x of bf16, 0.82x of amp-bf16).
BASE = "bf16"


def unit(cells: Sequence[CellResult], default: str = "tok/s") -> str:
    """The throughput's unit as the results define it (metrics.definitions), else tok/s."""
    for res in cells:
        for r in res.ok:
            u = ((r.metrics.get("definitions") or {}).get("throughput") or {}).get("unit")
            if u:
                return str(u)
    return default


def common_step(cells: Sequence[CellResult]) -> str | None:
    """The latest step at which every ok repeat of every row kept its loss (losses compare only there)."""
    steps: set[str] | None = None
    for res in cells:
        for r in res.ok:
            have = {k for k, v in (r.metrics.get("loss_at") or {}).items()
                    if isinstance(v, int | float) and math.isfinite(v)}
            steps = have if steps is None else steps & have
    return max(steps, key=int) if steps else None


def loss_at(res: CellResult, step: str | None) -> str:
    if step is None:
        return DASH
    values = [float((r.metrics.get("loss_at") or {})[step]) for r in res.ok]
    st = an.describe(values)
    return fmt.mean_std(st.mean, st.std, st.n) if st.n else DASH


def name(params: Mapping[str, Any]) -> str:
    p = str(params.get("precision"))
    return f"{p} ({params.get('fp8_impl')}, {params.get('fp8_recipe')})" if p == "fp8" else p


def versus(res: CellResult, base: CellResult | None) -> dict[str, Any]:
    """The row's throughput over the BF16 row's: ratio, Welch's p-value and `judge_pair`'s words."""
    if base is None or res is base:
        return {"ratio": math.nan, "p_value": math.nan, "words": ""}
    a, b = base.stats("throughput"), res.stats("throughput")
    ratio = b.mean / a.mean if a.n and b.n and a.mean else math.nan
    p = float(an.welch_from_stats(a.mean, a.std, a.n, b.mean, b.std, b.n)) if a.n and b.n else math.nan
    delta = change.of_stats(a.mean, a.std, a.n, b.mean, b.std, b.n)
    _, words, decision = an.judge_pair(ratio, p, a.n, b.n, an.get_metric("throughput"), delta=delta)
    return {"ratio": ratio, "p_value": p, "words": words, "decision": str(decision.value), "ratio_low": delta.low,
            "ratio_high": delta.high}


def fp8_record(res: CellResult) -> str:
    """What an FP8 row ran (the repeats' precision record), or why it did not run."""
    for r in res.ok:
        rec = (r.env.get("precision_flags") or {}).get("fp8")
        if isinstance(rec, Mapping):
            return (f"{rec.get('library')} {rec.get('version') or ''}".strip() + f", recipe {rec.get('recipe')}, "
                    f"formats {rec.get('formats')}, scaling {rec.get('scaling')}, {rec.get('fp8_layers')} of "
                    f"{rec.get('linear_layers')} linear layers in FP8")
    reasons = sorted({r.reason for r in res.rows if not r.ok and r.reason})
    return "; ".join(reasons)[:300] or (res.statuses or "not measured yet")


def peak_text(res: CellResult) -> str:
    """The peak the row's MFU is over, named (an FP8 row's is the BF16 dense peak, as torchao and Transformer Engine
    count it), in TFLOP/s."""
    peaks = res.values("peak_flops", 1e-12)
    if not peaks:
        return DASH
    named = next((str(r.metrics["peak_name"]) for r in res.ok if r.metrics.get("peak_name")), "")
    return named or _num(sum(peaks) / len(peaks), 3 if max(peaks) < 1 else 1)


def fp8_share(res: CellResult) -> str:
    """The share of the model FLOPs that ran in FP8 (an FP8 row's converted linear layers); '—' for others."""
    shares = res.values("fp8_flops_share", 100.0)
    return f"{sum(shares) / len(shares):.0f}%" if shares else DASH


def section(cells: list[CellResult], doc: dict[str, Any]) -> str:
    """The table (rows in the plan's order, BF16 first) and the FP8 records; the numbers go into doc["gpt2"]."""
    if not cells:
        return ""
    params = cells[0].cell.params
    u = unit(cells)
    base = next((r for r in cells if r.cell.params.get("precision") == BASE), None)
    step = common_step(cells)
    t = Table(["precision", f"{u} (mean ± std)", "CV", f"÷ {BASE}", "p (Welch)", "decision", "MFU (%)",
               "FLOPs in FP8", "peak (TFLOP/s)", f"loss at step {step or DASH}", "peak memory (MiB)", "status"],
              align=["l"] + ["r"] * 10 + ["l"])
    rows = []
    for res in cells:
        st = res.stats("throughput")
        vs = versus(res, base)
        t.add(name(res.cell.params), res.text("throughput"), fmt.percent(st.cv) if st.n >= 2 else DASH,
              fmt.ratio(vs["ratio"]), fmt.p_value(vs["p_value"]), vs["words"] or DASH,
              res.text("mfu", 100.0), fp8_share(res), peak_text(res), loss_at(res, step),
              res.text("peak_mem", 1 / MIB),
              res.statuses or DASH)
        rows.append({"params": res.cell.params, "unit": u, "n": st.n, "mean": st.mean, "std": st.std, "cv": st.cv,
                     "ratio_to_bf16": vs["ratio"], "p_value": vs["p_value"], "decision": vs.get("decision"),
                     "mfu": res.mean("mfu"), "mfu_std": res.stats("mfu").std, "peak_flops": res.mean("peak_flops"),
                     "fp8_flops_share": res.mean("fp8_flops_share"),
                     "peak_mem_mib": res.mean("peak_mem", 1 / MIB), "loss_step": step,
                     "statuses": res.statuses, "fp8": fp8_record(res) if res.cell.params.get("precision") == "fp8"
                     else None})
    doc["gpt2"] = rows
    sources = sorted({str(r.metrics.get("peak_source")) for res in cells for r in res.ok
                      if r.metrics.get("peak_source")})
    formula = next((str(r.metrics.get("flops_formula")) for res in cells for r in res.ok
                    if r.metrics.get("flops_formula")), "")
    lines = [f"## GPT-2 124M: BF16 beside FP8 ({params.get('model')}, {params.get('seq_len')} tokens x batch "
             f"{params.get('batch_size')}, synthetic tokens, torch.compile "
             f"{'on' if params.get('compile') else 'off'}, attention {params.get('attention')})", "",
             f"Throughput in {u}. `÷ {BASE}` is each row's mean over the {BASE} row's, with Welch's p-value and the "
             "decision `matrix compare` gives a pair (fail: a significant change of at least "
             f"{change.threshold_text(an.MIN_EFFECT)}; undecided under two repeats a side). MFU is the model FLOP/s "
             f"(FLOPs per token: {formula or 'the formula the results name'}) over the peak the results name: the "
             "GPU's BF16 dense peak for every row, FP8's included (the convention of torchao and Transformer Engine: "
             "only the linear layers run in FP8; the share of the FLOPs they hold is beside it); the loss is every "
             "row's at the latest step all of them kept.", "", _md(t), ""]
    lines += [f"- fp8 ({r.cell.params.get('fp8_recipe')}): {fp8_record(r)}" for r in cells
              if r.cell.params.get("precision") == "fp8"]
    if sources:
        lines += [f"- peak: {s}" for s in sources]
    return "\n".join(lines).rstrip()


def by_size_section(cells: list[CellResult], doc: dict[str, Any]) -> str:
    """FP8 by size: per GPT-2 size and FP8 recipe, FP8's tok/s over bf16's (BASE) at the same size and batch, with Welch's
    p-value and the decision `matrix compare` gives, both rows' MFU, and both rows' loss at the latest step both kept
    (FP8 must win at the same loss after the same steps); the numbers go into doc["fp8-by-size"]."""
    if not cells:
        return ""
    u = unit(cells)
    t = Table(["model", "parameters", "batch x tokens", "checkpointed", "fp8 recipe", f"{BASE} {u}",
               f"fp8 {u}", f"fp8 ÷ {BASE}", "p (Welch)", "decision", "MFU bf16 / fp8 (%)", "loss at step",
               "loss bf16", "loss fp8", "status bf16 / fp8"], align=["l"] * 5 + ["r"] * 9 + ["l"])
    rows = []
    models = list(dict.fromkeys(str(r.cell.params.get("model")) for r in cells))
    for model in models:
        same = [r for r in cells if r.cell.params.get("model") == model]
        base = next((r for r in same if r.cell.params.get("precision") == BASE), None)
        for res in (r for r in same if r.cell.params.get("precision") == "fp8"):
            p = res.cell.params
            vs = versus(res, base)
            step = common_step([res, base] if base else [res])
            params_count = parameters(res.ok + (base.ok if base else []))
            t.add(model, (f"{params_count / 1e6:,.{0 if params_count >= 1e7 else 2}f}M" if params_count else DASH),
                  f"{p.get('batch_size')} x {p.get('seq_len')}", "yes" if p.get("checkpoint") else "no",
                  str(p.get("fp8_recipe")), base.text("throughput") if base else DASH, res.text("throughput"),
                  fmt.ratio(vs["ratio"]), fmt.p_value(vs["p_value"]), vs["words"] or DASH,
                  f"{base.text('mfu', 100.0) if base else DASH} / {res.text('mfu', 100.0)}", step or DASH,
                  loss_at(base, step) if base else DASH, loss_at(res, step),
                  f"{base.statuses if base else DASH} / {res.statuses or DASH}")
            rows.append({"model": model, "parameters": params_count, "params": p, "ratio_to_bf16": vs["ratio"],
                         "ratio_low": vs.get("ratio_low"), "ratio_high": vs.get("ratio_high"),
                         "p_value": vs["p_value"], "decision": vs.get("decision"), "loss_step": step,
                         "bf16_mean": base.mean("throughput") if base else None, "fp8_mean": res.mean("throughput"),
                         "fp8": fp8_record(res)})
    doc["fp8-by-size"] = rows
    lines = [f"## FP8 by size: GPT-2 124M to 1.5B, FP8 beside {BASE}", "",
             f"Each GPT-2 size compiled at {BASE} (BF16 weights and activations, as FP8 keeps them: the ratio is the "
             "linear layers' arithmetic alone) and in FP8 through torchao (tensorwise and rowwise scaling; the "
             "phase measures amp-bf16 too, in `matrix/`), "
             "at a batch that fits an 80 GB GPU (activation checkpointing where it would not: the same on both sides, "
             f"so its recomputation is in both). `fp8 ÷ {BASE}` is FP8's mean over {BASE}'s at the same size and batch, "
             "with Welch's p-value and the decision `matrix compare` gives; the losses are both rows' at the latest "
             "step both kept: FP8 wins only where it is faster at the same loss after the same steps. MFU is over the "
             "BF16 dense peak on both sides.", "", _md(t)]
    if any(r["fp8"] for r in rows):
        lines += [""] + [f"- {r['model']} fp8 ({r['params'].get('fp8_recipe')}): {r['fp8']}" for r in rows if r["fp8"]]
    return "\n".join(lines).rstrip()


def parameters(rows: Sequence[an.Repeat]) -> int | None:
    """The model's parameter count as the benchmark's workload record gives it (the result as bench printed it)."""
    for r in rows:
        count = (((r.raw or {}).get("workload") or {}).get("parameters"))
        if isinstance(count, int):
            return count
    return None
