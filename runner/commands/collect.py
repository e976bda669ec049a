"""`matrix collect`: gather the results of batch jobs submitted earlier; submits and starts nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.commands import load
from runner.commands.run import run_and_decide


def main(matrix: Path | None, db: Path, env: Sequence[str], only: Sequence[str], workdir: Path, max_cells: int,
         verbose: bool) -> int:
    return run_and_decide(load(matrix, max_cells), db, env, only, workdir, verbose, submit=False)
