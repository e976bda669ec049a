"""How cells, keys and values are written in every table: shared by the report's views and `matrix compare`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.domain.cells import LAYOUT_AXES
from runner.report import fmt
from runner.report.fmt import DASH, TableCell

KEY_LABELS = {"environment": "environment", "model": "model", "precision": "precision", "batch_size": "batch",
              "dataset": "dataset", "gpus": "GPUs", "nodes": "nodes", "options": "options",
              "machine": "machine"}


def varying(df: pd.DataFrame, keys: Sequence[str], always: Sequence[str] = ()) -> list[str]:
    """The key columns worth a table column: those that vary, plus the ones always shown."""
    return [k for k in keys if k in always or (k in df and df[k].nunique(dropna=False) > 1)]


def constants_note(df: pd.DataFrame, keys: Sequence[str]) -> str:
    """The key values every row shares, said once under the table instead of in a column."""
    parts = []
    for k in keys:
        if k not in df or df.empty or df[k].nunique(dropna=False) != 1:
            continue
        v = df[k].iloc[0]
        if k in ("options", "dataset") and not v:  # a workload's cells have no dataset: no empty segment
            continue
        if k in LAYOUT_AXES:
            if v == 1:  # one process is the default layout: not worth a remark (and CPU runs have no GPU)
                continue
            cpu = all(on_cpu(r) for r in df.to_dict("records"))
            parts.append(processes(v, cpu) if k == "gpus" else f"{v} node{'s' if v != 1 else ''}")
        elif k == "options":
            parts.append(str(v))
        else:
            parts.append(f"{KEY_LABELS[k]} {v}")
    return ", ".join(parts)


def key_text(k: str, v: Any) -> str:
    return str(v) if v != "" else DASH


def not_ok(statuses: str) -> str:
    """The non-ok part of a status summary: '1 failed' out of '2 ok, 1 failed'."""
    return ", ".join(p for p in statuses.split(", ") if p and not p.endswith(" ok"))


def cell_value(row: Any, m: an.Metric) -> TableCell:
    """A grid cell: mean ± std of the ok repeats, with the repeats that were not ok counted beside it."""
    n = int(row[f"{m.name}_n"])
    bad = not_ok(row["statuses"])
    if int(row["n_ok"]) == 0:
        # Coloured by the worst outcome: a diverged training red, repeats admission refused magenta.
        worst = next((w for w in ("diverged", "refused") if f" {w}" in f" {bad}"), "status")
        return TableCell(bad or DASH, worst)
    if n == 0:
        return TableCell(DASH, "muted")
    text = fmt.metric_value(m, row[f"{m.name}_mean"], row[f"{m.name}_std"], n)
    hot = int(row.get("throttled") or 0) if m.throttle_sensitive else 0
    if hot:
        text += f" ({hot} throttled)"
    if bad:
        return TableCell(f"{text} ({bad})", "num partial")
    return TableCell(text, "num partial" if hot else "num")




def on_cpu(row: Any) -> bool:
    """Whether a cell (a pandas row or a record) ran on a CPU device: a column, or one of its options."""
    return str(row.get("device", "")) == "cpu" or "device=cpu" in str(row.get("options", "")).split()


def processes(n: Any, cpu: bool) -> str:
    """The `gpus` axis in words: one rank per GPU, or per process on a CPU device."""
    word = "rank" if cpu else "GPU"
    return f"{n} {word}{'s' if n != 1 else ''}"


def cell_label(row: Any, keys: Sequence[str] = an.CELL_KEYS) -> str:
    parts = []
    for k in keys:
        v = row[k]
        if k in LAYOUT_AXES and (v == 1 or v in ("", None)):  # one process (or none recorded): not worth a word
            continue
        if k in ("options", "dataset") and not v:  # a workload's cells have no dataset: no empty segment
            continue
        if k == "gpus":
            parts.append(processes(v, on_cpu(row)))
            continue
        parts.append(f"batch {v}" if k == "batch_size" else f"{v} nodes" if k == "nodes" else str(v))
    return " · ".join(parts)


def iso(ts: Any) -> str:
    """A stored epoch time as '2026-11-23 18:28 UTC'."""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(ts)))
    except (TypeError, ValueError, OverflowError):
        return DASH


def definitions_sentence(n_names: int, pooled: bool = False, where: str = "") -> str:
    """What a table does with names measured under more than one definition, in one sentence."""
    cells = f"{n_names} cell{'s' if n_names != 1 else ''}{f' of {where}' if where else ''}"
    was = "was" if n_names == 1 else "were"
    if pooled:
        return (f"{cells} {was} measured under more than one definition (another environment definition or run "
                "settings under the same name) and their repeats are pooled, as asked (--pool).")
    return (f"{cells} {was} measured under more than one definition (another environment definition or run "
            "settings under the same name): the tables show each one's newest definition, never a mix; the "
            "definitions are listed with their repeats.")


def unique_prefixes(ids: Sequence[str], least: int = 8) -> dict[str, str]:
    """Each store id shortened to at least `least` characters, longer where that would name another too (a store
    id may begin another's: `abcd1234` and `abcd1234-x`)."""
    out = {}
    for i in ids:
        n = least
        while n < len(i) and any(o != i and o[:n] == i[:n] for o in ids):
            n += 1
        out[i] = i[:n]
    return out


def machines(df: pd.DataFrame) -> pd.Series:
    """Per row, the machine it was measured on: its hardware, told apart by the store it was imported from
    (a run id's '@<store id>') when two stores measured the same hardware. A repeat that stopped before the
    hardware was recorded takes its cell's."""
    if df.empty:
        return pd.Series([], index=df.index, dtype=object)
    origin = df["run_id"].map(lambda r: str(r).rpartition("@")[2] if "@" in str(r) else "")
    hw = df["hardware"].fillna("").astype(str)
    known = hw.where(hw != "").groupby(df["cell_key"]).transform("first").fillna("")
    hw = hw.where(hw != "", known).replace("", "device unknown")
    pairs = pd.DataFrame({"hw": hw, "origin": origin}).drop_duplicates()
    shared = set(pairs["hw"][pairs["hw"].duplicated(keep=False)])
    short = unique_prefixes(sorted({o for o in pairs["origin"] if o}))
    label = {(h, o): (f"{h} @{short[o]}" if o else f"{h} (this store)") if h in shared else h
             for h, o in pairs.itertuples(index=False)}
    return pd.Series(list(zip(hw.tolist(), origin.tolist(), strict=True)), index=df.index, dtype=object).map(label)
