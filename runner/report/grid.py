"""The precision grid: per environment and configuration, rows precision × metric, columns batch size.

A loss or an accuracy sits beside another only when both come after the same number of training steps: where a
block's windows differ (calibrated windows, warm-ups until steady), the loss is shown at the last step every ok
repeat of the block recorded (bench's loss_at, runner/analysis/comparable.py), and otherwise each value carries
its step count and the section says the row is not comparable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from runner import analysis as an
from runner.analysis.comparable import common_step, unit_of
from runner.domain.outcomes import Status
from runner.report.fmt import DASH, Section, Table, TableCell
from runner.report.labels import cell_label, cell_value

GROUP = ("environment", "model", "dataset", "gpus", "nodes", "options")


def _steps(ok: pd.DataFrame) -> set[int]:
    return {int(s) for s in ok["steps"] if _counted(s)} if "steps" in ok else set()


def _counted(steps: Any) -> bool:
    """Whether a repeat's `steps` is a count (not missing, not NaN)."""
    return isinstance(steps, int | float) and steps == steps


def per_step_rows(cells: list[dict[str, Any]], shown: pd.DataFrame | None, metric: an.Metric,
                  steps_of: _Steps | None = None) -> tuple[list[dict[str, Any]], str, str]:
    """The block's rows for a loss or accuracy: (rows to show, the row's label, a note). Unchanged when every ok
    repeat trained as many steps; the loss at a common step when they differ; else the step count in each value
    and a note that the figures are not comparable. `steps_of`: the steps of `shown`'s cells read once (a grid of
    many blocks), so that a block whose repeats all trained as many steps reads no rows."""
    if shown is None or shown.empty or "cell_key" not in shown:
        return cells, metric.heading, ""
    keys = {str(r["cell_key"]) for r in cells}
    if steps_of is not None and len(steps_of.of(metric, keys)) <= 1:
        return cells, metric.heading, ""
    read = shown[[c for c in ("cell_key", "status", metric.name, "steps", "loss_at") if c in shown]]  # not every column
    ok = read[read["cell_key"].isin(keys) & (read["status"] == Status.OK.value) & read[metric.name].notna()]
    steps = _steps(ok)
    if len(steps) <= 1:
        return cells, metric.heading, ""
    step = common_step(list(ok["loss_at"])) if metric.ladder and "loss_at" in ok else None
    out = []
    for r in cells:
        own = ok[ok["cell_key"] == r["cell_key"]]
        if step is not None:
            values = np.asarray([d[step] for d in own["loss_at"]], dtype=float)
            std = float(values.std(ddof=1)) if values.size > 1 else float("nan")
            out.append({**r, f"{metric.name}_mean": float(values.mean()) if values.size else float("nan"),
                        f"{metric.name}_std": std, f"{metric.name}_n": int(values.size)})
        else:
            out.append({**r, "_steps": ", ".join(map(str, sorted(_steps(own))))})
    if step is not None:
        return out, f"loss at step {step}", (f"The {metric.label} is shown at step {step}, the last every repeat "
                                             f"recorded: the windows trained {', '.join(map(str, sorted(steps)))} "
                                             "steps.")
    return out, f"{metric.heading} (not comparable)", (
        f"The {metric.label} values are not comparable across precisions: they come after "
        f"{', '.join(map(str, sorted(steps)))} training steps and no step was recorded by every repeat; compare them "
        "at fixed iterations.")


