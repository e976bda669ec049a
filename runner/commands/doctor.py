"""`matrix doctor`: what this host offers to each backend."""

from __future__ import annotations

from runner import backends
from runner.base import console as consoles
from runner.base.table import Table, TableCell


def main() -> int:
    table = Table(["backend", "check", "", "detail"])
    marks = {True: TableCell("ok", "good"), False: TableCell("missing", "bad"), None: TableCell("n/a", "muted")}
    for kind in backends.kinds():
        for check in backends.get(kind).doctor():
            table.add(kind, check.name, marks[check.ok], check.detail)
    consoles.print_table(consoles.stdout(), table, "matrix doctor")
    return 0
