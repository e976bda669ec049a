"""`matrix plan`: validate the matrix file and list its cells; nothing runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base.table import Table
from runner.commands import load
from runner.commands.base import Command, register
from runner.domain.defaults import shown_params

if TYPE_CHECKING:
    from runner import matrix as matrix_mod
    from runner.domain.cells import Cell


@register
class PlanCommand(Command):
    name = "plan"
    help = "Validate the matrix file and list its cells; nothing runs."

    def run(self, matrix: Path | None, env: Sequence[str] | None, only: Sequence[str] | None, db: Path,
            max_cells: int) -> int:
        from runner import matrix as matrix_mod
        from runner.store import Store
        m = load(matrix, max_cells)
        cells = matrix_mod.select(m.cells(), env or (), only or ())
        stored = {}
        if db.exists():
            with Store(db, readonly=True) as store:
                stored = store.latest_statuses(c.key for c in cells)
        axes = param_columns(cells)
        table = Table(["#", "key", "environment", "backend", *axes, "stored"], align=["r"])
        for i, cell in enumerate(cells, 1):
            done = [stored[(cell.key, r)].value for r in range(m.run.most_repeats) if (cell.key, r) in stored]
            table.add(str(i), cell.key, cell.env_name, cell.environment.backend,
                      *(str(cell.params.get(a, "")) for a in axes), f"{len(done)}/{m.run.repeats_text.split(' ')[0]}")
        self.print_table(table, f"{m.name}: {len(cells)} cells x {m.run.repeats_text} repeats "
                         f"({plan_runs(m)}{'; repeats interleaved' if m.run.interleave else ''})")
        return 0


def plan_runs(m: matrix_mod.Matrix) -> str:
    """What one repeat runs: bench's iterations, or the workload programs (whose own arguments say how long)."""
    if not m.workloads:
        return str(m.run.window_text)
    names = sorted({w.name or "unnamed" for w in m.workloads.values()})
    return f"workload {', '.join(names)}: its own program and parser"


def param_columns(cells: Sequence[Cell]) -> list[str]:
    """The axes worth a column: those present in any cell, minus a process layout of 1."""
    return list(dict.fromkeys(k for cell in cells for k in shown_params(cell.params)))
