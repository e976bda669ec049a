"""The evidence page's first section: ResNet-50's plain eager recipe beside its fastest honest settings, against
the published figures (a PyTorch recipe, and MLPerf's tuned code), and which AMP row is the fastest.

The fastest row is named only among rows whose spread is known (two ok repeats or more): a one-repeat cell can be
fast by chance, and its CV says nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner import analysis as an
from runner.kit.cell_results import CellResult, _md, _ratio
from runner.report import fmt
from runner.report.fmt import DASH, Table

AMP = ("amp", "amp-bf16")
LEVERS = ("precision", "channels_last", "cudnn_benchmark", "optimizer_impl", "compile", "compile_mode",
          "cuda_graphs")


def fastest_amp(results: Sequence[CellResult], least: int = 2) -> CellResult | None:
    """The AMP row (amp or amp-bf16) of the highest mean throughput among those with at least `least` ok
    repeats; None when no row has that many."""
    rows = [r for r in results if r.cell.params.get("precision") in AMP and r.stats("throughput").n >= least]
    return max(rows, key=lambda r: r.stats("throughput").mean, default=None)


def levers(params: dict[str, Any]) -> str:
    on = [f"{k}={params[k]}" for k in LEVERS if k in params and params[k] not in (False, None, "default")]
    return ", ".join(on)


def auto_ran(res: CellResult) -> str:
    """What a row that leaves the optimizer to `auto` ran, from its repeats' precision record, with what became of
    them: auto is the benchmark's choice when the repeat ran, not part of the cell's key, and it changed (fused SGD
    under FP16's GradScaler until it was found to corrupt momentum on the steps the scaler skips: foreach since), so
    a row whose repeats ran different optimizers says so. '' for a row that names its optimizer_impl."""
    if str(res.cell.params.get("optimizer_impl", "auto")) != "auto":
        return ""
    ran: dict[str, dict[str, int]] = {}
    for r in res.rows:
        impl = (r.env.get("precision_flags") or {}).get("optimizer")
        if impl:
            counts = ran.setdefault(str(impl), {})
            counts[r.status] = counts.get(r.status, 0) + 1
    if not ran:
        return ""
    parts = "; ".join(f"{impl} ({an.status_summary(counts)})" for impl, counts in ran.items())
    return (f"optimizer_impl auto ran different optimizers in its repeats: {parts}" if len(ran) > 1
            else f"optimizer_impl auto ran {parts}")


def section(cells: list[CellResult], grid: list[CellResult], pub: tuple[str, float] | None,
            mlperf: float | None, doc: dict[str, Any]) -> str:
    """The headline's table (rows in the plan's order, the plain recipe first) and the fastest AMP row of the
    headline and the precision grid; its numbers go into doc["headline"]."""
    if not cells:
        return ""
    plain = cells[0]
    base = plain.stats("throughput").mean
    t = Table(["settings", "img/s (mean ± std)", "CV", "÷ plain eager", "÷ published recipe", "÷ MLPerf", "status"],
              align=["l"] + ["r"] * 5 + ["l"])
    rows: list[dict[str, Any]] = []
    for res in cells:
        st = res.stats("throughput")
        t.add(levers(res.cell.params), res.text("throughput"), fmt.percent(st.cv) if st.n >= 2 else DASH,
              _ratio(st.mean, base), _ratio(st.mean, pub[1]) if pub else DASH,
              _ratio(st.mean, float(mlperf)) if mlperf else DASH, res.statuses or DASH)
        rows.append({"params": res.cell.params, "n": st.n, "mean": st.mean, "std": st.std, "cv": st.cv,
                     "statuses": res.statuses, "reasons": sorted({r.reason for r in res.rows if not r.ok and r.reason}),
                     "optimizer_auto": auto_ran(res)})
    best = fastest_amp(cells + grid)
    doc["headline"] = {"rows": rows, "fastest": best.cell.params if best else None}
    lines = [f"## Headline: ResNet-50 at batch {plain.cell.params['batch_size']}, plain eager and fastest", "",
             "The first row is the plain eager recipe (autocast, channels_last, cudnn.benchmark, the default "
             "optimizer); the others turn on the speed levers named in their settings, each part of the cell's "
             "definition. A lever this torch or device lacks makes its row `unsupported`, with the reason. The "
             "default optimizer (`auto`) is the benchmark's choice when a repeat ran, not part of the cell's "
             "definition: each row that leaves it to auto says below which one its repeats ran.", "",
             _md(t)]
    for r in rows:
        said = [r["optimizer_auto"]] if r["optimizer_auto"] else []
        if r["reasons"]:
            said.append("; ".join(r["reasons"])[:300])
        if said:
            lines += ["", f"- {levers(r['params'])}: {'; '.join(said)}"]
    if best is not None:
        st = best.stats("throughput")
        lines += ["", f"Fastest AMP row with a known spread ({st.n} repeats): {levers(best.cell.params)}, "
                  f"{fmt.mean_std(st.mean, st.std, st.n)} img/s"
                  + (f", {st.mean / float(mlperf):.0%} of MLPerf's {float(mlperf):,.0f}" if mlperf else "") + "."]
    else:
        lines += ["", "No AMP row has two ok repeats yet: the fastest is not named from one repeat."]
    if mlperf:
        lines += ["", "MLPerf's figure comes from tuned MXNet code reading data through DALI with the whole step in "
                  "CUDA graphs and fused kernels written for it; this page's gap to it is what PyTorch's own "
                  "levers do not close."]
    return "\n".join(lines)
