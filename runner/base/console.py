"""The one console factory: rich consoles for stdout, stderr or a buffer, and a report Table printed on them.

On a terminal: its own width and colours. Piped or redirected: no colour (nor with NO_COLOR set) and wide
enough that tables do not wrap, so scripts and logs read the same rows a person sees.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from runner.base.table import Table

PIPED_WIDTH = 240  # columns when not a terminal: tables are written whole, not wrapped at 80
STYLES = {"good": "bold green", "bad": "bold red", "muted": "dim", "status": "yellow", "key": "bold",
          "num partial": "yellow", "diverged": "bold red", "refused": "magenta",
          # a verdict's tone (runner/report/tone.py): better, worse, no change, undecided, changed, not compared
          "better": "bold green", "worse": "bold red", "same": "dim", "undecided": "yellow", "changed": "magenta",
          "none": "dim"}
# How an outcome is coloured wherever it is printed: a diverged training is red (it is an outcome, as a crash is);
# a repeat admission refused is magenta (set aside, neither a figure nor a failure); the others yellow.
STATUS_STYLES = {"ok": "green", "diverged": "bold red", "refused": "magenta"}


def status_style(status: str) -> str:
    """The colour of an outcome's word in a console line."""
    return STATUS_STYLES.get(status, "yellow")


def wants_color(tty: bool) -> bool:
    return tty and not os.environ.get("NO_COLOR")


def console(file: TextIO | None = None, *, tty: bool | None = None, color: bool | None = None,
            width: int | None = None, quiet: bool = False) -> Console:
    """A console writing to `file` (stdout); `tty` says whether the reader is a terminal (default: the file's)."""
    file = file if file is not None else sys.stdout
    tty = file.isatty() if tty is None else tty
    color = wants_color(tty) if color is None else color
    if width is None and not tty:
        width = PIPED_WIDTH
    elif width is None and file not in (sys.stdout, sys.stderr):
        width = shutil.get_terminal_size((PIPED_WIDTH, 40)).columns
    return Console(file=file, width=width, force_terminal=color, no_color=not color, highlight=False,
                   soft_wrap=False, quiet=quiet)


def stdout() -> Console:
    return console(sys.stdout)


def stderr() -> Console:
    return console(sys.stderr)


def rich_table(t: Table, title: str = "") -> Any:
    """A report Table as a rich table, its cells styled by their class. Title, headers and cells are Text, never
    console markup: an environment named `[red]` or a value `[/x]` is printed as written."""
    rt = RichTable(title=Text(title, style="table.title") if title else None, title_justify="left", header_style="bold",
                   show_lines=False)
    for col, align in zip(t.columns, t.aligns(), strict=True):
        rt.add_column(Text(col), justify="right" if align == "r" else "left", overflow="fold")
    for row in t.rows:
        rt.add_row(*(Text(c.text, style=STYLES.get(c.cls, "")) for c in row))
    return rt


def print_table(out: Console, table: Table, title: str = "") -> None:
    out.print(rich_table(table, title))
