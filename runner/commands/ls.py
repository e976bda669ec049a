"""`matrix ls`: the runs in the store."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from runner import console as consoles
from runner.analysis import admitted_rows
from runner.store import Store
from runner.table import Cell, Table


def main(db: Path) -> int:
    with Store(db, readonly=True) as store:
        runs = store.runs()
        # Each run's stored ok repeats as admission sees them (runner/analysis/admission.py): a diverged or refused
        # one is counted by its word, as every other command counts it.
        admitted: dict[str, Counter[str]] = defaultdict(Counter)
        for row in admitted_rows(store.rows(latest_only=False)):
            admitted[row["run_id"]][row["status"]] += 1
    table = Table(["run", "matrix", "started", "took", "status", "repeats"], align=["l"] * 3 + ["r"])
    for r in runs:
        took = f"{r.finished_at - r.started_at:.0f} s" if r.finished_at else "-"
        counts = ", ".join(f"{n} {s}" for s, n in sorted((admitted.get(r.run_id) or r.counts).items())) or "none"
        table.add(r.run_id, r.matrix_name or "-", datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M"),
                  took, Cell(r.status, "" if r.status == "complete" else "status"), counts)
    consoles.print_table(consoles.stdout(), table, f"runs in {db}")
    return 0
