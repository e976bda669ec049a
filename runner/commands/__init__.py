"""The commands: one module each (runner/commands/<name>.py, import_.py for `import`), each one class that follows
the contract of runner/commands/base.py (`Command`: a name, one line of help, `run(option values) -> exit status`)
and registers itself in `COMMANDS`. runner/cli/__init__.py declares their options and hands the values over; the
error boundary (runner/cli/boundary.py) turns a MatrixError into one line and its status. What several commands
share is here (`load` of -m, `sigterm`, the defaults the options name, light to import: `matrix --help` reads
them) and in `decide` (the gate inside `compare
--fail-on`, the decisions at the end of `run` and `collect`)."""

from __future__ import annotations

from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from runner.spec.defaults import DEFAULT_DB, MAX_CELLS
from runner.spec.outcomes import RERUN_FAILED_TEXT

if TYPE_CHECKING:
    from runner import matrix as matrix_mod

__all__ = ["DEFAULT_DB", "MAX_CELLS", "RERUN_FAILED_TEXT", "load", "matrix_path", "sigterm"]


def matrix_path(path: Path | None) -> Path | None:
    """-m: the file given, else ./matrix.yaml when there is one, else None (the embedded quickstart)."""
    if path is None and Path("matrix.yaml").exists():
        return Path("matrix.yaml")
    return path


def load(matrix: Path | None, max_cells: int) -> matrix_mod.Matrix:
    # pydantic and the backends: loaded by a command that reads a matrix, not by `matrix --help`
    from runner import matrix as matrix_mod
    return matrix_mod.load(matrix_path(matrix), max_cells=max_cells)


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM interrupts a command as Ctrl-C does (exit 130)."""
    raise KeyboardInterrupt
