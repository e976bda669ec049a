"""One module per command, one calling convention: `main(...)` takes the command's option values as plain
arguments, prints what the command says and returns its exit status (runner/base/exitcodes.py; 0: success).
runner/cli/__init__.py only wires options to them; the error boundary (runner/cli/boundary.py) turns a MatrixError
into one line and its status. The commands that decide (`decide`: `matrix check`, the gate of `compare
--fail-on` and the decisions printed at the end of `matrix run`; `bisect`) return their text and exit status."""

from __future__ import annotations

from pathlib import Path
from types import FrameType

from runner import matrix as matrix_mod


def matrix_path(path: Path | None) -> Path | None:
    """-m: the file given, else ./matrix.yaml when there is one, else None (the embedded quickstart)."""
    if path is None and Path("matrix.yaml").exists():
        return Path("matrix.yaml")
    return path


def load(matrix: Path | None, max_cells: int) -> matrix_mod.Matrix:
    return matrix_mod.load(matrix_path(matrix), max_cells=max_cells)


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM interrupts a command as Ctrl-C does (exit 130)."""
    raise KeyboardInterrupt
