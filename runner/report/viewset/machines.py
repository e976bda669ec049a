"""Machines side by side, as the write-ups that compare GPUs do (GPU x method x batch): one row per model,
precision and metric, one column per machine and batch size. Shown when the results come from more than one
machine (runner/report/labels.py `machines`: the hardware, and the store a result was imported from)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from runner import analysis as an
from runner.report.fmt import DASH, Section, Table, TableCell
from runner.report.labels import KEY_LABELS, cell_value, key_text, varying
from runner.report.viewkit import Built, Context, View


class MachinesView(View):
    name = "machines"
    order = 50
    heading = "Machines side by side"
    nav = "Machines"
    titled = False

    def build(self, ctx: Context) -> Built:
        if ctx.shown.empty or "machine" not in ctx.shown:
            return Built(self, [])
        first = ctx.shown.drop_duplicates("cell_key").set_index("cell_key")
        cells = ctx.summary.assign(machine=ctx.summary["cell_key"].map(first["machine"]),
                                   environment=ctx.summary["cell_key"].map(first["environment_name"]))
        if cells["machine"].nunique() < 2:
            return Built(self, [])
        section = machines_section(cells)
        if "machine_from" in first:
            came = dict(zip(first["machine"], first["machine_from"], strict=True))
            section.note += " Where each machine's results came from: " + "; ".join(
                f"{m}: {came[m]}" for m in dict.fromkeys(cells["machine"]) if came.get(m)) + "."
        return Built(self, [section], cells[["machine", *an.CELL_KEYS, "cell_key"]])


def machines_section(cells: pd.DataFrame) -> Section:
    """The table: rows (environment where it varies,) model, precision and metric; columns machine x batch.
    `cells`: the summary with each cell's machine, and its environment as the matrix named it."""
    keys = varying(cells, ["environment", "model", "precision", "dataset", "gpus", "nodes", "options"],
                   always=("model", "precision"))
    columns = list(dict.fromkeys(zip(cells["machine"], cells["batch_size"], strict=True)))
    columns.sort(key=lambda mb: (list(dict.fromkeys(cells["machine"])).index(mb[0]), mb[1]))
    metrics = [m.name for m in an.METRICS.shown("machines") if f"{m.name}_n" in cells and (cells[f"{m.name}_n"] > 0).any()]
    table = Table([*(KEY_LABELS[k] for k in keys), "metric", *(f"{m} · batch {b}" for m, b in columns)],
                  align=["l"] * (len(keys) + 1) + ["r"] * len(columns))
    previous = None
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in cells.to_dict("records"):  # once: a frame's to_dict per group costs a column read per group
        groups.setdefault(tuple("" if v is None or v != v else v for v in (r[k] for k in keys)), []).append(r)
    for name, rs in groups.items():
        by_col = {(r["machine"], r["batch_size"]): r for r in rs}
        first_row = rs[0]
        shown = [m for m in metrics if m == metrics[0] or any(r[f"{m}_n"] > 0 for r in rs)]
        for i, m in enumerate(shown):
            heading = an.metric_heading(m, [r.get(f"unit_{m}") for r in rs])
            row = [key_text(k, first_row[k]) if i == 0 else TableCell("") for k in keys]
            values = [cell_value(by_col[c], an.METRICS[m]) if c in by_col else TableCell(DASH, "muted") for c in columns]
            table.add(*row, TableCell(heading, "key"), *values,
                      row_class="group" if previous is not None and name != previous else "")
            previous = name
    note = ("Each cell: mean ± std over the repeats that ended ok on that machine, in the metric's own unit; "
            "'—': not measured there. A machine is its hardware, and the store a result was imported from when "
            "two stores measured the same hardware. To test a difference between two machines: "
            "matrix compare machine:A machine:B.")
    return Section("Machines side by side", table, note)
