"""`matrix run`: run every repeat that is not stored yet (resume is the default), then the matrix file's
decisions (references); `matrix collect` (runner/commands/collect.py) is the same without submitting."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base import console as consoles
from runner.base.errors import ConfigError
from runner.commands import load, sigterm, what_it_uses
from runner.commands.base import Command, register

if TYPE_CHECKING:
    from runner import matrix as matrix_mod


@register
class RunCommand(Command):
    name = "run"
    help = "Run every repeat that is not stored yet (resume is the default)."

    def run(self, matrix: Path | None, db: Path, env: Sequence[str] | None, only: Sequence[str] | None,
            image: str | None, gpus: str | None, rerun_failed: bool, force: bool, no_wait: bool, workdir: Path,
            max_cells: int, verbose: bool, until_decided: bool = False, max_repeats: int | None = None) -> int:
        if gpus is not None and image is None:
            raise ConfigError(f"--gpus {gpus}: applies to --image only; an environment of the matrix file says its "
                              "own GPUs (`gpus:` of a docker environment, `gpus_per_node:` of a slurm one, the gpus "
                              "axis)")
        m = load(matrix, max_cells)
        uses = what_it_uses(matrix, m, db, image)
        if image is not None:
            m = with_image(m, image, gpus)
        if until_decided or max_repeats is not None:
            m = until(m, until_decided, max_repeats)
        return run_and_decide(m, db, env or (), only or (), workdir, verbose, rerun_failed=rerun_failed,
                              force=force, wait=not no_wait, submit=True, uses=uses)


def until(m: matrix_mod.Matrix, decided: bool, most: int | None) -> matrix_mod.Matrix:
    """The matrix with its run aiming at its checks' decisions (`--until-decided`, `--max-repeats`): repeats are added
    to the cells of undecided checks, up to `most` (the file's `repeats.max`, else 20). The cells' keys do not change:
    how many repeats a cell gets is not part of what it measures."""
    if not decided:
        raise ConfigError("--max-repeats: applies with --until-decided only (the file's `repeats: {max: N}` says it "
                          "otherwise)")
    if not (m.gates or m.references):
        raise ConfigError(f"--until-decided: {m.path or 'the matrix'} has no `gate:` and no `references:`, so no "
                          "check to decide; add e.g. gate: [{a: ENV, b: ENV, fail_on: 'slower:3%'}]")
    run = m.run
    first = run.adaptive.min if run.adaptive else run.repeats
    most = most or (run.adaptive.max if run.adaptive else max(20, first))
    if most < first:
        raise ConfigError(f"--max-repeats {most}: below the {first} repeats every cell gets")
    from runner.domain.runsettings import AdaptiveRepeats
    rule = AdaptiveRepeats(min=max(2, first), max=most, until="decided")
    return replace(m, run=run.model_copy(update={"adaptive": rule, "repeats": rule.min}))


def with_image(m: matrix_mod.Matrix, image: str, gpus: str | None) -> matrix_mod.Matrix:
    """The matrix's axes in one ad-hoc docker environment (`--image`)."""
    from runner.backends.docker import adhoc_environment
    axes = m.axes
    if gpus and axes.device == ["cpu"]:
        # GPUs were asked for: a CPU-only device axis (the quickstart's) would leave them idle.
        axes = axes.model_copy(update={"device": ["cuda"]})
    from runner.backends.workloads import adopted
    env = adhoc_environment(image, gpus)
    return replace(m, axes=axes, environments=(env,), include=tuple(
        {k: v for k, v in rule.items() if k != "environment"} for rule in m.include),
        exclude=tuple(r for r in m.exclude if "environment" not in r),
        workloads=adopted(m.workloads, None, [env.name], "--image"))


def run_and_decide(m: matrix_mod.Matrix, db: Path, env: Sequence[str], only: Sequence[str], workdir: Path,
                   verbose: bool, *, rerun_failed: bool = False, force: bool = False, wait: bool = True,
                   submit: bool = True, uses: str = "") -> int:
    """Run (or collect) the selected cells, then decide the matrix file's references on what is stored. `uses`: the
    matrix file and store in words, said once the store is open (a store that cannot be opened is one line alone)."""
    from runner import matrix as matrix_mod
    from runner.commands import decide
    from runner.execution import execute
    from runner.store import Store
    cells = matrix_mod.select(m.cells(), env, only)
    signal.signal(signal.SIGTERM, sigterm)
    decided = 0
    with Store(db) as store:
        if uses:
            Command.say(uses, err=True)
        report = execute.run_matrix(m, cells, store, workdir=workdir, argv=sys.argv[1:], console=consoles.stdout(),
                                    verbose=verbose, rerun_failed=rerun_failed, force=force, wait=wait,
                                    submit=submit)
        if not report.interrupted and not report.pending:  # jobs still queued: `matrix collect` decides
            text, decided = decide.run_decisions(m, cells, store)
            if text:
                Command.say(text, nl=False)
    return int(report.exit_code) or int(decided)
