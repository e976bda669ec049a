"""`matrix report`: write the report views (tables and plots) from the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer


def main(db: Path, run_refs: Sequence[str] | None, fmt: Sequence[str], out: Path | None) -> int:
    from runner.report import report_command  # pandas and matplotlib: only for the commands that draw
    for path in report_command(db, list(run_refs) if run_refs else None, list(fmt), out):
        typer.echo(str(path))
    return 0
