"""Scaling: throughput against the process layout (GPUs or ranks per node x nodes), speed-up and efficiency.

The shape of the multi-GPU/multi-node write-ups: per layout the overall img/s and, when bench measured
them (--breakdown), forward and backward img/s; speed-up over each configuration's smallest layout
(which need not be one process) and efficiency against the growth in processes from that layout.
"""

from __future__ import annotations

import pandas as pd


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput against processes (gpus x nodes): speedup over the smallest layout and efficiency."""
    cols = ["environment", "model", "precision", "batch_size", "dataset", "options", "gpus", "nodes",
            "processes", "throughput_n", "throughput_mean", "throughput_std", "throughput_ci_low", "throughput_ci_high",
            "fwd_throughput_n", "fwd_throughput_mean", "fwd_throughput_std",
            "bwd_throughput_n", "bwd_throughput_mean", "bwd_throughput_std", "speedup", "efficiency"]
    units = [f"unit_{m}" for m in ("throughput", "fwd_throughput", "bwd_throughput") if f"unit_{m}" in summary]
    cols += units  # each figure's unit travels with it (a transformer's tok/s), for the table's headings
    ok = summary[summary["throughput_n"] > 0]
    if ok.empty or (ok["gpus"].nunique() < 2 and ok["nodes"].nunique() < 2):
        return pd.DataFrame(columns=cols)
    group = ["environment", "model", "precision", "batch_size", "dataset", "options"]
    df = ok.assign(processes=ok["gpus"] * ok["nodes"]).sort_values(["processes", "nodes"], kind="stable")
    g = df.groupby(group, sort=False, dropna=False)
    df = df[g["processes"].transform("size") >= 2]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(group, sort=False, dropna=False)
    df = df.assign(speedup=df["throughput_mean"] / g["throughput_mean"].transform("first"))
    df = df.assign(efficiency=df["speedup"] / (df["processes"] / g["processes"].transform("first")))
    # Keep each configuration's layouts together, in the summary's order of configurations.
    first = {k: i for i, k in enumerate(dict.fromkeys(map(tuple, ok[group].itertuples(index=False))))}
    df = df.assign(_cfg=[first[tuple(r)] for r in df[group].itertuples(index=False)])
    return df.sort_values(["_cfg", "processes", "nodes"], kind="stable")[cols].reset_index(drop=True)
