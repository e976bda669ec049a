"""`matrix doctor`: what this host offers to each backend, saying what it probes while it does (an engine that does
not answer can take seconds)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from rich.text import Text

from runner.base import console as consoles
from runner.base.table import Table, TableCell
from runner.commands.base import Command, register


@register
class DoctorCommand(Command):
    name = "doctor"
    help = "What this host offers: Docker engine and GPU runtime, Slurm, GPUs, Python and torch."

    def run(self) -> int:
        from runner import backends
        table = Table(["backend", "check", "", "detail"])
        marks = {True: TableCell("ok", "good"), False: TableCell("missing", "bad"), None: TableCell("n/a", "muted")}
        err = consoles.stderr()
        # On a terminal one line that changes as the probes go; elsewhere (a log, CI) a line per backend.
        status: Any = err.status("") if err.is_terminal else nullcontext()
        with status:
            for kind in backends.kinds():
                cls = backends.get(kind)
                said = Text(f"probing {kind}" + (f": {cls.probes}" if cls.probes else "") + " ...")
                if err.is_terminal:
                    status.update(said)
                else:
                    err.print(said, soft_wrap=True)
                for check in cls.doctor():
                    table.add(kind, check.name, marks[check.ok], check.detail)
        self.print_table(table, "matrix doctor")
        return 0
