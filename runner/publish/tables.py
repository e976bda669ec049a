"""The site's page in the write-ups' own shape (docs/publish.md, "Pages"): per machine, for each environment and model,
a precision x batch-size table of the metric's mean ± std in its unit, from that machine's newest repeats of each
cell as `compare machine:ID` takes them (runner/analysis/sides.py: its newest definition of each cell, admitted
repeats only)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

import runner.analysis as an
from runner.report import fmt

GROUP = ["environment", "model", "dataset", "options", "gpus", "nodes"]


def tables(latest: pd.DataFrame, machines: list[dict[str, Any]], metric: an.Metric) -> list[dict[str, Any]]:
    """One entry per machine: its label and devices, and one block per environment and model."""
    out = []
    for m in machines:
        chosen = an.select_side(latest, f"machine:{m['id']}").chosen if len(latest) else latest
        blocks = [_block(key, g, metric) for key, g in chosen.groupby(GROUP, sort=False, dropna=False)]
        if blocks:
            out.append({"machine": m["label"], "id": m["id"], "hardware": m["hardware"], "blocks": blocks})
    return out


def _block(key: Any, g: pd.DataFrame, metric: an.Metric) -> dict[str, Any]:
    name = dict(zip(GROUP, key, strict=True))
    batches = sorted({int(b) for b in g["batch_size"]})
    precisions = list(dict.fromkeys(g.sort_values("precision", key=an.precision_rank, kind="stable")["precision"]))
    ok = g[(g["status"] == "ok") & g[metric.name].notna()]
    unit = an.shown_unit(ok.get(f"unit_{metric.name}", pd.Series(dtype=object)).unique(), metric.name)
    rows = []
    for p in precisions:
        cells = []
        for b in batches:
            cell = g[(g["precision"] == p) & (g["batch_size"] == b)]
            vals = cell.loc[(cell["status"] == "ok"), metric.name].to_numpy(dtype=float) * metric.scale
            vals = vals[np.isfinite(vals)]
            if vals.size:
                std = float(vals.std(ddof=1)) if vals.size > 1 else math.nan
                cells.append({"text": fmt.mean_std(vals.mean(), std, int(vals.size)), "n": int(vals.size), "bad": ""})
            elif len(cell):
                cells.append({"text": an.status_summary(cell["status"].value_counts().to_dict()), "n": 0, "bad": "bad"})
            else:
                cells.append({"text": "—", "n": 0, "bad": "muted"})
        rows.append({"precision": p, "cells": cells})
    title = " · ".join(str(v) for k, v in name.items() if v not in ("", None) and not (k in ("gpus", "nodes") and v == 1))
    return {"title": title, "unit": unit, "batches": batches, "rows": rows}
