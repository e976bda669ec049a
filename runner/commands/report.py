"""`matrix report`: write the report views (tables and plots) from the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.commands.base import Command, register


@register
class ReportCommand(Command):
    name = "report"
    help = "Write the report views (tables and plots) from the store."

    def run(self, db: Path, run_refs: Sequence[str] | None, fmt: Sequence[str] | None, out: Path | None) -> int:
        from runner.report import DEFAULT_REPORT_FORMATS, report_command
        for path in report_command(db, list(run_refs) if run_refs else None, list(fmt or DEFAULT_REPORT_FORMATS),
                                   out):
            self.say(str(path))
        return 0