def grid_sections(summary: pd.DataFrame, shown: pd.DataFrame | None = None) -> list[Section]:
    """Precision grid: per environment and configuration, rows precision × metric, columns batch size."""
    blocks: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in summary.to_dict("records"):  # summary order: environment, configuration, precision, batch
        blocks.setdefault(tuple(r[k] for k in GROUP), []).append(r)
    sections = []
    units = _Units(shown) if shown is not None and "cell_key" in shown else None
    steps_of = _Steps(shown) if shown is not None and "cell_key" in shown else None
    for cells in blocks.values():
        first = cells[0]
        batches = sorted({int(r["batch_size"]) for r in cells})
        metrics = ([m for m in an.METRICS.shown("grid") if any(r[f"{m.name}_n"] > 0 for r in cells)]
                   or [an.METRICS["throughput"]])
        table = Table(["precision", "metric", *(f"batch {b}" for b in batches)],
                      align=["l", "l", *("r" * len(batches))])
        shown_rows: dict[str, tuple[list[dict[str, Any]], str]] = {}
        notes = []
        for m in metrics:
            if m.per_step:
                rows, label, note = per_step_rows(cells, shown, m, steps_of)
                shown_rows[m.name] = (rows, label)
                notes += [note] if note else []
        by_precision: dict[str, dict[int, int]] = {}
        for i, r in enumerate(cells):
            by_precision.setdefault(str(r["precision"]), {})[int(r["batch_size"])] = i
        for precision, by_batch in by_precision.items():
            for j, m in enumerate(metrics):
                # Each precision's row says the unit of its own figures (a block may hold several); a row with no
                # figure (every repeat unsupported) the block's.
                own = [cells[i] for i in by_batch.values()]
                heading = _heading(m, own, shown, units) if any(r[f"{m.name}_n"] > 0 for r in own) else _heading(
                    m, cells, shown, units)
                rows, label = shown_rows.get(m.name, (cells, heading))
                row = [_value(rows[by_batch[b]], m) if b in by_batch else TableCell(DASH, "muted") for b in batches]
                table.add(TableCell(precision if j == 0 else "", "key"), TableCell(label), *row,
                          row_class="group" if j == 0 else "")
        env, hardware = str(first["environment"]), str(first["hardware"])
        if env.endswith(f" · {hardware}"):  # an environment named after the machine it ran on (views.by_machine)
            hardware = ""
        title = " · ".join(p for p in (env, hardware,
                                       cell_label(first, ["model", "dataset", "gpus", "nodes", "options"])) if p)
        sections.append(Section(title, table, " ".join(notes)))
    return sections


class _Steps:
    """Per cell key, the step counts its ok repeats with a figure of a metric trained (what `_steps` reads of a block's
    rows), read once per metric."""

    def __init__(self, shown: pd.DataFrame) -> None:
        self.shown = shown
        self.by_metric: dict[str, dict[str, set[int]]] = {}

    def of(self, m: an.Metric, keys: set[str]) -> set[int]:
        if m.name not in self.by_metric:
            found: dict[str, set[int]] = {}
            shown = self.shown
            if "steps" in shown and m.name in shown:
                ok = ((shown["status"] == Status.OK.value) & shown[m.name].notna()).to_numpy()
                for key, s, good in zip(shown["cell_key"].tolist(), shown["steps"].tolist(), ok.tolist(), strict=True):
                    if good and _counted(s):
                        found.setdefault(str(key), set()).add(int(s))
            self.by_metric[m.name] = found
        seen = self.by_metric[m.name]
        return {s for k in keys for s in seen.get(k, ())}


class _Units:
    """Where each unit of a metric first appears among each cell's ok rows of `shown`, read once: a block's unit is
    then what unit_of says of the block's rows (its units in the order of the rows, joined), without filtering the
    whole frame for every row of every block."""

    def __init__(self, shown: pd.DataFrame) -> None:
        self.shown = shown
        self.firsts: dict[str, dict[str, list[tuple[int, str]]]] = {}

    def of(self, m: an.Metric, keys: set[str]) -> str:
        col = f"unit_{m.name}"
        if col not in self.shown or self.shown.empty:
            return m.unit
        if m.name not in self.firsts:
            seen: dict[str, dict[str, int]] = {}
            for pos, (key, unit, status) in enumerate(zip(self.shown["cell_key"].tolist(), self.shown[col].tolist(),
                                                          self.shown["status"].tolist(), strict=True)):
                if status == "ok" and unit:
                    seen.setdefault(str(key), {}).setdefault(str(unit), pos)
            self.firsts[m.name] = {k: [(p, u) for u, p in v.items()] for k, v in seen.items()}
        found = sorted(pu for k in keys for pu in self.firsts[m.name].get(k, []))
        units = dict.fromkeys(u for _, u in found)
        return " | ".join(units) if units else m.unit


def _heading(m: an.Metric, cells: list[dict[str, Any]], shown: pd.DataFrame | None,
             units: _Units | None = None) -> str:
    """The metric's label with the unit its figures in this block are in (`unit_<m>`), never a fixed img/s."""
    if shown is None or "cell_key" not in shown:  # the summary's own units (each cell's unit_<m>, joined)
        return an.metric_heading(m.name, (r.get(f"unit_{m.name}") for r in cells))
    keys = {str(r["cell_key"]) for r in cells}
    unit = units.of(m, keys) if units is not None else unit_of(shown[shown["cell_key"].isin(keys)], m)
    return f"{m.label} ({unit})" if unit else m.label


def _value(r: dict[str, Any], m: an.Metric) -> TableCell:
    cell = cell_value(r, m)
    steps = r.get("_steps")
    return TableCell(f"{cell.text} @ {steps} steps", cell.cls) if steps and cell.text != DASH else cell
