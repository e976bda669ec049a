"""`matrix doctor`: what this host offers to each backend."""

from __future__ import annotations

from runner.base.table import Table, TableCell
from runner.commands.base import Command, register


@register
class Doctor(Command):
    name = "doctor"
    help = "What this host offers: Docker engine and GPU runtime, Slurm, GPUs, Python and torch."

    def run(self) -> int:
        from runner import backends
        table = Table(["backend", "check", "", "detail"])
        marks = {True: TableCell("ok", "good"), False: TableCell("missing", "bad"), None: TableCell("n/a", "muted")}
        for kind in backends.kinds():
            for check in backends.get(kind).doctor():
                table.add(kind, check.name, marks[check.ok], check.detail)
        self.print_table(table, "matrix doctor")
        return 0
