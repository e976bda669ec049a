"""The evidence page's sections for issue 38's levers: ResNet-50's fastest step (the headline's fastest beside
max-autotune and the FP16 step with a static loss scale as one CUDA graph, at two batches) and GPT-2 124M with one
lever more a row (AdamW fused, the chunked cross-entropy, flash or cuDNN attention, the whole step as one CUDA graph),
each row over the one before with Welch's p-value and the decision `matrix compare` gives (runner/kit/transformer.py
`versus`), and the loss at a step every row reached (a lever must not change the training)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.kit import transformer
from runner.kit.cell_results import MIB, CellResult, _md, _ratio
from runner.report import fmt
from runner.report.fmt import DASH, Table

# The cell's settings a row names, in this order (a value of False, None or a default is left out).
SHOWN = ("precision", "loss_scale", "optimizer", "optimizer_impl", "channels_last", "compile", "compile_mode",
         "cuda_graphs", "loss_impl", "attention", "checkpoint")
DEFAULTS = {"compile_mode": "default", "optimizer": "sgd", "optimizer_impl": "auto", "loss_impl": "plain",
            "attention": "auto"}


def settings(params: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    on = [f"{k}={params[k]}" for k in SHOWN if k in params and k not in skip
          and params[k] not in (False, None, DEFAULTS.get(k))]
    return ", ".join(on) or "plain"


def added(params: Mapping[str, Any], before: Mapping[str, Any] | None) -> str:
    """What this row changes from the row before it ('—' for the first)."""
    if before is None:
        return DASH
    changed = [f"{k}={params.get(k)}" for k in SHOWN if params.get(k) != before.get(k)]
    return ", ".join(changed) or DASH


def reasons(cells: Sequence[CellResult]) -> list[str]:
    """One line per row that did not run, with its reason (a lever this device or torch lacks says so)."""
    out = []
    for res in cells:
        why = sorted({r.reason for r in res.rows if not r.ok and r.reason})
        if why:
            out.append(f"- {settings(res.cell.params)} (batch {res.cell.params.get('batch_size')}): "
                       f"{'; '.join(why)[:300]}")
    return out


def resnet_fastest_section(cells: list[CellResult], mlperf: float | None, doc: dict[str, Any]) -> str:
    """Rows in the plan's order, the headline's fastest first: img/s, each row over the first (same batch or not)
    with p and decision, over MLPerf's per-GPU figure, peak memory, the loss at a step every row reached."""
    if not cells:
        return ""
    first = cells[0]
    step = transformer.common_step(cells)
    t = Table(["settings", "batch", "img/s (mean ± std)", "CV", "÷ first row", "p (Welch)", "decision", "÷ MLPerf",
               f"loss at step {step or DASH}", "peak memory (MiB)", "status"], align=["l"] + ["r"] * 9 + ["l"])
    rows = []
    for res in cells:
        st = res.stats("throughput")
        vs = transformer.versus(res, first)
        t.add(settings(res.cell.params), str(res.cell.params.get("batch_size")), res.text("throughput"),
              fmt.percent(st.cv) if st.n >= 2 else DASH, fmt.ratio(vs["ratio"]), fmt.p_value(vs["p_value"]),
              vs["words"] or DASH, _ratio(st.mean, float(mlperf)) if mlperf else DASH,
              transformer.loss_at(res, step), res.text("peak_mem", 1 / MIB), res.statuses or DASH)
        rows.append({"params": res.cell.params, "n": st.n, "mean": st.mean, "std": st.std, "cv": st.cv,
                     "ratio_to_first": vs["ratio"], "p_value": vs["p_value"], "decision": vs.get("decision"),
                     "loss_step": step, "statuses": res.statuses})
    doc["resnet50-fastest"] = rows
    lines = ["## ResNet-50 fastest: max-autotune and the FP16 step as one CUDA graph", "",
             "The first row is the headline's fastest (bf16 autocast, fused SGD, the whole step as one CUDA graph, "
             "torch.compile); the others compile with max-autotune (inside the whole-step graph it runs without CUDA "
             "graphs of its own: `max-autotune-no-cudagraphs`, recorded) and train in FP16 with a static loss scale "
             "of 256 instead of a GradScaler, so no host decision breaks the graph (the 2018 recipe's mechanism, here "
             "with autocast), at batch 256 and a larger one. `÷ first row` is each row's mean over the first's, with "
             "Welch's p-value and the decision `matrix compare` gives; the loss is each row's at the latest step all "
             "of them kept.", "", _md(t)]
    return "\n".join(lines + ([""] + reasons(cells) if reasons(cells) else []))


def gpt2_levers_section(cells: list[CellResult], doc: dict[str, Any]) -> str:
    """One lever more a row: tok/s, the row over the one before (p, decision) and over the first, MFU, the loss at a
    step every row reached, peak memory."""
    if not cells:
        return ""
    params = cells[0].cell.params
    u = transformer.unit(cells)
    step = transformer.common_step(cells)
    t = Table(["added", "settings", f"{u} (mean ± std)", "CV", "÷ row before", "p (Welch)", "decision",
               "÷ first row", "MFU (%)", f"loss at step {step or DASH}", "peak memory (MiB)", "status"],
              align=["l", "l"] + ["r"] * 9 + ["l"])
    rows, before = [], None
    for res in cells:
        st = res.stats("throughput")
        vs = transformer.versus(res, before)
        total = transformer.versus(res, cells[0])
        t.add(added(res.cell.params, before.cell.params if before else None),
              settings(res.cell.params, skip=("precision",)), res.text("throughput"),
              fmt.percent(st.cv) if st.n >= 2 else DASH, fmt.ratio(vs["ratio"]), fmt.p_value(vs["p_value"]),
              vs["words"] or DASH, fmt.ratio(total["ratio"]), res.text("mfu", 100.0), transformer.loss_at(res, step),
              res.text("peak_mem", 1 / MIB), res.statuses or DASH)
        rows.append({"params": res.cell.params, "unit": u, "n": st.n, "mean": st.mean, "std": st.std,
                     "ratio_to_before": vs["ratio"], "p_value": vs["p_value"], "decision": vs.get("decision"),
                     "ratio_to_first": total["ratio"], "mfu": res.mean("mfu"), "mfu_std": res.stats("mfu").std,
                     "loss_step": step,
                     "statuses": res.statuses})
        before = res
    doc["gpt2-levers"] = rows
    lines = [f"## GPT-2 124M levers ({params.get('model')}, {params.get('seq_len')} tokens x batch "
             f"{params.get('batch_size')}, {params.get('precision')}, torch.compile "
             f"{'on' if params.get('compile') else 'off'})", "",
             f"Throughput in {u}, one lever more a row: AdamW fused (betas 0.9/0.95, weight decay 0.1 on the matrices "
             "only, as GPT-2 trains; the first row trains with SGD), the chunked cross-entropy (the output projection "
             "and the loss a chunk of tokens at a time: the 50,304-wide logits are never held whole), a forced "
             "attention backend, the whole step as one CUDA graph. `÷ row before` is each row's mean over the row "
             "above, with Welch's p-value and the decision `matrix compare` gives; MFU counts 6N + 12·L·d·T FLOPs "
             "a token whatever the levers (checkpointing's recomputation is not counted). The loss is each row's at "
             "the latest step all of them kept: AdamW trains differently from SGD, the other levers must not change "
             "it beyond rounding.", "", _md(t)]
    return "\n".join(lines + ([""] + reasons(cells) if reasons(cells) else []))
