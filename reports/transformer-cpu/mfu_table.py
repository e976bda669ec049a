"""The transformer run's tokens/s, MFU and measured peak per cell, as a Markdown table, from the store:
    PYTHONPATH=$PWD .venv/bin/python reports/transformer-cpu/mfu_table.py results/tr.db"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from typing import Any

from runner.store import Store

rows: defaultdict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
with Store(sys.argv[1], readonly=True) as store:
    for r in store.rows(None):
        if r["status"] == "ok":
            rows[(r["params"]["precision"], r["params"].get("compile"))].append(r["metrics"])


def ms(values: list[float], scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    v = [x * scale for x in values]
    return (fmt + " ± " + fmt).format(statistics.fmean(v), statistics.stdev(v)) if len(v) > 1 else fmt.format(v[0])


print("| precision | compile | repeats | tok/s | MFU (%) | measured peak (GFLOP/s) | FLOPs/token | loss at step 20 |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for (p, c), ms_ in rows.items():
    loss = [m["loss_at"].get("20") for m in ms_ if m.get("loss_at", {}).get("20") is not None]
    print(f"| {p} | {c} | {len(ms_)} | {ms([m['throughput'] for m in ms_])} | "
          f"{ms([m['mfu'] for m in ms_], 100, '{:.2f}')} | {ms([m['peak_flops'] for m in ms_], 1e-9, '{:.1f}')} | "
          f"{ms_[0]['flops_per_token']:,} | {ms(loss, 1, '{:.3f}') if loss else '-'} |")
print()
print("peak sources:", "; ".join(sorted({m["peak_source"].split(", ")[0] for ms_ in rows.values() for m in ms_})))
print("formula:", next(iter(rows.values()))[0]["flops_formula"])
