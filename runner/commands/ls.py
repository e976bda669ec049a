"""`matrix ls`: the runs in the store; with `--imports`, what it imported and from where."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.base import console as consoles
from runner.base.table import Table, TableCell
from runner.commands.base import Command, register


def list_runs(db: Path) -> int:
    """`matrix ls`: one row per run, its repeats counted by how they ended."""
    from runner.store import Store
    with Store(db, readonly=True) as store:
        runs = store.runs()
        # Each run's stored ok repeats as admission sees them (runner/record/admission.py): a diverged or refused
        # one is counted by its word, as every other command counts it.
        admitted: dict[str, Counter[str]] = defaultdict(Counter)
        for rep in store.rows(latest_only=False):
            admitted[rep.run_id][rep.admission.status] += 1
    table = Table(["run", "matrix", "started", "took", "status", "repeats"], align=["l"] * 3 + ["r"])
    for r in runs:
        took = f"{r.finished_at - r.started_at:.0f} s" if r.finished_at else "-"
        counts = ", ".join(f"{n} {s}" for s, n in sorted((admitted.get(r.run_id) or r.counts).items())) or "none"
        table.add(r.run_id, r.matrix_name or "-", datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M"),
                  took, TableCell(r.status, "" if r.status == "complete" else "status"), counts)
    consoles.print_table(consoles.stdout(), table, f"runs in {db}")
    return 0


def imports_table(rows: list[dict[str, Any]]) -> Table:
    """One row per imported file and origin store: the machine's store id, host and hardware, the stores its repeats
    came by, when it was imported (UTC), the file as it was given, and its runs and repeats here."""
    table = Table(["origin store", "host", "hardware", "via", "imported (UTC)", "file", "runs", "repeats"],
                  align=["l"] * 6 + ["r", "r"])
    for r in rows:
        table.add(str(r["origin"]), ", ".join(r["hosts"]) or "-", ", ".join(r["hardware"]) or "-",
                  ", ".join(r["via"]) or "-", _utc(r["first_imported"], r["last_imported"]), str(r["file"]),
                  str(r["runs"]), str(r["repeats"]))
    return table


def _utc(first: float, last: float) -> str:
    def day(t: float) -> str:
        return datetime.fromtimestamp(float(t), tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    return day(first) if day(first) == day(last) else f"{day(first)} – {day(last)}"


def list_imports(db: Path) -> int:
    """`matrix ls --imports`: what this store imported and from where (the `imported` table: docs/exchange.md)."""
    from runner.store import Store
    from runner.store import exchange as store_exchange
    with Store(db, readonly=True) as store:
        rows = store_exchange.imports(store)
        mine = store_exchange.store_id(store) or "?"
    out = consoles.stdout()
    if not rows:
        out.print(f"{db} (store {mine}) imported nothing: every repeat in it was measured here")
        return 0
    consoles.print_table(out, imports_table(rows), f"imported into {db} (store {mine})")
    return 0


@register
class LsCommand(Command):
    name = "ls"
    help = "List the runs in the store (--imports: what it imported)."

    def run(self, db: Path, imports: bool = False) -> int:
        return list_imports(db) if imports else list_runs(db)
