"""The commands: one module each (runner/commands/<name>.py, import_.py for `import`), each one class that follows
the contract of runner/commands/base.py (`Command`: a name, one line of help, `run(option values) -> exit status`)
and registers itself in `COMMANDS`. runner/cli/__init__.py declares their options and hands the values over; the
error boundary (runner/cli/boundary.py) turns a MatrixError into one line and its status. What several commands
share is here (`load` of -m, `what_it_uses`, `sigterm`, the defaults the options name, light to import: `matrix --help`
reads them), in `decide` (the gate inside `compare --fail-on`, the decisions at the end of `run` and `collect`) and in
`choices` (the values an option takes, from the tables that define them)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from runner.domain.defaults import DEFAULT_DB, MAX_CELLS
from runner.domain.outcomes import RERUN_FAILED_TEXT
from runner.record.metrics import HEADLINE, METRICS
from runner.report import COMPARE_FORMATS, DEFAULT_REPORT_FORMATS, DIFF_FORMATS
from runner.report.formats import FORMATS as REPORT_FORMATS

if TYPE_CHECKING:
    from runner import matrix as matrix_mod

__all__ = ["COMPARE_FORMATS", "DEFAULT_DB", "DIFF_FORMATS", "HEADLINE", "MAX_CELLS", "RERUN_FAILED_TEXT", "load",
           "matrix_path", "metric_help", "metric_names", "one_of", "report_format_help", "rules_help", "sigterm",
           "site_metric_help", "what_it_uses"]


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
    # pydantic and the backends: loaded by a command that reads a matrix, not by `matrix --help`
    from runner import matrix as matrix_mod
    return matrix_mod.load(matrix_path(matrix), max_cells=max_cells)


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM interrupts a command as Ctrl-C does (exit 130)."""
    raise KeyboardInterrupt


# What the options' help texts list, each made from the table that defines it (runner/record/metrics.py, the report
# format registry, each command's formats): a metric or a format added there is listed here with no other edit.
def one_of(names: Iterable[str], last: str = "or") -> str:
    """A list in words: 'md, csv or json'."""
    items = list(names)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def metric_names() -> list[str]:
    """Every name a user may give a metric (the table's names, then their aliases): what completion offers."""
    return [*METRICS, *(a for m in METRICS.values() for a in m.aliases)]


def metric_help(also: str = "") -> str:
    """--metric: every metric of the table, each with its aliases in brackets; `also`: a choice of the command's
    own beyond the table."""
    return f"the metric: {METRICS.names()}{also}"


def site_metric_help() -> str:
    """publish --metric: the metrics the table places on the site."""
    return f"the metric the histories plot: {one_of(m.name for m in METRICS.shown('site'))}"


def rules_help() -> str:
    """compare --fail-on: the gate's rule words, each with its metric and the direction it fears."""
    rules = [f"{word}:X% ({m.label}: {m.worse if fears else m.better})" for word, (m, fears) in METRICS.rules().items()]
    return (f"exit 1 when B changed from A beyond X and significantly, by a rule RULE:X%: {one_of(rules)} "
            "(repeatable)")


def report_format_help() -> str:
    """report --format: the registered report formats and the default ones."""
    return (f"{one_of(REPORT_FORMATS.names(), 'and')} (repeatable; default: "
            f"{one_of(DEFAULT_REPORT_FORMATS, 'and')})")
