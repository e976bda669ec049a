"""How a bisect measures: through `execute.run_matrix`, as `matrix run` does (claims, resume, interleaving,
every repeat stored), and reads back from the store only the repeats a comparison may look at."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from runner.analysis import resolution, sides
from runner.analysis.bisect_search import Sample
from runner.analysis.frame import frame
from runner.domain.cells import Cell
from runner.execution import execute
from runner.matrix import Matrix
from runner.record.metrics import Metric
from runner.record.repeat import Repeat
from runner.store import Store


def with_repeats(cell: Cell, repeats: int) -> Cell:
    """The same cell (the same key: repeats are not part of it) asking for `repeats` repeats, not adaptive."""
    return replace(cell, run=cell.run.model_copy(update={"repeats": repeats, "adaptive": None}))


@dataclass
class Tally:
    """What a bisect cost: repeats measured now, and the repeats it looked at per environment."""

    measured: int = 0
    runs: list[str] = field(default_factory=list)
    looked: dict[int, int] = field(default_factory=dict)


class StoreMeasure:
    """`measure({index: repeats})` for a bisect: runs what the store lacks of each cell's first `repeats` repeats
    (one `run_matrix` over all the environments asked at once, interleaved when the matrix says so), then gives
    each environment's Sample of those repeats."""

    def __init__(self, matrix: Matrix, cells: Sequence[Cell], store: Store, metric: Metric | None, *,
                 workdir: Path, argv: Sequence[str] = (), verbose: bool = False,
                 say: Callable[[str], None] = lambda text: None, poll_s: float = 2.0) -> None:
        self.matrix = matrix
        self.cells = list(cells)
        self.store = store
        self.metric = metric
        self.workdir = workdir
        self.argv = list(argv)
        self.verbose = verbose
        self.say = say
        self.poll_s = poll_s
        self.tally = Tally()
        self.cannot_start: dict[str, str] = {}  # environment -> why it could not start (nothing stored for it)

    def _repeats(self, index: int, n: int) -> list[Repeat]:
        """The newest row of each of the cell's repeats 0..n-1 that are stored: this store's own, as
        runner/analysis/sides.py selects a side (a bisect measures here; a repeat imported from another machine is
        stored under another key and is never one of them)."""
        cell = self.cells[index]
        stored = list(self.store.rows(keys=[cell.key]))
        if stored:
            mine = set(sides.select(frame(stored), f"env:{cell.env_name}").frame["id"])
            stored = [r for r in stored if r.id in mine]
        rows = [Repeat.of(r) for r in stored]
        return sorted((r for r in rows if r.number < n), key=lambda r: r.number)

    def _complete(self, index: int, n: int) -> bool:
        final = {r.number for r in self._repeats(index, n) if r.final}
        return final >= set(range(n))

    def __call__(self, wanted: Mapping[int, int]) -> dict[int, Sample]:
        todo = [i for i, n in wanted.items() if not self._complete(i, n)]
        if todo:
            cells = [with_repeats(self.cells[i], wanted[i]) for i in todo]
            shown = ", ".join(f"{self.cells[i].env_name} ({wanted[i]} repeats)" for i in todo)
            self.say(f"bisect: measuring {shown}")
            report = execute.run_matrix(self.matrix, cells, self.store, workdir=self.workdir, argv=self.argv,
                                        console=Console(file=io.StringIO()), verbose=self.verbose,
                                        poll_s=self.poll_s)
            if report.interrupted:
                raise KeyboardInterrupt
            self.tally.measured += sum(report.stored.values())
            self.cannot_start.update(report.cannot_start)
            if report.run_id:
                self.tally.runs.append(report.run_id)
        out = {}
        for i, n in wanted.items():
            self.tally.looked[i] = max(self.tally.looked.get(i, 0), n)
            out[i] = self.sample(i, n)
        return out

    def sample(self, index: int, n: int) -> Sample:
        """The cell's first n repeats as the search sees them: final statuses in repeat order, the metric of the
        ok ones; `missing` says why when none ended (the environment could not start)."""
        rows = self._repeats(index, n)
        final = [r for r in rows if r.final]
        if not final:
            why = next((r.reason for r in rows if r.reason), None)
            why = why or self.cannot_start.get(self.cells[index].env_name) or "no repeat stored"
            return Sample(missing=f"{self.cells[index].env_name}: {why}")
        values: list[float] = []
        steps: list[int | None] = []
        ladders: list[Mapping[int, float] | None] = []
        defined: dict[str, None] = {}
        if self.metric is not None:
            for r in final:
                v = r.value(self.metric.name) if r.ok else None
                if v is None:
                    continue
                values.append(v)
                steps.append(r.window_iters if self.metric.per_window else r.steps)  # what it is compared at
                ladders.append(r.loss_at)
                defined[r.definition(self.metric.name)] = None
        reason = next((r.reason for r in final if not r.ok and r.reason), "")
        measured = [r for r in final if r.ok and self.metric is not None and r.value(self.metric.name) is not None]
        quanta = resolution.of_rows(values, [r.resolution for r in measured], [r.printed for r in measured],
                                    self.metric.name) if self.metric is not None else resolution.Quanta()
        return Sample(tuple(r.status for r in final), tuple(values), reason, steps=tuple(steps),
                      ladders=tuple(ladders), definition=", ".join(defined), quanta=quanta)

