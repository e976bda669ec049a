"""Precision summary: per environment, each precision against fp32 in the same configuration."""

from __future__ import annotations

from typing import Any

import pandas as pd

from runner import analysis as an
from runner.report import fmt, tone
from runner.report.fmt import DASH, Section, Table, TableCell
from runner.report.labels import KEY_LABELS, cell_value, constants_note, key_text, varying
from runner.report.viewkit import Built, Context, View


class PrecisionView(View):
    name = "precision"
    order = 20
    heading = "Precision summary"
    intro = "Each precision against fp32 in the same environment and configuration (“÷ fp32”: the value over fp32’s)."
    intro_md = "Each precision against fp32 in the same environment and configuration (`÷ fp32`: the value over fp32's)."

    def build(self, ctx: Context) -> Built:
        prec = an.precision_summary(ctx.summary)
        return Built(self, precision_sections(ctx.info, prec, ctx.summary, tones(ctx.families)), prec)

    def json(self, built: Built) -> dict[str, Any]:
        return {"precision_summary": fmt.records(built.frame)}


def hardware_of(info: pd.DataFrame, env: str) -> str:
    hw = info.loc[info["environment"] == env, "hardware"]
    return str(hw.iloc[0]) if len(hw) else ""




KEYS = ("model", "batch_size", "dataset", "gpus", "nodes", "options")


def tones(families: Any) -> dict[tuple[Any, ...], str]:
    """Each precision's throughput against fp32 as the decision core judged the pair (runner/report/pairs.py's
    families): the ÷ fp32 column takes its verdict's colour, by environment, precision and configuration."""
    if families is None:
        return {}
    m = an.METRICS["throughput"]
    # A pair its failures decided: its ratio is of the ok repeats only, shown uncoloured (the verdict is elsewhere).
    return {(env, b, *(r[k] for k in KEYS)): tone.Tone.NONE.value if tone.by_outcomes(r) else tone.of_pair(r, m).value
            for env, _, b, pairs in families.precisions for r in pairs.to_dict("records")}


def precision_sections(info: pd.DataFrame, prec: pd.DataFrame, summary: pd.DataFrame | None = None,
                       judged: dict[tuple[Any, ...], str] | None = None) -> list[Section]:
    """Precision summary: per environment, time, throughput, memory and accuracy with ratios to fp32; each metric
    headed with the units of the environment's cells (`summary`'s unit_<m>: a transformer's throughput is tok/s)."""
    if prec.empty:
        return []
    sections = []
    keys = varying(prec, ["model", "batch_size", "dataset", "gpus", "nodes", "options"],
                   always=("model", "batch_size"))
    metric_cols = [(m.name, m.vs_fp32) for m in an.METRICS.shown("precision_table") if (prec[f"{m.name}_n"] > 0).any()]
    for env, g in prec.groupby("environment", sort=False):
        cols = [KEY_LABELS[k] for k in keys] + ["precision"]
        mine = summary[summary["environment"] == env] if summary is not None and "environment" in summary else None
        for m, with_ratio in metric_cols:
            units = mine[f"unit_{m}"] if mine is not None and f"unit_{m}" in mine else None
            cols.append(an.metric_heading(m, units) if units is not None else an.METRICS[m].heading)
            if with_ratio:
                cols.append("÷ fp32")
        table = Table(cols, align=["l"] * (len(keys) + 1) + ["r"] * (len(cols) - len(keys) - 1))
        for r in g.to_dict("records"):
            cells: list[TableCell | str] = [*(key_text(k, r[k]) for k in keys), str(r["precision"])]
            for m, with_ratio in metric_cols:
                metric = an.METRICS[m]
                cells.append(cell_value(r, metric))
                if with_ratio:
                    verdict = (judged or {}).get((env, r["precision"], *(r[k] for k in KEYS)), "") \
                        if m == "throughput" else ""
                    cells.append(TableCell(fmt.ratio(r[f"{m}_vs_fp32"]) if r["precision"] != "fp32" else DASH,
                                           f"num {verdict}".strip()))
            table.add(*cells)
        hardware = hardware_of(info, str(env))
        same = constants_note(g, ["dataset", "gpus", "nodes", "options"])
        sections.append(Section(f"{env} · {hardware}" if hardware else str(env), table,
                                f"All rows: {same}." if same else ""))
    return sections


