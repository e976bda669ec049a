"""What a side's repeats say besides its figures: each precision's speed-up over fp32, how each precision ran (the
recipes), where the sides ran them differently, and each environment's hardware and versions. Beside
runner/analysis/compare.py, which shows them with every comparison."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from runner.analysis.comparable import definition_text, why_not
from runner.analysis.frame import (
    BASELINE_PRECISION,
    ENV_FIELDS,
    PARAM_KEYS,
    RECIPE_COLUMNS,
    environment_rank,
    precision_rank,
    present,
)
from runner.analysis.stats import cell_attributes
from runner.domain.outcomes import Status
from runner.record.metrics import HEADLINE, get_metric


def _sorted(df: pd.DataFrame, first: Sequence[str] = ()) -> pd.DataFrame:
    """Rows in report order: model, dataset, options, layout, precision (fp32 first), batch size."""
    if df.empty:
        return df
    cols = [c for c in (*first, "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size", "_first")
            if c in df or c == "_prec"]
    rank = precision_rank(df["precision"]) if "precision" in df else 0
    # The order from the sort keys alone, then one take of the rows: a wide frame is copied once, not three times.
    by = pd.DataFrame({c: rank if c == "_prec" else df[c] for c in cols}, index=df.index).reset_index(drop=True)
    return df.iloc[by.sort_values(cols, kind="stable").index.to_numpy()]


def precision_ratios(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per configuration, each precision's mean throughput over fp32's (the FP16/FP32 speed ratio); NaN, and `why`
    says why, where the core would not pair the two cells (run settings or the throughput's definition differ)."""
    keys = [k for k in PARAM_KEYS if k != "precision"]
    cols = ["side", *keys, "precision", "fp32_mean", "mean", "ratio", "why"]
    read = [*keys, "precision", HEADLINE, f"how_{HEADLINE}", f"unit_{HEADLINE}", "id", "settings"]
    ok = df.loc[(df["status"] == Status.OK.value) & df[HEADLINE].notna(), present(df, read)]  # not the whole frame
    if ok.empty:
        return pd.DataFrame(columns=cols)
    ok = ok.assign(_def=[definition_text(h, u) for h, u in zip(ok[f"how_{HEADLINE}"], ok[f"unit_{HEADLINE}"],
                                                                 strict=True)])
    groups = ok.groupby([*keys, "precision"], sort=False, dropna=False)
    means = groups.agg(mean=(HEADLINE, "mean"), _first=("id", "min")).reset_index()
    gid = groups.ngroup().tolist()  # the texts joined in one pass: a Python function per group costs 30x more
    means["_def"] = _joined_by_group(ok["_def"].tolist(), gid, len(means))
    means["_set"] = _joined_by_group(ok["settings"].tolist(), gid, len(means))
    base = means[means["precision"] == BASELINE_PRECISION][[*keys, "mean", "_def", "_set"]]
    merged = means[means["precision"] != BASELINE_PRECISION].merge(base, on=keys, how="inner", suffixes=("", "32"))
    merged = merged.rename(columns={"mean32": "fp32_mean"})
    merged["why"] = [why_not(get_metric(HEADLINE), (s32, s), (d32, d)) for s32, s, d32, d in zip(
        merged["_set32"], merged["_set"], merged["_def32"], merged["_def"], strict=True)]
    merged["ratio"] = np.where(merged["why"] == "", merged["mean"] / merged["fp32_mean"], math.nan)
    merged["side"] = side
    return _sorted(merged)[cols].reset_index(drop=True)


def _joined_by_group(values: Sequence[object], groups: Sequence[int], ngroups: int) -> list[str]:
    """Per group, `_join_unique` of its values in the order given: each distinct text (not "") once, joined with
    ', '."""
    seen: list[dict[str, None]] = [{} for _ in range(ngroups)]
    for v, g in zip(values, groups, strict=True):
        text = str(v)
        if text:
            seen[g][text] = None
    return [", ".join(d) for d in seen]


def precision_recipes(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment and precision, each distinct way it ran (from repeats that got that far) and its cells;
    `cpu_math`/`cpu_why`: on a CPU, whether the precision's math was native there (frame.MEASURE_COLUMNS)."""
    cols = ["side", "environment", "precision", *RECIPE_COLUMNS, "recipe", "cpu_math", "cpu_why", "cells"]
    # What ran: a repeat that ended unsupported was planned but never trained, so it says nothing of how.
    known = df[(df["recipe"] != "") & (df["status"] != Status.UNSUPPORTED.value)] if "recipe" in df else df.iloc[0:0]
    if known.empty:
        return pd.DataFrame(columns=cols)
    if "cpu_math" not in known:
        known = known.assign(cpu_math="", cpu_why="")
    out = known.groupby(["environment", "precision", *RECIPE_COLUMNS, "recipe", "cpu_math", "cpu_why"],
                        sort=False).agg(cells=("cell_key", "nunique"), _first=("id", "min")).reset_index()
    out = out.assign(side=side, _env=out["environment"].map(environment_rank(df)),
                     _prec=precision_rank(out["precision"]))
    return out.sort_values(["_env", "_prec", "_first"], kind="stable")[cols].reset_index(drop=True)


def recipe_differences(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Precisions both sides ran, but differently: precision, A's recipes, B's recipes (joined with '; ')."""
    cols = ["precision", "a", "b"]
    ra, rb = precision_recipes(a), precision_recipes(b)
    rows = []
    for p in dict.fromkeys([*ra["precision"], *rb["precision"]]):
        sa = list(dict.fromkeys(ra.loc[ra["precision"] == p, "recipe"]))
        sb = list(dict.fromkeys(rb.loc[rb["precision"] == p, "recipe"]))
        if sa and sb and set(sa) != set(sb):
            rows.append({"precision": p, "a": "; ".join(sa), "b": "; ".join(sb)})
    return pd.DataFrame(rows, columns=cols)


def environment_info(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment: backend, hardware and the versions the environment turned out to have."""
    joined = ["backend", "tags", "hardware", *(f"env_{f}" for f in ENV_FIELDS), "run_ids"]
    cols = ["side", "environment", *joined]
    if df.empty:
        return pd.DataFrame(columns=cols)
    read = ["environment", "id", "status", "reason", "log_tail", *(c for c in joined if c != "run_ids"), "run_id"]
    narrow = df[present(df, read)].rename(columns={"run_id": "run_ids"})  # what cell_attributes reads
    out, _ = cell_attributes(narrow, ["environment"], joined)
    out["side"] = side
    return out.sort_values("_first", kind="stable")[cols].reset_index(drop=True)
