"""Scaling in the write-ups' shape: throughput over nodes and processes, speedup and efficiency."""

from __future__ import annotations

import pandas as pd

from runner import analysis as an
from runner.report import fmt
from runner.report.fmt import Section, Table, TableCell
from runner.report.labels import KEY_LABELS, key_text, varying
from runner.report.viewkit import Built, Context, View


class ScalingView(View):
    name = "scaling"
    order = 30
    heading = "Scaling"
    titled = False

    def build(self, ctx: Context) -> Built:
        scale = an.scaling(ctx.summary)
        return Built(self, scaling_sections(scale), scale)


def scaling_sections(scale: pd.DataFrame) -> list[Section]:
    """Scaling in the write-ups' shape: nodes, processes per node and in all, throughput overall (and forward,
    backward where measured) headed with the rows' unit, speedup over the smallest layout and efficiency."""
    if scale.empty:
        return []
    keys = varying(scale, ["environment", "model", "precision", "batch_size", "dataset", "options"],
                   always=("environment", "model", "precision", "batch_size"))
    m = an.METRICS["throughput"]
    phases = [an.METRICS[p] for p in ("fwd_throughput", "bwd_throughput") if (scale[f"{p}_n"] > 0).any()]
    table = Table([*(KEY_LABELS[k] for k in keys), "nodes", "per node", "processes",
                   *(an.metric_heading(x.name, scale.get(f"unit_{x.name}", ())) for x in (m, *phases)),
                   "speedup", "efficiency"],
                  align=["l"] * len(keys) + ["r"] * (6 + len(phases)))
    for r in scale.to_dict("records"):
        table.add(*(key_text(k, r[k]) for k in keys), TableCell(str(r["nodes"]), "num"), TableCell(str(r["gpus"]), "num"),
                  TableCell(str(r["processes"]), "num"),
                  TableCell(fmt.metric_value(m, r["throughput_mean"], r["throughput_std"], int(r["throughput_n"])),
                       "num"),
                  *(TableCell(fmt.metric_value(p, r[f"{p.name}_mean"], r[f"{p.name}_std"], int(r[f"{p.name}_n"])),
                         "num") for p in phases),
                  TableCell(fmt.ratio(r["speedup"]), "num"), TableCell(fmt.percent(r["efficiency"]), "num"))
    note = ("Per node: GPUs, or processes on CPU nodes (one rank each). Speedup is overall throughput over "
            "the same configuration's smallest layout; efficiency is speedup over the growth in processes "
            "from that layout. Batch size is per process, so the global batch grows with the processes.")
    if phases:
        note += (" Forward and backward are the window's images over rank 0's time in that phase (bench "
                 "--breakdown, synchronised after every phase; backward includes the gradient all-reduce).")
    return [Section("Scaling", table, note)]


