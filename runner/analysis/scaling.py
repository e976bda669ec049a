"""Scaling: throughput against the process layout (GPUs or ranks per node x nodes), speed-up and efficiency.

The shape of the multi-GPU/multi-node write-ups: per layout the overall img/s and, when bench measured
them (--breakdown), forward and backward img/s; speed-up over each configuration's smallest layout
(which need not be one process) and efficiency against the growth in processes from that layout.
"""

from __future__ import annotations

import pandas as pd

from runner.record.metrics import HEADLINE

# The rates a layout scales: the headline's and, with bench's --breakdown, each phase's.
RATES = (HEADLINE, "fwd_throughput", "bwd_throughput")


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput against processes (gpus x nodes): speedup over the smallest layout and efficiency."""
    cols = ["environment", "model", "precision", "batch_size", "dataset", "options", "gpus", "nodes",
            "processes", *(f"{m}_{s}" for m in RATES for s in ("n", "mean", "std")), f"{HEADLINE}_ci_low",
            f"{HEADLINE}_ci_high", "speedup", "efficiency"]
    units = [f"unit_{m}" for m in RATES if f"unit_{m}" in summary]
    cols += units  # each figure's unit travels with it (a transformer's tok/s), for the table's headings
    n, mean = f"{HEADLINE}_n", f"{HEADLINE}_mean"
    ok = summary[summary[n] > 0]
    if ok.empty or (ok["gpus"].nunique() < 2 and ok["nodes"].nunique() < 2):
        return pd.DataFrame(columns=cols)
    group = ["environment", "model", "precision", "batch_size", "dataset", "options"]
    df = ok.assign(processes=ok["gpus"] * ok["nodes"]).sort_values(["processes", "nodes"], kind="stable")
    g = df.groupby(group, sort=False, dropna=False)
    df = df[g["processes"].transform("size") >= 2]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(group, sort=False, dropna=False)
    df = df.assign(speedup=df[mean] / g[mean].transform("first"))
    df = df.assign(efficiency=df["speedup"] / (df["processes"] / g["processes"].transform("first")))
    # Keep each configuration's layouts together, in the summary's order of configurations.
    first = {k: i for i, k in enumerate(dict.fromkeys(map(tuple, ok[group].itertuples(index=False))))}
    df = df.assign(_cfg=[first[tuple(r)] for r in df[group].itertuples(index=False)])
    return df.sort_values(["_cfg", "processes", "nodes"], kind="stable")[cols].reset_index(drop=True)
