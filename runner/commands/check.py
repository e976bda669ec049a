"""`matrix check`: hold the stored results against the matrix file's `references:`; runs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base.errors import ConfigError, StoreError
from runner.commands import load
from runner.commands.base import Command, register

if TYPE_CHECKING:
    from runner.analysis import references

FORMATS = ("json",)


def check_text(js: Sequence[references.Judgement], fmt: str | None = None, policy: str | None = None) -> str:
    from runner.analysis import references
    from runner.report import decisions as present
    if fmt == "json":
        return references.to_json(js, policy)
    if fmt is not None:
        raise ConfigError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)} (default: a table)")
    return present.terminal(present.verdict_table(js), references.summary_line(js, policy), titles=["References"])


@register
class CheckCommand(Command):
    name = "check"
    help = "Hold the stored results against the matrix file's `references:`; runs nothing."
    details = (
        "Per cell and metric: pass, fail or undecided, with the measured mean, the reference and the margin.\n"
        "A reference fails when a cell it covers has no value because its repeats failed; it is undecided when\n"
        "nothing was measured or the metric is not measured there, unless --undecided (or the entry's\n"
        "`undecided:`) counts it as fail or pass.")

    def run(self, matrix: Path | None, db: Path, env: Sequence[str] | None, only: Sequence[str] | None,
            fmt: str | None, undecided: str | None, max_cells: int) -> int:
        """Exit 0 when every verdict passed, 1 when one failed, 5 when one is undecided; `undecided` (--undecided)
        overrides the entries' own `undecided:` settings. A matrix without references is a mistake."""
        from runner import matrix as matrix_mod
        from runner.analysis import references
        from runner.analysis.verdict import parse_policy
        from runner.commands import decide
        from runner.store import Store
        m = load(matrix, max_cells)
        cells = matrix_mod.select(m.cells(), env or (), only or ())
        policy = parse_policy(undecided) if undecided is not None else None
        if not m.references:
            where = m.path or "the matrix"
            raise ConfigError(f"{where}: no `references:` to check; add e.g. references: [{{match: {{model: wrn}}, "
                              "throughput: '>= 100'}] (docs/decisions.md)")
        if not db.exists():
            raise StoreError(f"no result store at {db}: run `matrix run` first, or pass --db PATH")
        with Store(db, readonly=True) as store:
            js = decide.verdicts(m, cells, store)
        self.say(check_text(js, fmt, policy))
        return int(references.exit_status(js, policy))
