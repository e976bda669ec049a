"""`matrix diff`: what differs between two environments, as their newest repeats recorded it."""

from __future__ import annotations

from pathlib import Path

import typer


def main(db: Path, a: str, b: str, fmt: str | None, everything: bool) -> int:
    from runner.report.diff import diff_command
    text = diff_command(db, a, b, fmt, everything)
    typer.echo(text, nl=not text.endswith("\n"))
    return 0
