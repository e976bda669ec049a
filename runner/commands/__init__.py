"""The commands: one module each (runner/commands/<name>.py, import_.py for `import`), each one class that follows
the contract of runner/commands/base.py (`Command`: a name, one line of help, `run(option values) -> exit status`)
and registers itself in `COMMANDS`. runner/cli/__init__.py declares their options and hands the values over; the
error boundary (runner/cli/boundary.py) turns a MatrixError into one line and its status. What several commands
share is here (`load` of -m, `what_it_uses`, `sigterm`, the defaults the options name), in `decide` (the gate inside
`compare --fail-on`, the decisions at the end of `run` and `collect`) and in `choices` (the values an option takes,
from the tables that define them)."""

from __future__ import annotations

import os
from pathlib import Path
from types import FrameType

from runner import matrix as matrix_mod
from runner.matrix import MAX_CELLS
from runner.spec.outcomes import RERUN_FAILED_TEXT
from runner.store import DEFAULT_DB

__all__ = ["DEFAULT_DB", "MAX_CELLS", "RERUN_FAILED_TEXT", "load", "matrix_path", "sigterm", "what_it_uses"]


def matrix_path(path: Path | None) -> Path | None:
    """-m: the file given, else ./matrix.yaml when there is one, else None (the embedded quickstart)."""
    if path is None and Path("matrix.yaml").exists():
        return Path("matrix.yaml")
    return path


def what_it_uses(path: Path | None, m: matrix_mod.Matrix, db: Path, image: str | None = None) -> str:
    """The matrix file and the store a command uses, and where each choice came from (`matrix run` says it first,
    so that a matrix.yaml in the folder, or a variable set long ago, is never taken silently)."""
    def by_variable(value: Path, name: str) -> str:
        return f" (from {name})" if os.environ.get(name) == str(value) else ""

    if path is not None:
        source = f"{path}{by_variable(path, 'MATRIX_FILE')}"
    elif m.path is not None and m.path.name == "matrix.yaml" and Path("matrix.yaml").exists():
        source = "matrix.yaml (found in this folder; -m FILE or MATRIX_FILE picks another)"
    else:
        source = "the embedded quickstart (no -m, no MATRIX_FILE, no ./matrix.yaml)"
    axes = f", its axes in image {image}" if image else ""
    return f"matrix {m.name!r}: {source}{axes}; store: {db}{by_variable(db, 'MATRIX_DB')}"


def load(matrix: Path | None, max_cells: int) -> matrix_mod.Matrix:
    return matrix_mod.load(matrix_path(matrix), max_cells=max_cells)


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM interrupts a command as Ctrl-C does (exit 130)."""
    raise KeyboardInterrupt
