"""`matrix collect`: gather the results of batch jobs submitted earlier; submits and starts nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.commands import load, what_it_uses
from runner.commands.base import Command, register


@register
class CollectCommand(Command):
    name = "collect"
    help = ("Gather results of batch jobs submitted earlier (`run --no-wait`); submits and starts nothing\n"
            "(repeats of environments that run here are left to `matrix run`).")

    def run(self, matrix: Path | None, db: Path, env: Sequence[str] | None, only: Sequence[str] | None,
            workdir: Path, max_cells: int, verbose: bool) -> int:
        from runner.commands.run import run_and_decide
        m = load(matrix, max_cells)
        return run_and_decide(m, db, env or (), only or (), workdir, verbose, submit=False,
                              uses=what_it_uses(matrix, m, db))
