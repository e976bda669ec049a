"""`matrix ls`: the runs in the store."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from runner import console as consoles
from runner.store import Store
from runner.table import Cell, Table


def main(db: Path) -> int:
    with Store(db, readonly=True) as store:
        runs = store.runs()
    table = Table(["run", "matrix", "started", "took", "status", "repeats"], align=["l"] * 3 + ["r"])
    for r in runs:
        took = f"{r.finished_at - r.started_at:.0f} s" if r.finished_at else "-"
        counts = ", ".join(f"{n} {s}" for s, n in sorted(r.counts.items())) or "none"
        table.add(r.run_id, r.matrix_name or "-", datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M"),
                  took, Cell(r.status, "" if r.status == "complete" else "status"), counts)
    consoles.print_table(consoles.stdout(), table, f"runs in {db}")
    return 0
